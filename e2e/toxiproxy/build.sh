#!/usr/bin/env bash
# Builds Toxiproxy's server (a TCP proxy whose faults are set over an HTTP API) from the Go
# module proxy and caches it outside the repository, keyed by version, like
# e2e/controlplane/build.sh does for the control plane. Built only when missing; the finished
# binary is moved into place atomically.
#
#   e2e/toxiproxy/build.sh               # build when missing, print the cache directory
set -euo pipefail

TOXIPROXY_VERSION="v2.12.0"
cache_root="${LEASECRON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasecron}"
dest="$cache_root/toxiproxy-$TOXIPROXY_VERSION"

log() { printf '[toxiproxy %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$dest/toxiproxy-server" ]]; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build toxiproxy-server"; exit 1; }
mkdir -p "$dest"
exec 9>"$dest/.build.lock"
log "waiting for the build lock $dest/.build.lock"
flock 9
if [[ ! -x "$dest/toxiproxy-server" ]]; then
  start=$SECONDS
  log "building toxiproxy-server $TOXIPROXY_VERSION into $dest"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # One progress line per 25 packages compiled instead of the full `go install -v` list.
  GOBIN="$tmp" GOFLAGS=-mod=mod go install -v -trimpath \
    -ldflags "-s -w -X github.com/Shopify/toxiproxy/v2.Version=$TOXIPROXY_VERSION" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" 2>&1 \
    | awk '{ n++; if (n % 25 == 0) { printf "[toxiproxy] %d packages compiled\n", n; fflush() } }' >&2
  [[ -x "$tmp/server" ]] || { log "go install produced no binary"; exit 1; }
  mv -f "$tmp/server" "$dest/toxiproxy-server"
  printf '%s\n' "$TOXIPROXY_VERSION" > "$dest/VERSION"
  log "built toxiproxy-server in $((SECONDS - start)) s"
fi
echo "$dest"
