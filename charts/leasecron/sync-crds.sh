#!/usr/bin/env bash
# Refreshes the chart's copy of the CRDs from the repository's source of truth (crds/).
# templates/crds.yaml renders the copy in files/crds/ (Helm can only read files inside the
# chart), so it must match byte for byte; tests/unit/chart/test_chart_static.py checks that it
# does.
#
#   charts/leasecron/sync-crds.sh
set -euo pipefail

chart="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$chart/../../crds"
target_dir="$chart/files/crds"

shopt -s nullglob
sources=("$source_dir"/*.yaml)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "no CRD files in $source_dir: generate them first" >&2
  exit 1
fi

mkdir -p "$target_dir"
rm -f "$target_dir"/*.yaml
cp "${sources[@]}" "$target_dir"/
printf 'copied %d CRD file(s) into %s\n' "${#sources[@]}" "$target_dir"
