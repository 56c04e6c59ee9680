#!/usr/bin/env bash
# Shared by both README commands: a Node.js that fits, then the npm dependencies when
# they are missing or differ from the lock file. The database and the build are each
# command's own (serve.sh builds the server only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check-node.sh
if [ ! -d node_modules ] || ! npm ls --silent >/dev/null 2>&1; then
  npm ci --no-audit --no-fund
fi
