#!/usr/bin/env bash
# Installs the servers the store tests run against (PostgreSQL and Redis, as Debian
# packages), when one is missing and this machine can install it (root with apt-get: Debian
# and Ubuntu); elsewhere it names what is missing and leaves it to the user (the store tests
# then skip, naming it). The tests start their own servers, on free ports, as an unprivileged
# user when run as root (leasecron.testing._stores); the packages' own services are not used.
#
#   e2e/stores/host-packages.sh
set -euo pipefail

log() { printf '[stores %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
# PostgreSQL: pg_ctl on PATH or in Debian's versioned directory.
if ! command -v pg_ctl >/dev/null && ! compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
  missing+=(postgresql)
fi
command -v redis-server >/dev/null || missing+=(redis-server)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing host packages for the store tests: ${missing[*]} (install them to run those tests)"
  exit 0
fi
log "installing host packages for the store tests: ${missing[*]}"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
