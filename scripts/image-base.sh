#!/usr/bin/env bash
# Sets up this machine to build and run the image without a registry: installs podman, buildah,
# runc and debootstrap from Debian when missing, and makes a local base image (Debian bookworm,
# minbase, with Python 3.11, venv, pip and CA certificates) from Debian's packages with debootstrap
# + podman import. `make image` passes it as PYTHON_IMAGE; users keep python:3.11-slim.
#
#   BASE_IMAGE   the tag to make (default localhost/ocr-base:bookworm); nothing is done when present
#   DEBIAN_MIRROR  debootstrap's mirror (default: debootstrap's own)
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/scripts/podman/containers.conf"
BASE_IMAGE="${BASE_IMAGE:-localhost/ocr-base:bookworm}"
TOOLS=(podman buildah runc debootstrap)
PACKAGES=(podman buildah runc debootstrap fuse-overlayfs uidmap netavark aardvark-dns)

missing=()
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "image-base: missing ${missing[*]}; install ${PACKAGES[*]} (Debian) and retry" >&2
    exit 1
  fi
  echo "image-base: installing ${PACKAGES[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"
fi

if podman image exists "$BASE_IMAGE"; then
  echo "image-base: $BASE_IMAGE already present"
  exit 0
fi

root="$(mktemp -d /var/tmp/ocr-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "image-base: debootstrap bookworm (minbase) into $root"
# shellcheck disable=SC2086
debootstrap --variant=minbase \
  --include=python3,python3-venv,python3-pip,ca-certificates,python-is-python3 \
  bookworm "$root" ${DEBIAN_MIRROR:-}
# What an image wants and a chroot leaves: no apt lists or caches, no host's resolv.conf.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
: >"$root/etc/resolv.conf"
tar -C "$root" --numeric-owner -c . | podman import \
  --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' - "$BASE_IMAGE"
echo "image-base: made $BASE_IMAGE"
