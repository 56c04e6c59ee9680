#!/usr/bin/env bash
# README command 1: install what is missing and run a node on ORBIT_HOST:ORBIT_PORT
# (default 127.0.0.1:8080). Migrations run at start-up. A local MariaDB is set up only
# when ORBIT_DATABASE_URL is unset or names the local default; the build is the server's
# alone (incremental: a second start rebuilds only what changed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/ensure-mariadb.sh "${ORBIT_DATABASE_URL:-}"
npm run --silent build:server
exec node dist/src/cli/main.js serve "$@"
