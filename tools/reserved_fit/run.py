"""Measure PyTorch's caching allocator in native mode and refit the estimators' reserved-memory terms.

    python tools/reserved_fit/run.py                 # `make reserved-fit`: every workload, both allocator configs
    python tools/reserved_fit/run.py --quick --out /tmp/fit.json --runs-dir /tmp/runs

Each allocator configuration (workloads.ALLOC_CONFS) is one `fakegpu run --mode native --memory accounting`
process running workload.py over the workloads, on a simulated A100 80 GB: torch's real allocator on simulated
memory, no kernels, no host memory for tensors. The raw records go to --runs-dir (runs-<config>.json); fit.py turns
them into the coefficients written to --out, by default the file the estimators read
(fakegpu/estimate/data/reserved_fit.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOL = Path(__file__).resolve().parent
REPO = TOOL.parents[1]
sys.path[:0] = [str(TOOL), str(REPO)]

import fit  # noqa: E402  (the tool's folder is not a package)
import workloads  # noqa: E402

from fakegpu.estimate.reserved import DEFAULT_FIT_PATH  # noqa: E402

DEVICE = "a100"


def measure(python: str, specs: list[dict], alloc_conf: str, out: Path, timeout: float) -> dict:
    """workload.py over `specs` in one native-mode process under PYTORCH_CUDA_ALLOC_CONF=alloc_conf."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    if "FAKEGPU_NATIVE_DIR" in os.environ:  # shims built elsewhere than this checkout's native/build/lib
        env["FAKEGPU_NATIVE_DIR"] = os.environ["FAKEGPU_NATIVE_DIR"]
    env.update(PYTORCH_CUDA_ALLOC_CONF=alloc_conf, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "specs.json"
        spec_file.write_text(json.dumps(specs))
        cmd = [sys.executable, "-m", "fakegpu", "run", "--mode", "native", "--memory", "accounting",
               "--devices", DEVICE, "--on-device-read", "ignore", "--",
               python, "-W", "ignore", str(TOOL / "workload.py"), str(spec_file), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    # PyTorch's exit race (tests/subprocess_torch.py) can abort the process after the output is whole; the
    # document is written last, so its presence and parse are the test of completeness.
    if not out.exists():
        raise SystemExit(f"reserved_fit: workloads under {alloc_conf} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    doc["alloc_conf"] = alloc_conf
    out.write_text(json.dumps(doc, indent=1))
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small training and one inference workload")
    ap.add_argument("--out", type=Path, default=DEFAULT_FIT_PATH, help="the fit file (default: the estimators')")
    ap.add_argument("--runs-dir", type=Path, default=REPO / "build" / "reserved-fit", help="raw records")
    ap.add_argument("--python", default=sys.executable, help="interpreter with a CUDA build of torch and "
                    "transformers (default: this one)")
    ap.add_argument("--timeout", type=float, default=1200)
    args = ap.parse_args(argv)
    specs = workloads.QUICK if args.quick else workloads.FULL
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    measured = {}
    for name, conf in workloads.ALLOC_CONFS.items():
        began = time.monotonic()
        measured[name] = measure(args.python, specs, conf, args.runs_dir / f"runs-{name}.json", args.timeout)
        print(f"[reserved_fit] {name} ({conf}): {len(specs)} workloads in {time.monotonic() - began:.0f} s",
              flush=True)
    doc = fit.fit_all(measured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.out)
    print(fit.describe(doc))
    print(f"[reserved_fit] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
