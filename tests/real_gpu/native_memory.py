"""Native mode's memory against the real H200's capture (tests/data/gpu/h200/mem_workloads.json, mem_opdb.json).

    python -m tests.real_gpu.native_memory [--json DIR]      # `make native-memory`

Runs tests/memory_fidelity/probe.py under `fakegpu run --devices h200` with the capture's torch (.venv-torch211),
the workloads and then the op database the way the capture ran it (two processes, the second from float_power
on), and compares with tests/memory_fidelity/harness.py, the GPU as the reference side. Prints the worst cases;
--json writes each comparison. tests/real_gpu/test_native_memory.py runs the workloads and SUBSET.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.memory_fidelity import harness
from tests.real_gpu.conftest import REPO, TORCH211_PYTHON, real, under_fake

PROBE = REPO / "tests" / "memory_fidelity" / "probe.py"
RESUMED_AT = "float_power"  # where the capture's second run began (mem_opdb.json's coverage)

# Op-database ops the test runs (3 samples each, about 2 minutes on two cores): common layers, losses,
# reductions, indexing and shape ops, and the ops whose native figures once differed from the GPU's.
SUBSET = ("add", "mul", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "where", "sum", "mean", "amax", "cumsum",
          "softmax", "log_softmax", "mm", "addmm", "bmm", "baddbmm", "nn.functional.linear", "nn.functional.gelu",
          "nn.functional.silu", "nn.functional.layer_norm", "nn.functional.embedding",
          "nn.functional.cross_entropy", "nn.functional.mse_loss", "cat", "stack", "transpose", "reshape",
          "index_select", "gather", "masked_select", "nn.functional.conv2d", "nn.functional.conv_transpose2d")
SUBSET_SAMPLES = 99
# Samples of SUBSET outside the harness's tolerance, with why.
KNOWN_OPDB: dict[str, str] = {}


def probe(python: str, args: list[str], out: Path, timeout: float = 1800) -> dict:
    """probe.py ARGS under native mode on an H200, its JSON document."""
    proc = under_fake([python, str(PROBE), *args, "--out", str(out)], timeout=timeout,
                      env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and out.exists(), f"probe {args[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def outside_tolerance(rows: dict) -> dict[str, str]:
    """Samples that were scored and are off by more than the harness's tolerance, or failed on one side only."""
    off = {}
    for key, r in rows.items():
        if r["status"] == "scored" and abs(r["worst_error"]) > harness.TOLERANCE:
            off[key] = f"{r['worst_error']:+.1%}"
        elif r["status"] == "error" and (r["native_error"] is None) != (r["fakecuda_error"] is None):
            off[key] = f"error on one side: GPU {r['native_error']!r}, native mode {r['fakecuda_error']!r}"
    return off


def captured_ops() -> list[str]:
    """The op-database ops the capture covered, in its order (op name and variant, as probe.py --ops takes them)."""
    ops: list[str] = []
    for key in real("mem_opdb.json")["cases"]:
        op = key.rsplit("#", 1)[0]
        if not ops or ops[-1] != op:
            ops.append(op)
    return ops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, metavar="DIR", help="write workloads.json and opdb.json there")
    ap.add_argument("--worst", type=int, default=25)
    args = ap.parse_args(argv)
    work = Path(args.json or REPO / "build" / "native-memory")
    work.mkdir(parents=True, exist_ok=True)
    python = str(TORCH211_PYTHON)
    reference = {"workloads": real("mem_workloads.json"), "opdb": real("mem_opdb.json")}
    fake = {"workloads": probe(python, ["workloads", "--trace"], work / "native-workloads.json")}
    ops = captured_ops()
    split = ops.index(RESUMED_AT)
    parts = [probe(python, ["opdb", "--samples", "3", "--ops", ",".join(chunk)], work / f"native-opdb-{i}.json",
                   timeout=7200) for i, chunk in enumerate((ops[:split], ops[split:]))]
    fake["opdb"] = {"cases": {k: v for p in parts for k, v in p["cases"].items()}}
    for what in ("workloads", "opdb"):
        rows = harness.compare(reference[what], fake[what])
        print(f"== {what}: the H200 (left) and native mode (right)")
        print(harness.render(rows, args.worst).replace("native MiB", "  GPU MiB ").replace("fakecuda", "  native"))
        off = outside_tolerance(rows)
        print(f"{len(off)} outside {harness.TOLERANCE:.0%}: {json.dumps(off, indent=1)}")
        (work / f"{what}.json").write_text(json.dumps({"summary": harness.summarize(rows), "outside": off,
                                                       "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
