#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow checker) from the Go module proxy once and
# caches it outside the repository, keyed by version, like the control-plane binaries; then
# runs it with the given arguments (from the repository root it finds .github/workflows).
#
#   e2e/tools/actionlint.sh             # check .github/workflows/*.yml
#   e2e/tools/actionlint.sh --path      # print the cached binary's path (build if missing)
set -euo pipefail

VERSION="v1.7.12"
cache_root="${LEASECRON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasecron}"
dest="$cache_root/actionlint-$VERSION"
binary="$dest/actionlint"

log() { printf '[actionlint %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ ! -x "$binary" ]]; then
  command -v go >/dev/null || { log "Go is required to build actionlint $VERSION"; exit 1; }
  mkdir -p "$dest"
  exec 9>"$dest/.build.lock"
  flock 9
  if [[ ! -x "$binary" ]]; then
    start=$SECONDS
    log "building actionlint $VERSION from the Go module proxy into $dest"
    tmp="$(mktemp -d)"
    GOBIN="$tmp" go install -trimpath -ldflags "-s -w -X main.version=$VERSION" \
      "github.com/rhysd/actionlint/cmd/actionlint@$VERSION"
    mv -f "$tmp/actionlint" "$binary"
    rm -rf "$tmp"
    log "built actionlint in $((SECONDS - start)) s"
  fi
fi
if [[ "${1:-}" == "--path" ]]; then
  echo "$binary"
  exit 0
fi
exec "$binary" "$@"
