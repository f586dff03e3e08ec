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

# Op-database ops the test runs (3 samples each, variants included; about 2 minutes on two cores): elementwise ops
# and reductions, the GEMM family down to matrix-vector and dot products and triangular solves, layers and losses
# (cuDNN convolutions, attention, normalizations, pooling), creation by fills, shape and indexing ops, and ops
# whose output size depends on values native mode does not compute.
SUBSET = ("add", "mul", "addmm", "addmv", "addbmm", "baddbmm", "dot", "vdot", "bmm", "mv", "addr", "clamp", "cumsum",
          "div.no_rounding_mode", "exp", "masked_select", "matmul", "max.reduction_with_dim", "var_mean", "softmax",
          "nn.functional.cross_entropy", "native_layer_norm", "native_batch_norm", "nn.functional.conv_transpose1d",
          "nn.functional.conv_transpose2d", "nn.functional.conv1d", "nn.functional.conv2d",
          "nn.functional.group_norm", "nn.functional.layer_norm", "nn.functional.rms_norm",
          "nn.functional.interpolate.bilinear", "nn.functional.avg_pool2d", "nn.functional.max_pool2d",
          "nn.functional.linear", "nn.functional.scaled_dot_product_attention", "nn.functional.silu",
          "nn.functional.gelu", "mm", "outer", "pow", "sqrt", "tanh", "transpose", "reshape", "sort", "topk",
          "gather", "index_add", "index_select", "scatter_add", "ones", "zeros", "full", "stack", "cat", "tril",
          "log_softmax", "where", "nonzero", "nn.functional.embedding", "nn.functional.dropout",
          "nn.functional.mse_loss", "nn.functional.nll_loss", "argmax", "amax", "mean", "sum", "einsum",
          "tensordot", "inner", "triangular_solve")
# Ops whose output size or checks depend on values a kernel computes (native mode reads stale bytes there): a
# shape differs (harness.compare marks those) or the op fails on one side; neither is scored.
VALUE_DEPENDENT = ("masked_select", "nonzero", "argwhere", "unique", "unique_consecutive", "combinations", "isin",
                   "masked_fill", "masked_scatter", "matrix_exp", "index_fill", "index_put", "normal",
                   "_segment_reduce.lengths")
# Samples of SUBSET outside the harness's tolerance, or failing on one side only, and why.
KNOWN_OPDB: dict[str, str] = {}

def probe(python: str, args: list[str], out: Path, timeout: float = 1800) -> dict:
    """probe.py ARGS under native mode on an H200, its JSON document."""
    proc = under_fake([python, str(PROBE), *args, "--out", str(out)], timeout=timeout,
                      env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and out.exists(), f"probe {args[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def outside_tolerance(rows: dict) -> dict[str, str]:
    """Samples that were scored and are off by more than the harness's tolerance, or failed on one side only; not
    those of VALUE_DEPENDENT ops."""
    off = {}
    for key, r in rows.items():
        if key.rsplit("#", 1)[0] in VALUE_DEPENDENT:
            continue
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
