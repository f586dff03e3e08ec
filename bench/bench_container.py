"""Container start cost of FakeGPU: `docker run --runtime=fakegpu -e FAKEGPU_DEVICES=a100:8 IMG true` side by
side with `docker run IMG true`, interleaved so machine noise hits both alike. Target: median ratio <= 1.10.

Needs root and a Docker Engine; registers the runtime (`fakegpu runtime install`) and makes the offline base
image (images/bootstrap-base.sh) when they are missing. Prints medians, minima and their ratios with the load
average (other work on a 2-core machine moves both numbers); exits 1 over target only with --strict.
Usage: bench_container.py [--rounds N] [--strict]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = "fakegpu/debian-base:bookworm"
ROUNDS = 12
TARGET = 1.10
LABEL = "org.fakegpu.bench=container"


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def ensure_setup() -> None:
    subprocess.run([str(REPO / "images" / "bootstrap-base.sh"), IMAGE], check=True, stdout=subprocess.DEVNULL)
    info = json.loads(subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], check=True,
                                     capture_output=True, text=True).stdout)
    if "fakegpu" not in info:
        subprocess.run([str(Path(sys.executable).with_name("fakegpu")), "runtime", "install"], check=True)
        time.sleep(1)


def main() -> int:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else ROUNDS
    ensure_setup()
    plain = ["docker", "run", "--rm", "--label", LABEL, IMAGE, "true"]
    fake = ["docker", "run", "--rm", "--label", LABEL, "--runtime=fakegpu", "-e", "FAKEGPU_DEVICES=a100:8", IMAGE,
            "true"]
    wall(plain), wall(fake)  # warm the image and the page cache
    p, f = [], []
    load = os.getloadavg()[0]
    for i in range(rounds):
        # Alternate which goes first, so neither always runs right after the other's teardown.
        if i % 2:
            f.append(wall(fake))
            p.append(wall(plain))
        else:
            p.append(wall(plain))
            f.append(wall(fake))
    mp, mf = statistics.median(p), statistics.median(f)
    ratio = mf / mp
    for label, m, xs in (("docker run IMG true                                 ", mp, p),
                         ("docker run --runtime=fakegpu FAKEGPU_DEVICES=a100:8", mf, f)):
        print(f"{label}  median {m * 1000:7.1f} ms  min {min(xs) * 1000:7.1f} ms  (n={rounds})")
    print(f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}; ratio of minima {min(f) / min(p):.3f}")
    print(f"ratio {ratio:.3f}  (target <= {TARGET:.2f}: {'met' if ratio <= TARGET else 'NOT met'})")
    return 1 if "--strict" in sys.argv and ratio > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
