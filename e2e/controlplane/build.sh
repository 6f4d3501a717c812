#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kubectl, helm)
# from the Go module proxy and caches the binaries outside the repository, keyed by version.
# Only missing binaries are built; a finished binary is moved into place atomically, so an
# interrupted build never leaves a half-written file in the cache.
#
#   e2e/controlplane/build.sh            # build what is missing, print the cache directory
#   LEASECRON_ASSETS=/dir build.sh       # use /dir instead of the default cache (no build if complete)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_name=controlplane
# shellcheck source=../build-lib.sh
source "$here/../build-lib.sh"  # K8S_VERSION, cache_root, log, progress, build_one
HELM_VERSION="v3.20.2"
dest="${LEASECRON_ASSETS:-$cache_root/k8s-$K8S_VERSION}"
binaries=(etcd kube-apiserver kube-controller-manager kubectl helm)

missing=()
for b in "${binaries[@]}"; do [[ -x "$dest/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build the control plane (missing: ${missing[*]})"; exit 1; }
mkdir -p "$dest"
exec 9>"$dest/.build.lock"
log "waiting for the build lock $dest/.build.lock"
flock 9
log "building ${missing[*]} into $dest (first build: ~1 GB of modules, 15-30 min on 2 cores)"

build_one etcd go.etcd.io/etcd/server/v3
build_one kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build_one kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build_one kubectl k8s.io/kubernetes/cmd/kubectl
if [[ ! -x "$dest/helm" ]]; then
  start=$SECONDS
  log "building helm $HELM_VERSION"
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" 2>&1 | progress helm
  mv -f "$tmp/helm" "$dest/helm"; rm -rf "$tmp"
  log "built helm in $((SECONDS - start)) s"
fi
printf '%s\n' "$K8S_VERSION" > "$dest/VERSION"
log "control plane ready in $dest ($(du -sh "$dest" | cut -f1))"
echo "$dest"
