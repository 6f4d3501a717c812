#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for `make docs-check` when one is missing and
# this machine can install them (root with apt-get); elsewhere it names what is missing and
# fails, since the check cannot run without a browser (e2e/tools/apt-packages.sh).
#
#   e2e/docs/chromium.sh
set -euo pipefail

exec bash "$(dirname "${BASH_SOURCE[0]}")/../tools/apt-packages.sh" --tag docs-check --required \
  --hint "install them, or point CHROMIUM and CHROMEDRIVER at a browser and its driver" \
  chromium=chromium chromium-driver=chromedriver
