#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for `make docs-check` when one is missing and
# this machine can install them (root with apt-get); elsewhere it names what is missing and
# fails, since the check cannot run without a browser.
#
#   e2e/docs/chromium.sh
set -euo pipefail

log() { printf '[docs-check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing: ${missing[*]} (install them, or point CHROMIUM and CHROMEDRIVER at a browser and its driver)"
  exit 1
fi
log "installing ${missing[*]}"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
