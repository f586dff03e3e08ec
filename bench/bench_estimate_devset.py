"""Error of estimate-llm on each dev-set row (published real-GPU measurements), with the median and worst.

Acceptance (issue 8): median absolute error <= 5 %, no underestimate worse than 10 %.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fakegpu.estimate.devset import run_devset, score

DEVSET = Path(__file__).resolve().parents[1] / "tests" / "data" / "devset" / "devset.json"


def main() -> int:
    results = run_devset(DEVSET)
    print(f"{'row':40s}{'metric':>22s}{'observed MiB':>14s}{'predicted MiB':>15s}{'error':>9s}")
    for r in results:
        print(f"{r.id:40s}{r.metric:>22s}{r.observed / 2**20:14.1f}{r.predicted / 2**20:15.1f}{r.error * 100:+8.2f}%")
    s = score(results)
    print(f"\nrows {s['rows']}: median |error| {s['median_abs_error'] * 100:.2f}%, "
          f"worst |error| {s['worst_abs_error'] * 100:.2f}%, "
          f"worst underestimate {s['worst_underestimate'] * 100:+.2f}%")
    ok = s["median_abs_error"] <= 0.05 and s["worst_underestimate"] >= -0.10
    print(f"acceptance (median <= 5 %, no underestimate worse than 10 %): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
