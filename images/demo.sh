#!/usr/bin/env bash
# `make demo`: a plain Debian container that shows fake GPUs through `docker run --runtime=fakegpu`.
# Builds what is missing (the offline base image), registers the runtime (idempotent), runs nvidia-smi in a
# container. Any failed step fails the demo. Needs root (daemon.json) and the native build (`make native`).
#   FAKEGPU=path/to/fakegpu  DEMO_DEVICES=a100:2,h100  FAKEGPU_BASE_IMAGE=...  FAKEGPU_DEMO_LABEL=key=value
set -euo pipefail
cd "$(dirname "$0")/.."
FAKEGPU="${FAKEGPU:-.venv/bin/fakegpu}"
IMAGE="${FAKEGPU_BASE_IMAGE:-fakegpu/debian-base:bookworm}"
DEVICES="${DEMO_DEVICES:-a100:2,h100}"
LABEL="${FAKEGPU_DEMO_LABEL:-org.fakegpu.demo=1}"
NATIVE=native/build

step() { printf '\n== %s\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "registering a Docker runtime edits /etc/docker/daemon.json: run as root"
[ -x "$FAKEGPU" ] || die "no fakegpu CLI at $FAKEGPU (run \`make install\`)"
[ -f "$NATIVE/lib/libnvidia-ml.so.1" ] && [ -x "$NATIVE/bin/nvidia-smi" ] ||
  die "no native build in $NATIVE (run \`make native\`)"
docker info >/dev/null 2>&1 || die "Docker Engine not reachable"

step "host view: $FAKEGPU devices $DEVICES"
"$FAKEGPU" devices "$DEVICES"

step "base image $IMAGE"
images/bootstrap-base.sh "$IMAGE"

step "register the runtime: $FAKEGPU runtime install"
"$FAKEGPU" runtime install
for _ in $(seq 50); do
  docker info --format '{{json .Runtimes}}' | grep -q '"fakegpu"' && break
  sleep 0.2
done
docker info --format '{{json .Runtimes}}' | grep -q '"fakegpu"' || die "dockerd did not pick up the fakegpu runtime"

step "docker run --rm --runtime=fakegpu -e FAKEGPU_DEVICES=$DEVICES $IMAGE nvidia-smi"
docker run --rm --label "$LABEL" --runtime=fakegpu -e "FAKEGPU_DEVICES=$DEVICES" "$IMAGE" nvidia-smi

step "docker run --rm --runtime=fakegpu -e FAKEGPU_DEVICES=$DEVICES $IMAGE nvidia-smi -L"
docker run --rm --label "$LABEL" --runtime=fakegpu -e "FAKEGPU_DEVICES=$DEVICES" "$IMAGE" nvidia-smi -L

step "the same image without FAKEGPU_DEVICES sees no GPU"
docker run --rm --label "$LABEL" --runtime=fakegpu "$IMAGE" sh -c \
  'if command -v nvidia-smi || ls /dev/nvidia* 2>/dev/null; then exit 1; fi; echo "no nvidia-smi, no /dev/nvidia*"'
