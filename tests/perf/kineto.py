"""Small Kineto traces written by hand, event by event, with the fields PyTorch's profiler writes (torch 2.x,
libkineto's output_json): host ops and annotations on the process's track, kernels/copies on a device pid and a
stream tid with args.stream and args.correlation, the cudaLaunchKernel that queued each with the same correlation
and an ac2g flow pair between them, `[memory]` instant events, NCCL kernels with record_param_comms' metadata, and
the header keys (schemaVersion, deviceProperties, distributedInfo) before traceEvents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

BASE = 5_650_710_000_000.0  # microseconds, as in a torch 2.15 trace here (ts from a base; float64 keeps ns there)
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029027840, "computeMajor": 9,
        "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}
A100 = {**H100, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85094826240, "computeMajor": 8, "numSms": 108}


class Trace:
    """A trace under construction; times are microseconds from the trace's start."""

    def __init__(self, *, rank: int | None = None, world: int | None = None, device: dict | None = None,
                 pid: int = 4242, stream: int = 7) -> None:
        self.rank, self.world, self.device = rank, world, device or H100
        self.pid, self.tid, self.stream = pid, pid, stream
        self.events: list[dict[str, Any]] = []
        self._corr = 100
        self._ext = 1
        self.events += [
            {"name": "process_name", "ph": "M", "ts": BASE, "pid": pid, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_name", "ph": "M", "ts": BASE, "pid": 0, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": BASE, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        ]

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid, "ts": BASE + ts,
                            "dur": dur, "args": {"External id": self._ext, **args}})
        self._ext += 1

    def step(self, n: int, ts: float, dur: float, gpu: tuple[float, float] | None = None) -> None:
        self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")
        if gpu:
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0,
                                "tid": self.stream, "ts": BASE + gpu[0], "dur": gpu[1],
                                "args": {"External id": self._ext - 1}})

    def annotate(self, name: str, ts: float, dur: float) -> None:
        self.host(name, ts, dur, cat="user_annotation")

    def next_correlation(self) -> int:
        self._corr += 1
        return self._corr - 1

    def kernel(self, name: str, ts: float, dur: float, *, launch: float | None = None, stream: int | None = None,
               cat: str = "kernel", **args: Any) -> int:
        """A GPU activity and the cudaLaunchKernel (or cudaMemcpyAsync) that queued it 5 us before."""
        corr = self._corr
        self._corr += 1
        launch = ts - 5.0 if launch is None else launch
        stream = self.stream if stream is None else stream
        api = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}[cat]
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": self.pid, "tid": self.tid,
                            "ts": BASE + launch, "dur": 3.0,
                            "args": {"External id": self._ext, "cbid": 211, "correlation": corr}})
        gpu_args: dict[str, Any] = {"External id": self._ext, "queued": 0, "device": 0, "context": 1,
                                    "stream": stream, "correlation": corr}
        if cat == "kernel":
            gpu_args |= {"registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0,
                         "grid": [132, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 6}
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": BASE + ts,
                            "dur": dur, "args": {**gpu_args, **args}})
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": BASE + launch,
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": BASE + ts, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})
        self._ext += 1
        return corr

    def nccl(self, collective: str, ts: float, dur: float, *, nelems: int, dtype: str = "Float", group: int = 2,
             pg: str = "0", stream: int = 20, launch: float | None = None) -> None:
        """An NCCL kernel as PyTorch 2.x records it: record_param_comms on the host, the metadata on the kernel."""
        meta = {"Collective name": collective, "In msg nelems": nelems, "Out msg nelems": nelems,
                "Group size": group, "dtype": dtype, "In split size": "[]", "Out split size": "[]",
                "Process Group Name": pg, "Process Group Description": "default_pg",
                "Process Group Ranks": str(list(range(group)))}
        launch = ts - 5.0 if launch is None else launch
        self.host("record_param_comms", launch - 1.0, 8.0, **meta)
        kname = {"allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                 "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                 "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                                   "ncclWork*)"}[collective]
        self.kernel(kname, ts, dur, launch=launch, stream=stream, **meta)

    def memory(self, ts: float, allocated: int, reserved: int, nbytes: int, device_type: int = 1) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                            "tid": self.tid, "ts": BASE + ts,
                            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                                     "Addr": 139872000000000, "Device Id": 0 if device_type else -1,
                                     "Device Type": device_type}})

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [self.device]}
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world,
                                      "pg_count": 1, "pg_config": [], "nccl_version": "2.21.5"}
        doc["traceEvents"] = self.events
        doc |= {"traceName": f"rank{self.rank or 0}.json", "displayTimeUnit": "ms",
                "baseTimeNanoseconds": 1790857026000000000}
        return doc

    def write(self, path: Path) -> Path:
        text = json.dumps(self.document(), indent=1)
        if path.name.endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"  # noqa: E501
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
SUM = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>()"


# The GEMMs' shapes by their length at scale 1 (us): (m, k, n), bf16, for the aten::mm ops `shapes` writes
GEMM_SHAPES = {40.0: (8192, 1024, 1024), 50.0: (8192, 1024, 1024), 60.0: (8192, 1024, 2048),
               70.0: (8192, 1024, 2048), 80.0: (8192, 1024, 3072)}


def _gemm(t: Trace, ts: float, dur: float, base: float, launch: float, shapes: bool) -> None:
    """A GEMM kernel; with `shapes`, launched from an aten::mm op with its Input Dims (record_shapes=True)."""
    if not shapes:
        t.kernel(GEMM, ts, dur, launch=launch)
        return
    m, k, n = GEMM_SHAPES[base]
    ext = t._ext
    t.host("aten::mm", launch - 1.0, 4.0, **{"Input Dims": [[m, k], [k, n]],
                                             "Input type": ["c10::BFloat16", "c10::BFloat16"]})
    t.kernel(GEMM, ts, dur, launch=launch, **{"External id": ext})


def training_steps(t: Trace | list[Trace], steps: int = 4, *, compute_scale: float | list[float] = 1.0,
                   t0: float = 0.0, comm: bool = False, gap: float = 20.0, shapes: bool = False) -> float:
    """`steps` training steps of a small transformer on one rank or several (a list of traces, one scale each):
    GEMMs, attention, elementwise, a reduction, a copy, memory events, and with `comm` an all-reduce on its own
    stream overlapping the backward GEMMs, which ends on every rank when the last rank has joined it plus the
    transfer. The host runs ahead of the GPU as in an ordinary GPU-bound loop (a launch every 6 us from the step's
    start) and blocks in cudaStreamSynchronize at the step's end (loss.item()). With `shapes`, each GEMM's aten::mm
    op and its Input Dims (GEMM_SHAPES), for MFU. Returns the end."""
    traces = t if isinstance(t, list) else [t]
    scales = compute_scale if isinstance(compute_scale, list) else [compute_scale] * len(traces)
    now = [t0] * len(traces)
    for n in range(steps):
        plans = [_forward(tr, n, now[r], scales[r], gap, shapes) for r, tr in enumerate(traces)]
        joined = max(p["bwd"] + 30.0 for p in plans)
        for r, (tr, p) in enumerate(zip(traces, plans, strict=True)):
            bwd = p["bwd"]
            if comm:
                arrive = bwd + 30.0
                tr.nccl("allreduce", arrive, joined + 150.0 - arrive, nelems=25_000_000, launch=p["launch"](arrive))
            for name, base in ((GEMM, 70.0), (GEMM, 70.0), (SUM, 12.0), (ADD, 9.0), (GEMM, 50.0)):
                dur = base * scales[r] if name == GEMM else base
                if name == GEMM:
                    _gemm(tr, bwd, dur, base, p["launch"](bwd), shapes)
                else:
                    tr.kernel(name, bwd, dur, launch=p["launch"](bwd))
                bwd += dur + 3.0
            end = max(bwd, joined + 150.0 if comm else bwd) + 10.0
            tr.kernel("Memset (Device)", end - 8.0, 2.0, cat="gpu_memset", launch=p["launch"](end - 8.0))
            tr.memory(end - 1.0, 1 << 30, 2 << 30, 300 << 20)
            host = p["launch"](end) + 6.0
            tr.host("cudaStreamSynchronize", host, end + 2.0 - host, cat="cuda_runtime", cbid=131,
                    correlation=tr.next_correlation())
            tr.step(n + 1, p["begin"], end - p["begin"] + 2.0, gpu=(p["begin"] + 10.0, end - p["begin"]))
            now[r] = end + 5.0
    return max(now)


def _forward(t: Trace, n: int, begin: float, scale: float, gap: float, shapes: bool = False) -> dict:
    host = begin + 2.0

    def launch(at: float) -> float:
        nonlocal host
        host += 6.0
        return min(host, at - 1.0)

    k = begin + 10.0
    t.memory(begin + 1.0, (1 << 30) + (n % 2) * (64 << 20), 2 << 30, 1 << 20)
    t.kernel("Memcpy HtoD (Pageable -> Device)", k, 12.0, launch=launch(k), cat="gpu_memcpy",
             bytes=1 << 20, **{"memory bandwidth (GB/s)": 87.4})
    k += 12.0 + gap
    for name, base in ((NORM, 8.0), (GEMM, 60.0), (FLASH, 45.0), (GEMM, 40.0), (ADD, 6.0), (GEMM, 80.0), (ADD, 5.0)):
        dur = base * scale if name in (GEMM, FLASH) else base
        if name == GEMM:
            _gemm(t, k, dur, base, launch(k), shapes)
        else:
            t.kernel(name, k, dur, launch=launch(k))
        k += dur + 2.0
    t.memory(k, (1 << 30) + (300 << 20), 2 << 30, 300 << 20)
    return {"begin": begin, "bwd": k + gap, "launch": launch}


def multistream(t: Trace, steps: int = 5, seed: int = 7) -> None:
    """A busier rank in PyTorch 2.4+'s nanosecond timestamps (three decimals of a microsecond): a compute stream,
    a second compute stream (a side branch), a copy stream and an NCCL stream, kernel lengths drawn from a seeded
    generator (3-400 us), idle gaps between steps, and steps that overlap communication with compute partly."""
    import random

    rnd = random.Random(seed)
    now = 0.0
    names = (GEMM, FLASH, ADD, NORM, SUM, "triton_poi_fused_add_mul_0", "void cutlass::Kernel<cutlass_80_"
             "tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)")
    for n in range(steps):
        begin = now
        host = begin + 1.117

        def launch(at: float) -> float:
            nonlocal host
            host += rnd.uniform(4.0, 9.0)
            return min(host, at - 0.731)

        k = begin + rnd.uniform(15.0, 40.0)
        side = k + rnd.uniform(30.0, 90.0)
        copy = k + rnd.uniform(0.0, 50.0)
        comm = k + rnd.uniform(150.0, 400.0)
        for _ in range(30):
            d = round(rnd.uniform(3.0, 400.0), 3)
            t.kernel(rnd.choice(names), round(k, 3), d, launch=round(launch(k), 3))
            k += d + round(rnd.uniform(0.5, 30.0), 3)
        for _ in range(6):
            d = round(rnd.uniform(5.0, 120.0), 3)
            t.kernel(rnd.choice(names), round(side, 3), d, launch=round(launch(side), 3), stream=13)
            side += d + round(rnd.uniform(10.0, 200.0), 3)
        for _ in range(3):
            d = round(rnd.uniform(10.0, 60.0), 3)
            t.kernel("Memcpy HtoD (Pinned -> Device)", round(copy, 3), d, launch=round(launch(copy), 3),
                     stream=9, cat="gpu_memcpy", bytes=4 << 20)
            copy += d + round(rnd.uniform(20.0, 300.0), 3)
        for _ in range(2):
            d = round(rnd.uniform(100.0, 900.0), 3)
            t.nccl("allreduce", round(comm, 3), d, nelems=rnd.randrange(1 << 20, 1 << 26), dtype="BFloat16",
                   group=1, launch=round(launch(comm), 3))
            comm += d + round(rnd.uniform(50.0, 500.0), 3)
        end = max(k, side, copy, comm) + rnd.uniform(5.0, 60.0)
        t.step(n + 1, begin, round(end - begin, 3))
        now = end + rnd.uniform(50.0, 400.0)  # the host's data loading between steps: the GPU idles


def write_example(folder: Path) -> None:
    """tests/data/traces/ddp-2rank: the README's example, two ranks of four steps, rank 1's GEMMs 25% slower, the
    GEMMs' aten::mm ops with their shapes (as record_shapes=True writes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    pair = [Trace(rank=r, world=2) for r in (0, 1)]
    training_steps(pair, 4, comm=True, compute_scale=[1.0, 1.25], shapes=True)
    for t in pair:
        t.write(folder / f"rank{t.rank}.json.gz")


if __name__ == "__main__":
    import sys

    write_example(Path(sys.argv[1]))
