#!/usr/bin/env bash
# The digest of what an image built from this checkout is made of: the fakegpu package's sources (fakegpu/, hook/
# and pyproject.toml, as they are on disk, committed or not, ignored files left out), the FILEs named, and the build
# parameters read from stdin. Prints nothing outside a git checkout (the caller then always builds).
# Usage: printf 'torch=2.15.0 ...' | images/inputs-digest.sh [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 0
{
  git ls-files -z -co --exclude-standard -- fakegpu hook pyproject.toml |
    while IFS= read -r -d '' f; do if [ -f "$f" ]; then sha256sum "$f"; fi; done
  if [ $# -gt 0 ]; then sha256sum "$@"; fi
  cat
} | sha256sum | cut -d' ' -f1
