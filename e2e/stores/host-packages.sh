#!/usr/bin/env bash
# Installs the servers the store tests run against (PostgreSQL and Redis, as Debian
# packages), when one is missing and this machine can install it (root with apt-get: Debian
# and Ubuntu); elsewhere it names what is missing and leaves it to the user (the store tests
# then skip, naming it). The tests start their own servers, on free ports, as an unprivileged
# user when run as root (leasecron.testing._stores); the packages' own services are not used.
# The apt-get logic is e2e/tools/apt-packages.sh.
#
#   e2e/stores/host-packages.sh
set -euo pipefail

# PostgreSQL: pg_ctl on PATH or in Debian's versioned directory.
exec bash "$(dirname "${BASH_SOURCE[0]}")/../tools/apt-packages.sh" --tag stores \
  --for "host packages for the store tests" --hint "install them to run those tests" \
  --no-install-recommends \
  postgresql=pg_ctl,/usr/lib/postgresql/*/bin/pg_ctl redis-server=redis-server
