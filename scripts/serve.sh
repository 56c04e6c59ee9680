#!/usr/bin/env bash
# README command 1: install what is missing and run a node on ORBIT_HOST:ORBIT_PORT
# (default 127.0.0.1:8080). Migrations run at start-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec node dist/src/cli/main.js serve "$@"
