#!/usr/bin/env bash
# README command 2: install what is missing, then the contract drift check, the linters,
# the type check (the build) and every test against the real MariaDB (ORBIT_TEST_MYSQL,
# default root on 127.0.0.1:3306) and Debian's HAProxy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/ensure-mariadb.sh "${ORBIT_TEST_MYSQL:-}"
bash scripts/ensure-deploy-tools.sh
npm run --silent build
npm run --silent codegen:check
npm run --silent lint
npx mocha 'dist/test/**/*.test.js'
