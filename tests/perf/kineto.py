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

BASE = 1_733_400_000_000_000.0  # microseconds since the epoch, as Kineto's ts are
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
                "baseTimeNanoseconds": 1733400000000000000}
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


def training_steps(t: Trace, steps: int = 4, *, compute_scale: float = 1.0, t0: float = 0.0,
                   comm: bool = False, gap: float = 20.0) -> float:
    """`steps` training steps of a small transformer: GEMMs, attention, elementwise, a reduction, a copy, memory
    events, and with `comm` an all-reduce on its own stream overlapping the backward GEMMs. The host runs ahead
    of the GPU as in an ordinary GPU-bound loop: it launches every 6 us from the step's start, and the GPU runs
    each kernel when it is launched and its stream is free. Returns the end."""
    now = t0
    for n in range(steps):
        begin = now
        host = begin + 2.0

        def launch(at: float) -> float:
            nonlocal host
            host += 6.0
            return min(host, at - 1.0)

        k = now + 10.0
        t.memory(now + 1.0, (1 << 30) + (n % 2) * (64 << 20), 2 << 30, 1 << 20)
        t.kernel("Memcpy HtoD (Pageable -> Device)", k, 12.0, launch=launch(k), cat="gpu_memcpy",
                 bytes=1 << 20, **{"memory bandwidth (GB/s)": 87.4})
        k += 12.0 + gap
        for name, dur in ((NORM, 8.0), (GEMM, 60.0 * compute_scale), (FLASH, 45.0 * compute_scale),
                          (GEMM, 40.0 * compute_scale), (ADD, 6.0), (GEMM, 80.0 * compute_scale), (ADD, 5.0)):
            t.kernel(name, k, dur, launch=launch(k))
            k += dur + 2.0
        t.memory(k, (1 << 30) + (300 << 20), 2 << 30, 300 << 20)
        bwd = k + gap
        if comm:
            t.nccl("allreduce", bwd + 30.0, 150.0, nelems=25_000_000, launch=launch(bwd + 30.0))
        for name, dur in ((GEMM, 70.0 * compute_scale), (GEMM, 70.0 * compute_scale), (SUM, 12.0), (ADD, 9.0),
                          (GEMM, 50.0 * compute_scale)):
            t.kernel(name, bwd, dur, launch=launch(bwd))
            bwd += dur + 3.0
        end = max(bwd, bwd + 30.0 + 150.0 if comm else bwd) + 10.0
        t.kernel("Memset (Device)", end - 8.0, 2.0, cat="gpu_memset", launch=launch(end - 8.0))
        t.memory(end - 1.0, 1 << 30, 2 << 30, 300 << 20)
        t.step(n + 1, begin, end - begin + 2.0, gpu=(begin + 10.0, end - begin))
        now = end + 5.0
    return now
