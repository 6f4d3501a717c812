#!/usr/bin/env bash
# Installs the Debian packages a make target needs when one is missing and this machine can
# install them (root with apt-get: Debian and Ubuntu); elsewhere it names what is missing and
# leaves it to the user (exit 0), or fails (exit 1) with --required. Each PACKAGE=CHECK,...
# names a Debian package and what shows it is there: a command on PATH, or (a CHECK with a /)
# a path or glob that exists; any one CHECK will do. Nothing is run when all are present.
#
#   e2e/tools/apt-packages.sh --tag TAG [--for WHAT] [--hint TEXT] [--required]
#                             [--no-install-recommends] PACKAGE=CHECK[,CHECK...] ...
set -euo pipefail

tag=apt for="" hint="" required=0 apt_options=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --for) for=$2; shift 2 ;;
    --hint) hint=$2; shift 2 ;;
    --required) required=1; shift ;;
    --no-install-recommends) apt_options+=("$1"); shift ;;
    *) printf 'apt-packages.sh: unknown option %s\n' "$1" >&2; exit 2 ;;
  esac
done

log() { printf '[%s %s] %s\n' "$tag" "$(date +%H:%M:%S)" "$*" >&2; }

present() {  # CHECK: a command on PATH, or a path (glob) that exists
  if [[ $1 == */* ]]; then compgen -G "$1" >/dev/null; else command -v "$1" >/dev/null; fi
}

missing=()
for want in "$@"; do
  package=${want%%=*} found=0
  IFS=, read -ra checks <<<"${want#*=}"
  for check in "${checks[@]}"; do
    if present "$check"; then found=1; break; fi
  done
  [[ $found -eq 1 ]] || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing${for:+ $for}: ${missing[*]}${hint:+ ($hint)}"
  exit "$required"
fi
log "installing${for:+ $for:} ${missing[*]}"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_options[@]}" "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
