#!/usr/bin/env bash
# Installs the host packages the real node and the operator image build need, when one is
# missing and this machine can install it (root with apt-get: Debian and Ubuntu); elsewhere it
# names what is missing and leaves it to the user (the real-pod tests then skip, naming it).
#
#   e2e/node/host-packages.sh
set -euo pipefail

# command -> Debian package
declare -A wanted=(
  [runc]=runc
  [podman]=podman
  [iptables]=iptables
  [conntrack]=conntrack
  [nft]=nftables
  [debootstrap]=debootstrap
  [ip]=iproute2
  [unshare]=util-linux
)
log() { printf '[node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
for tool in "${!wanted[@]}"; do
  command -v "$tool" >/dev/null || missing+=("${wanted[$tool]}")
done
[[ -e /usr/lib/cni/bridge || -e /opt/cni/bin/bridge ]] || missing+=(containernetworking-plugins)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing host packages for the real node: ${missing[*]} (install them to run the real-pod tests)"
  exit 0
fi
log "installing host packages for the real node: ${missing[*]}"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
log "installed ${missing[*]}"
