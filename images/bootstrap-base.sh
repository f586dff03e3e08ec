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

# The mirror comes from this machine's apt sources (one-line or deb822 form), so no host name lives in the repo.
mirror() {
  if [ -n "${FAKEGPU_DEBIAN_MIRROR:-}" ]; then echo "$FAKEGPU_DEBIAN_MIRROR"; return; fi
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  local uri
  uri=$(cat "${files[@]}" 2>/dev/null | awk '
    /^deb[ \t]/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }
    /^URIs:/    { print $2 }' | grep -E '/debian/?$' | head -n1 || true)
  echo "${uri:-}"
}

MIRROR=$(mirror)
if [ -z "$MIRROR" ]; then
  echo "bootstrap-base: no Debian mirror in /etc/apt/sources*; set FAKEGPU_DEBIAN_MIRROR" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
fi

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
