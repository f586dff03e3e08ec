#!/usr/bin/env bash
# fakegpu/torch-cpu:sid: Debian sid's own CPU-only build of torch (python3-torch, no CUDA compiled in), made with no
# registry: debootstrap a minbase sid root, apt-get the package into it, `docker import`. fakecuda is tested on it
# (tests/fakecuda/test_torch_cpu_build.py) because PyPI serves only CUDA builds to this machine, and a CPU build
# lacks the torch._C._cuda_* entry points a CUDA build has even without a driver.
# Reuses the image when its tag exists. Fails when sid's torch is outside fakecuda's supported range (2.10-2.15)
# or is not a CPU-only build, rather than produce an image of something untested.
# Usage: build-torch-cpu.sh [IMAGE]   (FAKEGPU_DEBIAN_MIRROR overrides the mirror read from /etc/apt)
set -euo pipefail
IMAGE="${1:-${FAKEGPU_TORCH_CPU_IMAGE:-fakegpu/torch-cpu:sid}}"
SUITE=sid
# Inclusive bounds of pyproject.toml's `torch` extra (torch>=2.10,<2.16).
MIN_MINOR=10
MAX_MINOR=15

# The whole version check, run by the image's interpreter: prints the version; exits 1 with the reason when torch
# is outside the range or has CUDA compiled in.
read -r -d '' CHECK <<EOF || true
import sys, torch
v = torch.__version__
major, minor = (int(p) for p in v.split(".")[:2])
print(v, torch.version.cuda, torch.cuda.is_available())
if (major, minor) < (2, $MIN_MINOR) or (major, minor) > (2, $MAX_MINOR):
    sys.exit(f"torch {v} is outside fakecuda's supported range 2.$MIN_MINOR-2.$MAX_MINOR")
if torch.version.cuda is not None or torch.cuda.is_available():
    sys.exit(f"torch {v} is not a CPU-only build (torch.version.cuda={torch.version.cuda})")
EOF

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  # An image built earlier still has to hold a supported torch (a tag can be reused by hand).
  docker run --rm --network none "$IMAGE" python3 -c "$CHECK" >/dev/null || {
    echo "build-torch-cpu: image $IMAGE holds an unsupported torch; remove it to rebuild" >&2; exit 1; }
  echo "torch-cpu image $IMAGE exists; reusing it"
  exit 0
fi

# The mirror and debootstrap (images/debian-mirror.sh, shared with the other debootstrap script).
. "$(dirname "$0")/debian-mirror.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "build-torch-cpu: building $IMAGE needs root (debootstrap, chroot, mount)" >&2
  exit 1
fi
debian_bootstrap_ready build-torch-cpu

WORK=$(mktemp -d /var/tmp/fakegpu-torch-cpu.XXXXXX)
ROOT="$WORK/root"
cleanup() {
  mountpoint -q "$ROOT/proc" && umount "$ROOT/proc"
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { tail -n 30 "$WORK/log" >&2; echo "build-torch-cpu: $1 failed (log above)" >&2; exit 1; }

echo "bootstrapping $SUITE from $MIRROR into $WORK"
debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$WORK/log" 2>&1 || fail debootstrap
# Maintainer scripts (python3's byte-compiling among them) read /proc.
mount -t proc proc "$ROOT/proc"
# Valid-Until is not enforced: by this machine's clock the mirror's sid Release had expired (by 23 days when
# written), and apt then refuses the lists; signatures are still checked, and the torch version is checked below.
# python3-pytest lets the fakecuda unit tests run in the image too (tests/fakecuda/test_torch_cpu_build.py).
echo "installing python3-torch from $SUITE (no recommends)"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq --no-install-recommends python3-torch python3-pytest' \
  >"$WORK/log" 2>&1 || fail "apt-get install python3-torch"

# The check's line is the last one: importing torch can print a note of its own first.
VERSION_LINE=$(chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c "$CHECK" 2>"$WORK/log" | tail -n1) || {
  cat "$WORK/log" >&2; exit 1; }
TORCH_VERSION=${VERSION_LINE%% *}
DEB_VERSION=$(chroot "$ROOT" dpkg-query -W -f '${Version}' python3-torch)
PY_VERSION=$(chroot "$ROOT" python3 -c 'import platform; print(platform.python_version())')
umount "$ROOT/proc"

# Keep the image small and free of host details; apt lists are refetched by whoever needs them.
chroot "$ROOT" apt-get clean
rm -rf "$ROOT/var/lib/apt/lists/"* "$ROOT/var/log/"* "$ROOT/var/cache/debconf/"*-old
tar -C "$ROOT" -c . | docker import \
  --change 'CMD ["python3"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'LABEL org.fakegpu.role=torch-cpu' \
  --change "LABEL org.fakegpu.torch=$TORCH_VERSION org.fakegpu.python3-torch=$DEB_VERSION org.fakegpu.python=$PY_VERSION" \
  - "$IMAGE" >/dev/null
echo "torch-cpu image $IMAGE ready: torch $TORCH_VERSION (python3-torch $DEB_VERSION, CPU only), Python $PY_VERSION"
