#!/usr/bin/env bash
# The deployment tests (test/deploy/) run Debian's HAProxy in front of real nodes with a
# certificate made by openssl, and check the systemd unit with systemd-analyze: install
# what is missing from Debian's archive. Used by the test command; a second run changes
# nothing. Never starts a service.
set -euo pipefail

missing=()
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-deploy-tools: ${missing[*]} missing; install Debian's package(s) (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "ensure-deploy-tools: installing ${missing[*]} from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be stale or absent on a fresh machine: refresh them once if needed.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
