"""Container start cost of FakeGPU: `docker run --runtime=fakegpu -e FAKEGPU_DEVICES=a100:8 IMG true` side by
side with `docker run IMG true`, interleaved so machine noise hits both alike. Target: median ratio <= 1.10.

Needs root and a Docker Engine; registers the runtime (`fakegpu runtime install`) and makes the offline base
image (images/bootstrap-base.sh) when they are missing. Prints medians, minima and their ratios with the load
average (other work on a 2-core machine moves both numbers); exits 1 over target only with --strict.
--python-create adds a third arm in the same interleaved rounds: a runtime registered as `fakegpu-pyref` whose
`create` runs in Python (the reference) instead of the C fast path (removed again afterwards). --nvidia adds an
arm that asks NVIDIA's way, `-e NVIDIA_VISIBLE_DEVICES=0` (a selection from the host's inventory, one A100
when none is configured).
Usage: bench_container.py [--rounds N] [--strict] [--python-create] [--nvidia]
"""

from __future__ import annotations

import json
import os
import shutil
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
    # Always: it rewrites fronts written by an older install (a front without the C `create` would be measured
    # otherwise) and leaves daemon.json alone when it is up to date.
    subprocess.run([str(Path(sys.executable).with_name("fakegpu")), "runtime", "install"], check=True,
                   stdout=subprocess.DEVNULL)
    if "fakegpu" not in info:
        time.sleep(1)


PYREF = "fakegpu-pyref"


def fakegpu_cli(*args: str) -> None:
    subprocess.run([str(Path(sys.executable).with_name("fakegpu")), *args], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else ROUNDS
    with_python = "--python-create" in sys.argv
    ensure_setup()
    if not os.access(REPO / "native" / "build" / "bin" / "fakegpu-create", os.X_OK):
        print("note: native/build/bin/fakegpu-create is not built (run `make`): create runs in Python")
    plain = ["docker", "run", "--rm", "--label", LABEL, IMAGE, "true"]
    arms = {"docker run IMG true": plain}

    def fake(runtime: str) -> list[str]:
        return ["docker", "run", "--rm", "--label", LABEL, f"--runtime={runtime}", "-e", "FAKEGPU_DEVICES=a100:8",
                IMAGE, "true"]

    arms["docker run --runtime=fakegpu FAKEGPU_DEVICES=a100:8"] = fake("fakegpu")
    if "--nvidia" in sys.argv:
        arms["same, NVIDIA_VISIBLE_DEVICES=0 instead"] = ["docker", "run", "--rm", "--label", LABEL,
                                                          "--runtime=fakegpu", "-e", "NVIDIA_VISIBLE_DEVICES=0",
                                                          IMAGE, "true"]
    if with_python:
        fakegpu_cli("runtime", "install", "--name", PYREF, "--python-create",
                    "--front-dir", str(Path(sys.prefix) / "libexec" / PYREF))
        time.sleep(1)
        arms[f"same, create in Python (--runtime={PYREF})"] = fake(PYREF)
    try:
        for cmd in arms.values():  # warm the image and the page cache
            wall(cmd)
        times: dict[str, list[float]] = {label: [] for label in arms}
        load = os.getloadavg()[0]
        order = list(arms)
        for i in range(rounds):
            # Rotate which goes first, so no arm always runs right after another's teardown.
            for label in order[i % len(order):] + order[:i % len(order)]:
                times[label].append(wall(arms[label]))
    finally:
        if with_python:
            fakegpu_cli("runtime", "uninstall", "--name", PYREF)
            shutil.rmtree(Path(sys.prefix) / "libexec" / PYREF, ignore_errors=True)
    base = statistics.median(times[order[0]])
    for label in order:
        xs = times[label]
        m = statistics.median(xs)
        ratio = "" if label == order[0] else f"  ratio {m / base:.3f} (minima {min(xs) / min(times[order[0]]):.3f})"
        print(f"{label:<52}  median {m * 1000:7.1f} ms  min {min(xs) * 1000:7.1f} ms  (n={rounds}){ratio}")
    ratio = statistics.median(times[order[1]]) / base
    print(f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"ratio {ratio:.3f}  (target <= {TARGET:.2f}: {'met' if ratio <= TARGET else 'NOT met'})")
    return 1 if "--strict" in sys.argv and ratio > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
