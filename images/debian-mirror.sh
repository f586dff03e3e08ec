# Sourced by the image scripts that debootstrap a Debian root (bootstrap-base.sh, build-torch-cpu.sh): where to
# fetch from and the tool to do it, so the two agree on both.

# The mirror comes from this machine's apt sources (one-line or deb822 form), so no host name lives in the repo;
# FAKEGPU_DEBIAN_MIRROR overrides it. Prints nothing when none is found.
debian_mirror() {
  if [ -n "${FAKEGPU_DEBIAN_MIRROR:-}" ]; then echo "$FAKEGPU_DEBIAN_MIRROR"; return; fi
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  local uri
  uri=$(cat "${files[@]}" 2>/dev/null | awk '
    /^deb[ \t]/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }
    /^URIs:/    { print $2 }' | grep -E '/debian/?$' | head -n1 || true)
  echo "${uri:-}"
}

# MIRROR set from debian_mirror, debootstrap installed; exits with "$1: ..." when there is no mirror.
debian_bootstrap_ready() {
  MIRROR=$(debian_mirror)
  if [ -z "$MIRROR" ]; then
    echo "$1: no Debian mirror in /etc/apt/sources*; set FAKEGPU_DEBIAN_MIRROR" >&2
    exit 1
  fi
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
  fi
}
