"""The rank side of `fakegpu bandwidth`: a collective size sweep through torch.distributed, run by torchrun.

Standard library and torch only, and no dollar sign anywhere in this file: `fakegpu bandwidth --cluster` ships
this source to the nodes as `python3 -c SOURCE` (the cluster controller substitutes dollar-named variables in a
job's arguments), so the sweep a node runs is always the one the host parses, whatever fakegpu its image carries.
It also runs as a module (`python3 -m fakegpu.perf.bandwidth_worker`) or by path.

Per op and size: one checked call (rank-distinct values copied in from the host, the result copied back and
compared with what the ranks' inputs make: data really moved), `--warmup` untimed calls, then `--iters` calls
back to back and one device synchronize, as nccl-tests times them; each rank's time per call is reduced with
MAX, and the count of ranks whose check failed with SUM. Rank 0 prints one line: MARKER then the JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MARKER = "FAKEGPU-BANDWIDTH-RESULT "
OPS = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all")
DTYPES = {"float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
          "bfloat16": "bfloat16", "double": "float64", "float64": "float64", "int32": "int32", "int64": "int64"}


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bandwidth_worker")
    p.add_argument("--sweep", action="append", required=True, metavar="OP:SIZE,SIZE,...",
                   help="an op and its byte sizes, already whole elements (per rank where the op splits); repeatable")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="float")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--out", help="rank 0 also writes the result here (a line of output can be cut by another "
                   "process writing to the same pipe)")
    return p.parse_args(argv)


class Sweep:
    def __init__(self, torch, dist, dtype, device) -> None:
        self.torch, self.dist, self.dtype, self.device = torch, dist, dtype, device
        self.rank, self.n = dist.get_rank(), dist.get_world_size()

    def host(self, values):
        """A host tensor of `values` (a list of per-chunk fill values and a chunk length)."""
        fills, chunk = values
        return self.torch.cat([self.torch.full((chunk,), float(v), dtype=self.dtype) for v in fills])

    def buffers(self, op: str, count: int):
        """(output, call, expected output on the host) for `op` moving `count` elements in all."""
        t, d, r, n = self.torch, self.dist, self.rank, self.n
        per = count // n
        total = n * (n + 1) // 2
        if op == "all-reduce":
            buf = self.host(([r + 1], count)).to(self.device)
            return buf, lambda: d.all_reduce(buf), self.host(([total], count))
        if op == "broadcast":
            buf = self.host(([r + 1], count)).to(self.device)
            return buf, lambda: d.broadcast(buf, src=0), self.host(([1], count))
        if op == "all-gather":
            inp = self.host(([r + 1], per)).to(self.device)
            out = t.empty(per * n, dtype=self.dtype, device=self.device)
            return out, lambda: d.all_gather_into_tensor(out, inp), self.host((range(1, n + 1), per))
        if op == "reduce-scatter":
            inp = self.host(([r + 1], per * n)).to(self.device)
            out = t.empty(per, dtype=self.dtype, device=self.device)
            return out, lambda: d.reduce_scatter_tensor(out, inp), self.host(([total], per))
        if op == "all-to-all":
            # chunk j of rank r's input goes to rank j, which finds it as its chunk r
            inp = self.host(([r * n + j + 1 for j in range(n)], per)).to(self.device)
            out = t.empty(per * n, dtype=self.dtype, device=self.device)
            return out, lambda: d.all_to_all_single(out, inp), self.host(([j * n + r + 1 for j in range(n)], per))
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")

    def reduce(self, value: float, op) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=op)
        return float(t.item())

    def measure(self, op: str, size: int, iters: int, warmup: int) -> dict:
        t = self.torch
        elem = t.empty((), dtype=self.dtype).element_size()
        count = size // elem
        out, call, expected = self.buffers(op, count)
        call()
        t.cuda.synchronize()
        good = bool(t.equal(out.cpu(), expected))
        bad_ranks = int(self.reduce(0.0 if good else 1.0, self.dist.ReduceOp.SUM))
        for _ in range(warmup):
            call()
        t.cuda.synchronize()
        self.reduce(0.0, self.dist.ReduceOp.SUM)  # every rank starts its timed calls together
        start = time.perf_counter()
        for _ in range(iters):
            call()
        t.cuda.synchronize()
        per_call = (time.perf_counter() - start) / max(iters, 1)
        worst = self.reduce(per_call, self.dist.ReduceOp.MAX)
        return {"size": size, "count": count, "time_s": worst, "rank_time_s": per_call,
                "check": "ok" if not bad_ranks and good else "wrong", "wrong_ranks": bad_ranks}


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    sweeps = []
    for item in args.sweep:
        op, _, sizes = item.partition(":")
        if op not in OPS:
            print(f"bandwidth_worker: unknown op {op!r}; known: {', '.join(OPS)}", file=sys.stderr)
            return 2
        sweeps.append((op, [int(s) for s in sizes.split(",") if s]))
    if args.dtype not in DTYPES:
        print(f"bandwidth_worker: unknown dtype {args.dtype!r}; known: {', '.join(DTYPES)}", file=sys.stderr)
        return 2
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group(args.backend)
    sweep = Sweep(torch, dist, getattr(torch, DTYPES[args.dtype]), device)
    started = time.time()
    results = {op: [sweep.measure(op, s, args.iters, args.warmup) for s in sizes] for op, sizes in sweeps}
    if sweep.rank == 0:
        text = json.dumps({
            "world_size": sweep.n, "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "backend": dist.get_backend(), "dtype": args.dtype, "iters": args.iters, "warmup": args.warmup,
            "torch": torch.__version__, "torch_cuda": torch.version.cuda, "device": torch.cuda.get_device_name(local),
            "hostname": os.uname().nodename, "seconds": time.time() - started,
            "ops": results}, separators=(",", ":"))
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        print(MARKER + text, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
