#!/usr/bin/env bash
# `make images`: the offline Debian base (once), then fakegpu/cuda:<version> when the native build exists, then
# fakegpu/pytorch:<version> on top of it (images/build-pytorch.sh).
# BASE_IMAGE may name any Debian-like image a registry offers (e.g. debian:bookworm-slim) to skip debootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
BASE_IMAGE="${BASE_IMAGE:-fakegpu/debian-base:bookworm}"
NATIVE=native/build

if [ "$BASE_IMAGE" = "fakegpu/debian-base:bookworm" ]; then
  images/bootstrap-base.sh "$BASE_IMAGE"
fi

if [ ! -f "$NATIVE/lib/libnvidia-ml.so.1" ] || [ ! -x "$NATIVE/bin/nvidia-smi" ]; then
  echo "images: no native build in $NATIVE (run \`make\`); fakegpu/cuda not built"
  exit 0
fi

CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/lib" "$CTX/bin"
# Copy the shared objects (links kept as links) and the catalog; nvidia-smi is the only binary shipped.
cp -P "$NATIVE"/lib/lib*.so* "$CTX/lib/"
cp "$NATIVE/lib/catalog.tbl" "$CTX/lib/catalog.tbl"  # make copies the compiled one there
cp "$NATIVE/bin/nvidia-smi" "$CTX/bin/"
cp images/cuda/Dockerfile "$CTX/"
docker build -q --build-arg "BASE=$BASE_IMAGE" --build-arg "VERSION=$VERSION" \
  -t "fakegpu/cuda:$VERSION" -t fakegpu/cuda:latest "$CTX" >/dev/null
echo "built fakegpu/cuda:$VERSION (base $BASE_IMAGE)"

# fakegpu/pytorch: torch and fakegpu prepared on the host (see images/pytorch/Dockerfile for why this way).
images/build-pytorch.sh "fakegpu/cuda:$VERSION" "$VERSION"
