"""Native mode costs: cudaMalloc+cudaFree pair, cudaMemGetInfo and a kernel launch with two pointer arguments
(which marks the memory they point at as kernel-written) in-process (C, native/build/bin/cuda-bench), alone and
with two other processes holding memory on the GPU (each allocation reads what they hold),
and one MLP training step of unmodified CUDA PyTorch under `fakegpu run` against the same step on the CPU.

Targets (issue 5): a malloc/free pair at most 20 us (it is an mmap/munmap plus bookkeeping); the step's control
flow under the shims at most 5 ms (kernels are not run, so this is the shims' and PyTorch's host overhead). The
same script on plain CPU torch (same process setup, device "cpu", no shims) gives the ratio native/cpu: below 1
means the control flow under the shims costs less than doing the math on the CPU; the step in accounting memory
mode is printed too (its copies are skipped, so it should not be slower), and so are the cost of replaying the step
captured into a CUDA graph and the step under torch 2.10+cu128 (the CUDA 12 libraries), when its venv exists.
Needs `make native`. Prints one line per figure; exits non-zero when a target is missed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "native" / "build" / "bin" / "cuda-bench"
PAIR_TARGET_NS = 20_000.0
STEP_TARGET_MS = 5.0

STEP = """
import sys, time, torch
dev = sys.argv[1]
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.AdamW(m.parameters())
x = torch.randn(64, 512, device=dev); y = torch.randint(0, 10, (64,), device=dev)
def step():
    opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
for _ in range(5): step()
t = time.perf_counter(); n = 50
for _ in range(n): step()
print((time.perf_counter() - t) / n * 1000)
"""
# The same step captured once into a CUDA graph (recorded no-ops) and replayed: the cost of one replay.
GRAPH_STEP = """
import time, torch
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(m.parameters(), capturable=True)
x = torch.randn(64, 512, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
def step():
    opt.zero_grad(set_to_none=False); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g): step()
t = time.perf_counter(); n = 200
for _ in range(n): g.replay()
torch.cuda.synchronize()
print((time.perf_counter() - t) / n * 1000)
"""
# PyPI's last CUDA 12 torch (2.10.0+cu128), on the CUDA 12 set of our libraries: `make .venv-torch210`.
TORCH210 = REPO / ".venv-torch210" / "bin" / "python"


# Another process of the run holding memory on the GPU: its state file, which every allocation here reads.
HOLDER = """
import os, sys
from fakegpu.shared_state import StateFile
f = StateFile(sys.argv[1], os.getpid(), "holder")
f.set(0, 1 << 30)
print("ready", flush=True)
sys.stdin.read()
"""


def in_process_figures(others: int) -> dict[str, float]:
    """cuda-bench's figures (ns per call), with `others` processes holding memory on the same GPU."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
        env.update(FAKEGPU_DEVICES="a100:1", FAKEGPU_STATE_DIR=tmp)
        holders = [subprocess.Popen([sys.executable, "-c", HOLDER, tmp], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env={**env, "PYTHONPATH": str(REPO)})
                   for _ in range(others)]
        try:
            for h in holders:
                assert h.stdout is not None and h.stdout.readline().strip() == "ready"
            out = subprocess.run([str(BENCH), os.environ.get("BENCH_RUNS", "20000")], env=env, capture_output=True,
                                 text=True, check=True).stdout
        finally:
            for h in holders:
                h.communicate()
    return {name: float(ns) for name, ns in (line.split() for line in out.splitlines())}


def main() -> int:
    if not BENCH.exists():
        print("bench_cuda: native build absent; run `make native`", file=sys.stderr)
        return 1
    ok = True
    alone, shared = in_process_figures(others=0), in_process_figures(others=2)
    for name, ns in alone.items():
        print(f"cuda {name}: {ns:.0f} ns; with 2 other processes on the GPU {shared[name]:.0f} ns "
              f"(ratio {shared[name] / ns:.2f})")
        if name.startswith("malloc_free") and max(ns, shared[name]) > PAIR_TARGET_NS:
            print(f"  target missed: {PAIR_TARGET_NS:.0f} ns")
            ok = False
    try:
        import torch  # noqa: F401
    except ImportError:
        print("cuda step: skipped (torch not installed)")
        return 0 if ok else 1
    cpu = float(subprocess.run([sys.executable, "-c", STEP, "cpu"], capture_output=True, text=True, check=True).stdout)

    def under_shims(*flags: str, python: str = sys.executable, script: str = STEP) -> float:
        cmd = [sys.executable, "-m", "fakegpu", "run", "--devices", "a100", *flags, "--", python, "-c", script]
        return float(subprocess.run([*cmd, "cuda"], capture_output=True, text=True, check=True).stdout)

    native, accounting = under_shims(), under_shims("--memory", "accounting")
    print(
        f"cuda step (MLP 512-1024-10, batch 64, AdamW): native {native:.2f} ms, cpu torch {cpu:.2f} ms, "
        f"ratio native/cpu {native / cpu:.2f}; accounting memory {accounting:.2f} ms"
    )
    if native > STEP_TARGET_MS:
        print(f"  target missed: {STEP_TARGET_MS} ms")
        ok = False
    replay = under_shims(script=GRAPH_STEP)
    print(f"cuda graph replay of the same step: {replay:.3f} ms, ratio replay/eager {replay / native:.3f}")
    if TORCH210.exists():
        cu12 = under_shims(python=str(TORCH210))
        print(f"cuda step under torch 2.10+cu128 (CUDA 12 libraries): native {cu12:.2f} ms")
        if cu12 > STEP_TARGET_MS:
            print(f"  target missed: {STEP_TARGET_MS} ms")
            ok = False
    else:
        print("cuda step under torch 2.10: skipped (no .venv-torch210; `make .venv-torch210`)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
