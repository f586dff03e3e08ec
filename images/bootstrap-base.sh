#!/usr/bin/env bash
# Make the offline Debian base image (no registry needed): debootstrap a minbase root with python3, then
# `docker import` it. Skips the work when the image already exists. Usage: bootstrap-base.sh [IMAGE]
set -euo pipefail
IMAGE="${1:-${FAKEGPU_BASE_IMAGE:-fakegpu/debian-base:bookworm}}"
SUITE="${FAKEGPU_BASE_SUITE:-bookworm}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image $IMAGE exists; reusing it"
  exit 0
fi

# The mirror and debootstrap (images/debian-mirror.sh, shared with the other debootstrap script).
. "$(dirname "$0")/debian-mirror.sh"

debian_bootstrap_ready bootstrap-base

WORK=$(mktemp -d /var/tmp/fakegpu-base.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "bootstrapping $SUITE from $MIRROR into $WORK (about a minute)"
debootstrap --variant=minbase --include=python3 "$SUITE" "$WORK/root" "$MIRROR" >"$WORK/log" 2>&1 || {
  tail -n 30 "$WORK/log" >&2; exit 1; }
# Keep the image small and free of host details; apt lists are refetched by whoever needs them.
rm -rf "$WORK/root/var/cache/apt/archives/"*.deb "$WORK/root/var/lib/apt/lists/"* "$WORK/root/var/log/"*
tar -C "$WORK/root" -c . | docker import \
  --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'LABEL org.fakegpu.role=base' \
  - "$IMAGE" >/dev/null
echo "base image $IMAGE ready"
