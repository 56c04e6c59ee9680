#!/usr/bin/env bash
# README command 2: install what is missing, then the contract drift check, the linters,
# the type check (the build) and every test against the real MariaDB.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/ensure-deploy-tools.sh
npm run --silent codegen:check
npm run --silent lint
npx mocha 'dist/test/**/*.test.js'
