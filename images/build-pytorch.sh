#!/usr/bin/env bash
# fakegpu/pytorch:<version> on top of fakegpu/cuda (its CUDA shims stand in for NVIDIA's libraries, so torch
# needs none of the nvidia-* wheels). Everything Python is downloaded and installed on the host for the image's
# interpreter (Debian bookworm: CPython 3.11, manylinux x86_64) and copied in; the build itself is offline.
# Usage: build-pytorch.sh [CUDA_IMAGE] [VERSION].  TORCH_VERSION (2.15.0), PIP (.venv/bin/pip),
# FAKEGPU_IMAGE_CACHE (~/.cache/fakegpu/images) override. Downloads and the torch tree are cached there.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${2:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)}"
CUDA_IMAGE="${1:-fakegpu/cuda:$VERSION}"
# The torch the venv has (what the tests ran against), so image and host agree.
TORCH_VERSION="${TORCH_VERSION:-$(.venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || echo 2.15.0)}"
PIP="${PIP:-.venv/bin/pip}"
CACHE="${FAKEGPU_IMAGE_CACHE:-$HOME/.cache/fakegpu/images}"
# The image's interpreter, not the host's: pip picks wheels for it whatever Python runs pip.
TARGET=(--python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:)
# torch's own requirements minus nvidia-*, cuda-* and triton (GPU-only), plus numpy (tensor.numpy()), and what
# fakegpu[k8s] adds (grpcio, grpcio-tools) so the image also serves as the Kubernetes device plugin's.
TORCH_PURE_DEPS=(filelock fsspec jinja2 networkx setuptools sympy typing-extensions numpy "grpcio>=1.62"
                 "grpcio-tools>=1.62")

docker image inspect "$CUDA_IMAGE" >/dev/null 2>&1 || {
  echo "build-pytorch: base image $CUDA_IMAGE missing (images/build.sh builds it)" >&2; exit 1; }

# The image carries a digest of what it is made of (images/inputs-digest.sh: this checkout's fakegpu, plus torch's
# version, the dependency list, this script, the Dockerfile and the base image). When it matches, the pip work and
# the build are skipped: about 90 s, and a new 216 MB layer each time, since pip's freshly compiled .pyc files
# defeat docker's layer cache. Outside a git checkout the digest is empty and the image is always built.
DIGEST=$(printf 'torch=%s deps=%s target=%s base=%s\n' "$TORCH_VERSION" "${TORCH_PURE_DEPS[*]}" "${TARGET[*]}" \
  "$(docker image inspect -f '{{.Id}}' "$CUDA_IMAGE")" | images/inputs-digest.sh images/pytorch/Dockerfile images/build-pytorch.sh)
if [ -n "$DIGEST" ] && [ -z "${FAKEGPU_IMAGE_REBUILD:-}" ] && [ "$(docker image inspect \
     -f '{{index .Config.Labels "org.fakegpu.inputs"}}' "fakegpu/pytorch:$VERSION" 2>/dev/null)" = "$DIGEST" ]; then
  docker tag "fakegpu/pytorch:$VERSION" fakegpu/pytorch:latest
  echo "fakegpu/pytorch:$VERSION is up to date with this checkout (FAKEGPU_IMAGE_REBUILD=1 rebuilds it)"
  exit 0
fi

WHEELS="$CACHE/wheels"
CTX="$CACHE/context"
mkdir -p "$WHEELS" "$CTX"

SITE_TORCH="$CTX/site-torch"
if [ ! -f "$SITE_TORCH/.torch-$TORCH_VERSION" ]; then
  echo "build-pytorch: installing torch $TORCH_VERSION (no nvidia-*/triton) into the build context"
  "$PIP" download -q --no-deps "${TARGET[@]}" -d "$WHEELS" "torch==$TORCH_VERSION"
  rm -rf "$SITE_TORCH"
  "$PIP" install -q --no-deps --no-index --find-links "$WHEELS" "${TARGET[@]}" --target "$SITE_TORCH" \
    "torch==$TORCH_VERSION"
  touch "$SITE_TORCH/.torch-$TORCH_VERSION"
fi

# fakegpu itself is rebuilt every time (seconds), so the image always carries this checkout's code.
# pip download copies the local fakegpu wheel into $WHEELS and, on the next build, takes the copy it finds there
# for the new one: its old dependencies would be resolved, and a dependency added since would be missing.
rm -rf "$CTX/site-rest" "$CTX/fakegpu-wheel" "$WHEELS"/fakegpu-*.whl
"$PIP" wheel -q --no-deps -w "$CTX/fakegpu-wheel" .
"$PIP" download -q "${TARGET[@]}" -d "$WHEELS" "$CTX"/fakegpu-wheel/*.whl "${TORCH_PURE_DEPS[@]}"
"$PIP" install -q --no-index --find-links "$WHEELS" "${TARGET[@]}" --target "$CTX/site-rest" \
  "$CTX"/fakegpu-wheel/*.whl "${TORCH_PURE_DEPS[@]}"
# fakecuda's C++ extension (charging hook and allocator model) for this torch: the image has no compiler, and the
# host's venv runs the same torch wheel, so the file built here loads there (extension.py looks in prebuilt/ when
# its cache has none). Without a compiler on the host the image charges through the slower Python path.
HOST_TORCH=$(.venv/bin/python -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
if [ "$HOST_TORCH" = "$TORCH_VERSION" ] && EXT=$(.venv/bin/python -m fakegpu.fakecuda.extension 2>&1 | tail -n1) \
     && [ -f "$EXT" ]; then
  mkdir -p "$CTX/site-rest/fakegpu/fakecuda/prebuilt"
  cp "$EXT" "$CTX/site-rest/fakegpu/fakecuda/prebuilt/"
else
  echo "build-pytorch: fakecuda's C++ extension not built for torch $TORCH_VERSION (host torch '$HOST_TORCH');" \
       "the image charges through the Python path" >&2
fi
cp images/pytorch/Dockerfile "$CTX/Dockerfile"
printf 'fakegpu-wheel\n' > "$CTX/.dockerignore"

docker build -q --build-arg "BASE=$CUDA_IMAGE" --build-arg "VERSION=$VERSION" \
  ${DIGEST:+--label "org.fakegpu.inputs=$DIGEST"} -t "fakegpu/pytorch:$VERSION" -t fakegpu/pytorch:latest "$CTX" >/dev/null
echo "built fakegpu/pytorch:$VERSION (base $CUDA_IMAGE, torch $TORCH_VERSION)"
