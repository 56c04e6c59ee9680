#!/usr/bin/env bash
# Both README commands need Node.js at the version package.json's "engines" names (and
# its npm): say so, and what to do, before anything is installed or built.
set -euo pipefail
cd "$(dirname "$0")/.."

# ">=20.19" in package.json, read without Node: it may be the missing piece.
required=$(sed -n 's/.*"node": *">=\([0-9][0-9.]*\)".*/\1/p' package.json | head -n1)
advice="install Node.js $required or later (https://nodejs.org, or a Node.js 20/22 package of your distribution), then run this again"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "check-node: Node.js and npm are needed: $advice" >&2
  exit 1
fi
have=$(node --version 2>/dev/null | sed 's/^v//')
# Compare major.minor numerically: 20.19 <= have.
IFS=. read -r rmaj rmin _ <<<"$required.0"
IFS=. read -r hmaj hmin _ <<<"$have.0.0"
if [ "${hmaj:-0}" -lt "$rmaj" ] || { [ "${hmaj:-0}" -eq "$rmaj" ] && [ "${hmin:-0}" -lt "$rmin" ]; }; then
  echo "check-node: Node.js $have is too old for Orbit: $advice" >&2
  exit 1
fi
