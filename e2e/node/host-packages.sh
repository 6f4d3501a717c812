#!/usr/bin/env bash
# Installs the host packages the real node and the operator image build need, when one is
# missing and this machine can install it (root with apt-get: Debian and Ubuntu); elsewhere it
# names what is missing and leaves it to the user (the real-pod tests then skip, naming it).
# The apt-get logic is e2e/tools/apt-packages.sh.
#
#   e2e/node/host-packages.sh
set -euo pipefail

# Debian package=command (or path) that shows it is installed
exec bash "$(dirname "${BASH_SOURCE[0]}")/../tools/apt-packages.sh" --tag node \
  --for "host packages for the real node" --hint "install them to run the real-pod tests" \
  runc=runc podman=podman iptables=iptables conntrack=conntrack nftables=nft \
  debootstrap=debootstrap iproute2=ip util-linux=unshare \
  containernetworking-plugins=/usr/lib/cni/bridge,/opt/cni/bin/bridge
