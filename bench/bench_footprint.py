"""What fakecuda's per-op work costs the *next* kernel: a big elementwise kernel, plain torch, with something run
between consecutive calls; prints the kernel's extra time per call for each something (its own time subtracted).

The fake side's cost grows with the tensors (fakegpu/fakecuda/README.md, "Cost per op"): pure-Python compute
between kernels costs them nothing, memory touched between them costs several times its own time. This separates
the footprint of fakecuda's mode and charging hook from their instruction cost. Rounds are shuffled and repeated
in one process; read differences of a few us as noise.
Run: .venv/bin/python bench/bench_footprint.py [--kib 1024] [--rounds 7] [--calls 600] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import time
from collections.abc import Callable

import torch
from bench_fakecuda import plain
from torch.overrides import TorchFunctionMode

import fakegpu.fakecuda as fc
from fakegpu.fakecuda.dispatch import suspended


class _Bare(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def variants(fake: torch.Tensor, host: torch.Tensor) -> dict[str, Callable[[], None]]:
    junk = bytearray(256 * 1024)

    def python(k: int) -> Callable[[], None]:
        def run() -> None:
            s = 0
            for i in range(k):
                s += i
        return run

    def copy(n: int) -> Callable[[], None]:
        return lambda: bytes(junk[:n]) and None

    def under(ctx: Callable[[], contextlib.AbstractContextManager], t: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            with ctx():
                y = t * 2
                del y
        return run

    def bare_mode() -> contextlib.AbstractContextManager:
        stack = contextlib.ExitStack()
        stack.enter_context(plain())
        stack.enter_context(_Bare())
        return stack

    return {
        "nothing": lambda: None,
        "python, ~60 additions": python(60),
        "python, ~200 additions": python(200),
        "copy 64 KiB": copy(64 * 1024),
        "copy 256 KiB": copy(256 * 1024),
        "4 KiB op, plain torch": under(plain, host),
        "4 KiB op, plain under a bare mode": under(bare_mode, host),
        "4 KiB op, fake CUDA": under(contextlib.nullcontext, fake),
        "4 KiB op, fake, C++ hook only": under(torch._C.DisableTorchFunction, fake),
        "4 KiB op, fake, mode + Python charging": under(suspended, fake),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kib", type=int, default=1024, help="size of the big kernel's input and output each")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    fc.activate()
    with plain():
        x, o, host = torch.randn(args.kib * 256), torch.empty(args.kib * 256), torch.randn(1024)
    fake = torch.randn(1024, device="cuda")

    def kernel() -> None:
        torch.mul(x, 2, out=o)

    def timed(body: Callable[[], None]) -> float:
        t0 = time.process_time()
        for _ in range(args.calls):
            body()
        return time.process_time() - t0

    extras = variants(fake, host)
    slowdown: dict[str, list[float]] = {k: [] for k in extras}
    own: dict[str, list[float]] = {k: [] for k in extras}
    for _ in range(args.rounds):
        names = list(extras)
        random.shuffle(names)
        for name in names:
            extra = extras[name]

            def both(extra=extra) -> None:
                with plain():
                    kernel()
                extra()

            def alone() -> None:
                with plain():
                    kernel()
            together, by_itself, kernels = timed(both), timed(extra), timed(alone)
            slowdown[name].append((together - by_itself - kernels) / args.calls * 1e6)
            own[name].append(by_itself / args.calls * 1e6)
    rows = [{"between": k, "kernel_extra_us": round(statistics.median(slowdown[k]), 1),
             "own_us": round(statistics.median(own[k]), 1)} for k in extras]
    if args.json:
        print(json.dumps({"benchmark": "fakecuda_footprint", "kib": args.kib, "rounds": args.rounds,
                          "calls": args.calls, "rows": rows}))
        return
    print(f"torch.mul(x, 2, out=o) on {args.kib} KiB tensors, {args.rounds} shuffled rounds of {args.calls} calls; "
          "per call:")
    for r in rows:
        print(f"  {r['between']:>40}: kernel +{r['kernel_extra_us']:6.1f} us (its own time {r['own_us']:.1f} us)")


if __name__ == "__main__":
    main()
