# Sourced by build.sh and smoke.sh: podman, runc and debootstrap present (apt-get installs them
# as root when missing), CONTAINERS_CONF pointing at this folder's containers.conf.
set -euo pipefail
IMAGE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="$IMAGE_DIR/containers.conf"

need_tools() {
  local missing=()
  for tool in "$@"; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "image: missing ${missing[*]}: install them (apt-get install podman runc debootstrap)" >&2
    exit 1
  fi
  echo "image: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
