#!/usr/bin/env bash
# Builds the node of the real single-node test cluster (leasecron.testing.NodeCluster) from the
# Go module proxy and caches it outside the repository, keyed by version, beside the control
# plane (e2e/controlplane/build.sh, whose etcd, kube-apiserver, kube-controller-manager,
# kubectl and helm the cluster also uses):
#
#   kubelet, kube-scheduler, kube-proxy   this module (go.mod: the control plane's + 3 tools)
#   containerd, containerd-shim-runc-v2, ctr   `go install` of containerd v2.2.3
#   pause.tar                              the pod sandbox image (./pause, FROM scratch), a
#                                          docker-archive that `ctr images import` reads
#
#   e2e/node/build.sh            # build what is missing, print the cache directory
#
# Only missing files are built; each is moved into place atomically. The Kubernetes binaries
# share the control plane's Go build cache, so they wait for its build lock (40 s after it,
# about 5 min from nothing); containerd takes about 75 s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_name=node
# shellcheck source=../build-lib.sh
source "$here/../build-lib.sh"  # K8S_VERSION, cache_root, log, progress, build_one
CONTAINERD_VERSION="v2.2.3"
PAUSE_IMAGE="localhost/leasecron/pause:1.0"
dest="$cache_root/node-$K8S_VERSION-containerd-$CONTAINERD_VERSION"
kube=(kubelet kube-scheduler kube-proxy)
ctrd=(containerd containerd-shim-runc-v2 ctr)

missing=()
for b in "${kube[@]}" "${ctrd[@]}"; do [[ -x "$dest/$b" ]] || missing+=("$b"); done
[[ -s "$dest/pause.tar" ]] || missing+=(pause.tar)
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$dest"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build the test node (missing: ${missing[*]})"; exit 1; }
mkdir -p "$dest"
exec 9>"$dest/.build.lock"
flock 9
log "building ${missing[*]} into $dest"

need_ctrd=0
for b in "${ctrd[@]}"; do [[ -x "$dest/$b" ]] || need_ctrd=1; done
if [[ $need_ctrd == 1 ]]; then
  start=$SECONDS
  tmp="$(mktemp -d)"
  log "building containerd $CONTAINERD_VERSION (containerd, containerd-shim-runc-v2, ctr)"
  pkg=github.com/containerd/containerd/v2/cmd
  GOBIN="$tmp" CGO_ENABLED=0 go install -v -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    "$pkg/containerd@$CONTAINERD_VERSION" "$pkg/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "$pkg/ctr@$CONTAINERD_VERSION" 2>&1 | progress containerd
  for b in "${ctrd[@]}"; do mv -f "$tmp/$b" "$dest/$b"; done
  rm -rf "$tmp"
  log "built containerd in $((SECONDS - start)) s"
fi

if [[ ! -s "$dest/pause.tar" ]]; then
  # A docker-archive by hand (one layer holding /pause): no container engine needed.
  tmp="$(mktemp -d)"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/root/pause" ./pause)
  tar --sort=name --owner=0 --group=0 --mtime=@0 -C "$tmp/root" -cf "$tmp/layer.tar" pause
  diff_id="$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)"
  printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$(go env GOARCH)" "$diff_id" >"$tmp/config.json"
  config="$(sha256sum "$tmp/config.json" | cut -d' ' -f1)"
  mv "$tmp/config.json" "$tmp/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config" "$PAUSE_IMAGE" \
    >"$tmp/manifest.json"
  tar --sort=name --owner=0 --group=0 --mtime=@0 -C "$tmp" -cf "$dest/.pause.tar.tmp" \
    manifest.json "$config.json" layer.tar
  mv -f "$dest/.pause.tar.tmp" "$dest/pause.tar"
  rm -rf "$tmp"
  log "pause image $PAUSE_IMAGE saved in $dest/pause.tar"
fi

need_kube=0
for b in "${kube[@]}"; do [[ -x "$dest/$b" ]] || need_kube=1; done
if [[ $need_kube == 1 ]]; then
  # The control plane's build fills the Go build cache these reuse: wait for it.
  cp_dest="$cache_root/k8s-$K8S_VERSION"
  mkdir -p "$cp_dest"
  exec 8>"$cp_dest/.build.lock"
  log "waiting for the control plane's build lock $cp_dest/.build.lock"
  flock 8
  for name in "${kube[@]}"; do build_one "$name" "k8s.io/kubernetes/cmd/$name"; done
  exec 8>&-
fi
printf '%s %s\n' "$K8S_VERSION" "$CONTAINERD_VERSION" >"$dest/VERSION"
log "node ready in $dest ($(du -sh "$dest" | cut -f1))"
echo "$dest"
