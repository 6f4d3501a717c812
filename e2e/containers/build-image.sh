#!/usr/bin/env bash
# Builds the operator image from the Dockerfile with docker or podman (whichever runs here).
#
#   e2e/containers/build-image.sh leasecron/operator:dev [extra build flags...]
#   PYTHON_IMAGE=registry.example.com/python:3.11-slim e2e/containers/build-image.sh TAG
#
# Base image: $PYTHON_IMAGE when set (passed as --build-arg PYTHON_IMAGE). Otherwise the
# Dockerfile's python:3.11-slim, pulled if it is not present; where no registry can be
# reached and podman runs as root, a stand-in is made from Debian's packages instead
# (e2e/containers/base-image.sh) and the host's CA bundle is mounted for the build only, so
# pip trusts what the host trusts. Prints the build time and the image size at the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tag="${1:?usage: build-image.sh TAG [build flags...]}"
shift
engine="$(bash "$here/engine.sh")"
log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
run_engine() {
  if [[ "$engine" == podman ]]; then podman --runtime runc "$@"; else "$engine" "$@"; fi
}

flags=()
base="${PYTHON_IMAGE:-}"
if [[ -z "$base" ]]; then
  default_base="docker.io/library/python:3.11-slim"
  if run_engine image inspect "$default_base" >/dev/null 2>&1 \
    || run_engine pull -q "$default_base" >/dev/null 2>&1; then
    base="$default_base"
  elif [[ "$engine" == podman && "$(id -u)" == 0 ]] && command -v debootstrap >/dev/null; then
    log "$default_base cannot be pulled here; using a local stand-in made from Debian's packages"
    base="$(bash "$here/base-image.sh" podman)"
    [[ -d /etc/ssl/certs ]] && flags+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
  else
    log "$default_base cannot be pulled; set PYTHON_IMAGE to a Python 3.11 image you can reach"
    exit 1
  fi
fi
[[ "$engine" == podman ]] && flags+=(--network host)

log "building $tag with $engine on $base"
start=$(date +%s.%N)
run_engine build "${flags[@]}" --build-arg "PYTHON_IMAGE=$base" -t "$tag" "$@" "$root"
seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
size=$(run_engine image inspect --format '{{.Size}}' "$tag")
log "built $tag in ${seconds} s; size $(awk -v b="$size" 'BEGIN { printf "%.0f MB", b / 1e6 }') (base $base)"
