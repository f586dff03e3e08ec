"""What a hook below autograd costs per op: a Python TorchDispatchMode (fakecuda's ChargeMode is one) against a C++
boxed fallback, for issue 22's question whether moving fakecuda's charging into C++ can reach 1.05.

The C++ hook (bench/dispatch_hook/hook.cpp, compiled here with g++ against the running torch) does the minimum a
charging hook must: look at the inputs, run the op, look at the outputs' storages. It is turned on as a mode is,
by putting a dispatch key in the thread's included set, on one of two keys:
- Fake: below Python, above the backends; ops run the kernels they run without it;
- CustomRNGKeyId: a backend key, where an op's CompositeExplicitAutograd kernel wins over a fallback, so turning it
  on changes which kernels run (layer norm through batch norm, foreach ops one tensor at a time): shown for why
  not such a key.
The Python hook is a TorchDispatchMode that only calls the op (fakecuda's bare cost).

Prints the time of four small ops under each hook (best of 5 runs of 20000 calls, CPU clock), then bench_fakecuda's
training steps (1 thread, CPU clock, plain and hooked steps interleaved; the ratio is the median of paired ratios).
Needs g++ and torch's headers (PyPI's wheels ship them). Run: .venv/bin/python bench/bench_dispatch_hook.py [--steps N]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fakegpu.fakecuda import extension

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "dispatch_hook" / "hook.cpp"
BUILD = HERE.parent / "build" / "bench" / "dispatch_hook"
NAME = "dispatch_hook"


def build():
    """The hook compiled for this torch (reused while the source and torch stay the same)."""
    tag = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:12]
    target = BUILD / f"{NAME}_{tag}{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not target.exists():
        print(f"compiling {SOURCE.name} for torch {torch.__version__} (about 30 s)", file=sys.stderr)
        try:
            extension.compile_for_torch([SOURCE], NAME, target)
        except extension.ExtensionUnavailable as exc:
            sys.exit(f"bench_dispatch_hook: {exc}")
    return extension.load_module(NAME, target)


class BareMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Hooks:
    """Turns each hook on and off, by name."""

    def __init__(self, ext) -> None:
        self.ext = ext

    def names(self) -> list[str]:
        return ["C++ on Fake", "C++ on CustomRNGKeyId", "Python mode"]

    def on(self, name: str) -> None:
        if name == "Python mode":
            self._mode = BareMode()
            self._mode.__enter__()
        else:
            self.ext.enable(name.removeprefix("C++ on "))

    def off(self, name: str) -> None:
        if name == "Python mode":
            self._mode.__exit__(None, None, None)
        else:
            self.ext.disable()


def per_call_us(fn, calls: int = 20000) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - t0) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1 (a median of paired steps), not {args.steps}")
    torch.set_num_threads(1)
    hooks = Hooks(build())
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    ops = {"relu": lambda: torch.relu(x), "add": lambda: x + x, "mm": lambda: x @ w,
           "linear": lambda: torch.nn.functional.linear(x, w)}
    print(f"torch {torch.__version__}, 1 thread, CPU clock; us per call (64 x 64 float32)")
    print(f"{'op':>8} {'plain':>8} " + " ".join(f"{n:>22}" for n in hooks.names()))
    for name, fn in ops.items():
        row = [per_call_us(fn)]
        for hook in hooks.names():
            hooks.on(hook)
            try:
                row.append(per_call_us(fn))
            finally:
                hooks.off(hook)
        print(f"{name:>8} {row[0]:8.2f} " + " ".join(f"{v:22.2f}" for v in row[1:]))

    sys.path.insert(0, str(HERE))
    import bench_fakecuda as steps  # the same workloads and step as the fakecuda bench

    steps.clock = time.process_time
    print(f"\ntraining step, hooked / plain (median of {args.steps} paired steps)")
    print(f"{'workload':>11} {'plain ms':>9} " + " ".join(f"{n:>22}" for n in hooks.names()))
    for workload in steps.WORKLOADS:
        model = steps.make(workload, "cpu")
        plain_ms, ratios = [], {n: [] for n in hooks.names()}
        for i in range(args.steps + 2):
            for hook in hooks.names():
                base = steps.step(*model)
                hooks.on(hook)
                try:
                    hooked = steps.step(*model)
                finally:
                    hooks.off(hook)
                if i >= 2:  # two warm-up rounds
                    plain_ms.append(base * 1e3)
                    ratios[hook].append(hooked / base)
        print(f"{workload:>11} {statistics.median(plain_ms):9.1f} "
              + " ".join(f"{statistics.median(ratios[n]):22.3f}" for n in hooks.names()))


if __name__ == "__main__":
    main()
