#!/usr/bin/env bash
# `make image`: builds the image's variants with podman, offline apart from the package indexes.
#
#   scripts/image-build.sh [VARIANT...]   cpu (default), gpu, gpu-torch; tagged ocr-serving:VARIANT
#
#   IMAGE_BASE        base of cpu and gpu-torch, and the wheel's builder; default: a local Debian bookworm
#                     image made by scripts/image-base.sh. IMAGE_BASE=python:3.11-slim where a
#                     registry is reachable.
#   PADDLE_GPU_IMAGE  base of gpu; built only when that image is present locally (no registry here)
#   CA_BUNDLE         CA bundle handed to the build's pip steps as a secret (default: the one pip
#                     or the system uses); never stored in the image
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/scripts/podman/containers.conf"
IMAGE="${IMAGE:-ocr-serving}"
IMAGE_BASE="${IMAGE_BASE:-localhost/ocr-base:bookworm}"
PADDLE_GPU_IMAGE="${PADDLE_GPU_IMAGE:-paddlepaddle/paddle:3.2.2-gpu-cuda12.6-cudnn9.5}"
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(cpu)

if [[ "$IMAGE_BASE" == localhost/* ]]; then
  BASE_IMAGE="$IMAGE_BASE" bash scripts/image-base.sh
fi

ca="${CA_BUNDLE:-${PIP_CERT:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}}"
secret=()
if [ -s "$ca" ]; then
  secret=(--secret "id=ca,src=$ca")
fi

status=0
for variant in "${variants[@]}"; do
  case "$variant" in
    cpu) ;;
    gpu)
      if ! podman image exists "$PADDLE_GPU_IMAGE"; then
        echo "image-build: skipping gpu: base $PADDLE_GPU_IMAGE is not present here" \
          "(podman pull it, or podman load it from a saved copy, and retry)" >&2
        continue
      fi ;;
    gpu-torch)
      if ! grep -q '^torch = \[' pyproject.toml; then
        echo "image-build: skipping gpu-torch: pyproject.toml has no torch extra yet" >&2
        continue
      fi ;;
    *) echo "image-build: unknown variant $variant (cpu, gpu, gpu-torch)" >&2; exit 2 ;;
  esac
  echo "image-build: $IMAGE:$variant"
  start=$(date +%s)
  base="$IMAGE_BASE"
  backend=paddle
  cpu_backend=openvino
  # Paddle's GPU image: its CPU devices run the Paddle it already has.
  [ "$variant" != gpu ] || { base="$PADDLE_GPU_IMAGE"; cpu_backend=paddle; }
  [ "$variant" != gpu-torch ] || backend=torch
  # --format docker: the OCI image format has no HEALTHCHECK, and podman would drop it.
  if ! podman build --network=host --format docker --layers "${secret[@]}" \
      --build-arg "VARIANT=$variant" \
      --build-arg "GPU_BACKEND=$backend" \
      --build-arg "CPU_BACKEND=$cpu_backend" \
      --build-arg "PYTHON_IMAGE=$IMAGE_BASE" \
      --build-arg "BASE_IMAGE=$base" \
      -t "$IMAGE:$variant" .; then
    status=1
    continue
  fi
  size=$(podman image inspect --format '{{.Size}}' "$IMAGE:$variant")
  echo "image-build: $IMAGE:$variant built in $(( $(date +%s) - start )) s," \
    "$(( size / 1000000 )) MB"
done
exit $status
