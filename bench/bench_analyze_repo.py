"""Speed of `fakegpu analyze-repo` on trees nobody here wrote: the installed transformers and torch packages.

Each tree is analyzed by the full CLI (`--json`, output discarded) in a fresh process, ROUNDS times; prints the
median and best wall time, peak RSS, the files and Python files scanned and how many were parsed. Nothing is
cached between runs by FakeGPU (the operating system's page cache is warm after the first round, as it is for a
user who runs it twice). Acceptance (issue 17): transformers in under 5 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 3
TARGET_S = {"transformers": 5.0}


def tree(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def run(path: Path) -> tuple[float, float, dict]:
    """Wall seconds, peak RSS in MB and the report of one CLI run."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "analyze-repo", str(path), "--json"],
                            stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"analyze-repo {path} failed with {status}")
    return elapsed, usage.ru_maxrss / 1024, json.loads(out)["data"]


def main() -> None:
    failed = False
    for name in ("transformers", "torch"):
        path = tree(name)
        if path is None:
            print(f"{name}: not installed, skipped")
            continue
        times, rss, report = [], 0.0, {}
        for _ in range(ROUNDS):
            elapsed, peak, report = run(path)
            times.append(elapsed)
            rss = max(rss, peak)
        scanned = report["scanned"]
        target = TARGET_S.get(name)
        verdict = "" if target is None else (f"  target {target:.0f} s: " +
                                             ("ok" if statistics.median(times) < target else "OVER"))
        failed |= target is not None and statistics.median(times) >= target
        print(f"{name}: median {statistics.median(times):.2f} s, best {min(times):.2f} s of {ROUNDS} "
              f"(scan alone {scanned['seconds']:.2f} s), peak RSS {rss:.0f} MB; {scanned['files']} files, "
              f"{scanned['by_kind'].get('python', 0)} Python, {scanned['python_parsed']} parsed, "
              f"{len(report['entries'])} entry points, {len(report['sites'])} sites{verdict}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
