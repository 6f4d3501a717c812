#!/usr/bin/env bash
# Prints the container engine to use: $CONTAINER_ENGINE if set, else docker when its daemon
# answers, else podman when installed. Exits 1 with the reason when there is none (a docker
# client without a daemon does not count).
set -euo pipefail

if [[ -n "${CONTAINER_ENGINE:-}" ]]; then
  echo "$CONTAINER_ENGINE"
  exit 0
fi
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  echo docker
  exit 0
fi
if command -v podman >/dev/null; then
  echo podman
  exit 0
fi
if command -v docker >/dev/null; then
  echo "no container engine: docker is installed but its daemon does not answer, podman is not installed" >&2
else
  echo "no container engine: neither docker nor podman is installed" >&2
fi
exit 1
