"""Cost of resolving a device spec on the hook's path, side by side with a bare interpreter in the same run.

The OCI hook resolves FAKEGPU_DEVICES at every container start, so `import fakegpu.devices` plus resolving a spec
must add little to Python's own start-up. Prints medians and ratios; absolute times do not compare across runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

ROUNDS = 15
BARE = [sys.executable, "-c", "pass"]
RESOLVE = [sys.executable, "-c", "from fakegpu.devices import resolve_devices; resolve_devices('a100:4,h100:4')"]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def main() -> None:
    bare, resolve = [], []
    for _ in range(ROUNDS):  # interleaved, so machine noise hits both alike
        bare.append(wall(BARE))
        resolve.append(wall(RESOLVE))
    b, r = statistics.median(bare), statistics.median(resolve)
    print(f"python -c pass:              {b * 1e3:7.1f} ms (median of {ROUNDS})")
    print(f"import + resolve a100:4,h100:4 {r * 1e3:7.1f} ms")
    print(f"ratio resolve/bare:          {r / b:7.2f}x   (added {(r - b) * 1e3:.1f} ms)")

    from fakegpu.devices import resolve_devices
    from fakegpu.profiles import load_catalog

    load_catalog()
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        resolve_devices("a100:4,h100:4")
    per = (time.perf_counter() - start) / n
    print(f"in-process resolve (warm):   {per * 1e6:7.1f} us per spec of 8 devices")


if __name__ == "__main__":
    main()
