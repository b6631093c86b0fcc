#!/usr/bin/env bash
# `make image`: build Dockerfile (or Dockerfile.cuda) with podman on a machine with no Docker
# engine and no reachable container registry (docs/image.md).
#   deploy/image/build.sh TAG [DOCKERFILE [podman build flags, e.g. --build-arg OMIT=...]]
# - installs podman, runc, debootstrap with apt-get when missing (root, Debian);
# - BASE_IMAGE (default localhost/base:py311) is made when missing and named localhost/...:
#   Debian bookworm minbase + python3.11 by debootstrap, imported into podman (~40 s);
# - RUN steps get the host network, the host's CA bundle and a pip.conf naming the host's
#   find-links folder (`pip config get global.find-links`), where the CPU torch wheel lies;
# - layers are cached (`--layers`): a second build with nothing changed takes seconds.
set -euo pipefail
source "$(dirname "$0")/podman_env.sh"
TAG="${1:?usage: build.sh TAG [DOCKERFILE]}"
DOCKERFILE="${2:-Dockerfile}"
shift $(( $# < 2 ? $# : 2 ))
BASE_IMAGE="${BASE_IMAGE:-localhost/base:py311}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
ROOT="$(cd "$IMAGE_DIR/../.." && pwd)"

need_tools podman runc debootstrap

if ! podman image exists "$BASE_IMAGE"; then
  if [[ "$BASE_IMAGE" != localhost/* ]]; then
    echo "image: base $BASE_IMAGE not in podman's store (pull or import it first)" >&2
    exit 1
  fi
  echo "image: creating $BASE_IMAGE (debootstrap bookworm minbase + python3.11)"
  rootfs="$(mktemp -d /var/tmp/thaw-base.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$rootfs" >/dev/null
  # apt's lists and caches are not part of a base image
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
fi

# The host's find-links folder: PIP_FIND_LINKS, else what pip's configuration names.
wheels="${PIP_FIND_LINKS:-}"
if [ -z "$wheels" ]; then
  for pip in "$ROOT/.venv/bin/pip" pip3; do
    if command -v "$pip" >/dev/null; then
      wheels="$("$pip" config get global.find-links 2>/dev/null || true)"
      break
    fi
  done
fi
wheels="${wheels%% *}"  # the first folder, where several are named
torch_index=()
if [ -n "$wheels" ] && [ -d "$wheels" ]; then
  torch_index=(--build-arg TORCH_INDEX_URL=)  # the CPU torch wheel is there
else
  wheels="$(mktemp -d)"  # none: torch's CPU wheel from the Dockerfile's TORCH_INDEX_URL
fi

echo "image: podman build -f $DOCKERFILE -t $TAG (base $BASE_IMAGE, find-links $wheels)"
start=$(date +%s)
podman build --layers --pull=never --network host \
  -f "$ROOT/$DOCKERFILE" -t "$TAG" \
  --build-arg BASE_IMAGE="$BASE_IMAGE" "${torch_index[@]}" \
  -v "$CA_BUNDLE:/host-ca.crt:ro" \
  -v "$IMAGE_DIR/pip.conf:/etc/pip.conf:ro" \
  -v "$wheels:/wheels:ro" \
  "$@" "$ROOT"
echo "image: built $TAG in $(( $(date +%s) - start )) s, $(podman image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.2f GiB", $1/2^30}')"
