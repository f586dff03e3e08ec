"""nvidia-smi wall time per call against /bin/true in the same run, and the in-process cost of one NVML query.

Targets (issue 3): nvidia-smi at most 5 ms per call; nvmlDeviceGetMemoryInfo at most 1 us. Needs `make native`.
Prints one line per figure and exits non-zero when a target is missed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "native" / "build"
SMI = BUILD / "bin" / "nvidia-smi"
NVML_BENCH = BUILD / "bin" / "nvml-bench"
SMI_TARGET_MS = 5.0
NVML_TARGET_NS = 1000.0


def per_call_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    for _ in range(5):
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000 / runs


def main() -> int:
    if not SMI.exists() or not NVML_BENCH.exists():
        print("bench_smi: native build absent; run `make native`", file=sys.stderr)
        return 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    env["FAKEGPU_DEVICES"] = "a100:8"
    runs = int(os.environ.get("BENCH_RUNS", "200"))
    ok = True
    true_ms = per_call_ms(["/bin/true"], env, runs)
    for label, args in (("default view", []), ("--query-gpu csv", ["--query-gpu=index,name,memory.used",
                                                                   "--format=csv"]), ("-L", ["-L"])):
        smi_ms = per_call_ms([str(SMI), *args], env, runs)
        met = smi_ms <= SMI_TARGET_MS
        ok &= met
        print(f"nvidia-smi {label:<16} {smi_ms:6.2f} ms/call  /bin/true {true_ms:5.2f} ms/call  "
              f"ratio {smi_ms / true_ms:4.1f}x  target <= {SMI_TARGET_MS} ms: {'met' if met else 'MISSED'}")
    out = subprocess.run([str(NVML_BENCH), "2000000"], env=env, capture_output=True, text=True, check=True)
    fn, calls, ns = out.stdout.split()
    met = float(ns) <= NVML_TARGET_NS
    ok &= met
    print(f"{fn} in-process {float(ns):7.1f} ns/call over {calls} calls  target <= {NVML_TARGET_NS:.0f} ns: "
          f"{'met' if met else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
