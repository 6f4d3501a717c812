#!/usr/bin/env bash
# Makes a local stand-in for the Dockerfile's base image (python:3.11-slim) on machines that
# cannot pull from a registry: a minimal Debian 12 root filesystem (its python3 is 3.11) made
# with debootstrap and imported into podman or docker as localhost/python:3.11-slim.
#
#   e2e/containers/base-image.sh podman     # import if missing or stale, print the image name
#
# Nothing here is for users: they pull python:3.11-slim as usual. The root filesystem tarball
# is cached outside the repository, keyed by everything that goes into it, like the
# control-plane binaries; the image carries the key as a label, so a stale image (another
# recipe) is replaced and an up-to-date one costs nothing. Needs root and debootstrap.
set -euo pipefail

engine="${1:-podman}"
IMAGE="localhost/python:3.11-slim"
SUITE="bookworm"
PACKAGES="python3,python3-venv,python-is-python3,ca-certificates"
RECIPE="1"  # bump when the steps below change
key="$(printf '%s|%s|%s' "$SUITE" "$PACKAGES" "$RECIPE" | sha256sum | cut -c1-12)"
cache_root="${LEASECRON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasecron}"
tarball="$cache_root/base-image-$SUITE-$key.tar"

log() { printf '[base-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

run_engine() {
  if [[ "$engine" == podman ]]; then podman --runtime runc "$@"; else "$engine" "$@"; fi
}

current="$(run_engine image inspect --format '{{ index .Config.Labels "dev.leasecron.base-key" }}' \
  "$IMAGE" 2>/dev/null || true)"
if [[ "$current" == "$key" ]]; then
  echo "$IMAGE"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.base-image.lock"
flock 9
if [[ ! -s "$tarball" ]]; then
  command -v debootstrap >/dev/null || {
    log "debootstrap is missing (Debian/Ubuntu: apt-get install -y debootstrap)"
    exit 1
  }
  mirror="${DEBIAN_MIRROR:-}"
  if [[ -z "$mirror" && -r /etc/apt/sources.list.d/debian.sources ]]; then
    mirror="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
  fi
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
  start=$SECONDS
  log "debootstrap $SUITE ($PACKAGES) from $mirror (about a minute)"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" \
    >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log" >&2; log "debootstrap failed"; exit 1; }
  # No apt lists or caches in the image; they are of no use without apt-get update anyway.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -cf "$tarball.tmp" .
  mv -f "$tarball.tmp" "$tarball"
  log "root filesystem cached in $tarball ($(du -h "$tarball" | cut -f1), $((SECONDS - start)) s)"
fi
log "importing $tarball as $IMAGE"
run_engine import \
  --change "LABEL dev.leasecron.base-key=$key" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' \
  "$tarball" "$IMAGE" >/dev/null
echo "$IMAGE"
