#!/usr/bin/env bash
# Shared by both README commands: a database that answers, dependencies, a build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-mariadb.sh
if [ ! -d node_modules ] || ! npm ls --silent >/dev/null 2>&1; then
  npm ci --no-audit --no-fund
fi
npm run --silent build
