"""`fakegpu replay-trace` on a generated ~1 GB Kineto trace (issue 16's target: under 60 s with a peak RSS under
1 GB). The trace is written to a temporary folder in PyTorch's layout (kernels with their cudaLaunchKernel and
ac2g flows, cpu_ops, [memory] events, ProfilerStep annotations, NCCL kernels with record_param_comms metadata),
then replayed, with a what-if, in a child process whose wall time and peak RSS (getrusage of the child) are
printed. Usage: bench_replay_trace.py [--gib 1.0] [--gzip] [--keep]"""

from __future__ import annotations

import argparse
import gzip
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = 5_650_710_000_000.0
KERNELS = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
           "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
           "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
           "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
           "cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>"
           "(pytorch_flash::Flash_fwd_params)",
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>()")
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def write_trace(path: Path, target_bytes: int, compress: bool) -> int:
    """A trace of about `target_bytes` (uncompressed); returns the number of events."""
    rnd = random.Random(0)
    opener = gzip.open(path, "wt", compresslevel=1) if compress else open(path, "w")
    events = 0
    with opener as f:
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
                '"totalGlobalMem": 85029027840, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],\n'
                '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n  "traceEvents": [\n')
        written = 0
        host = gpu = 0.0
        corr = ext = 1
        step = 1
        allocated = 1 << 30
        first = True
        while written < target_bytes:
            chunk = []
            step_begin = host
            for k in range(2000):
                host += rnd.uniform(4.0, 9.0)
                dur = round(rnd.uniform(2.0, 300.0), 3)
                gpu = max(gpu + rnd.uniform(0.5, 5.0), host + 3.0)
                ts_h, ts_g = BASE + host, BASE + gpu
                name = NCCL if k % 500 == 499 else KERNELS[k % len(KERNELS)]
                extra = ""
                if name is NCCL:
                    extra = (', "Collective name": "allreduce", "In msg nelems": 16777216, "Out msg nelems": '
                             '16777216, "Group size": 1, "dtype": "BFloat16", "Process Group Name": "0"')
                chunk.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 4242, "tid": 4242, '
                    f'"ts": {ts_h - 2.5:.3f}, "dur": 9.125, "args": {{"External id": {ext}, "Sequence number": '
                    f'{ext}, "Fwd thread id": 0, "Record function id": 0, "Ev Idx": {ext}}}}}')
                chunk.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, '
                    f'"ts": {ts_h:.3f}, "dur": 3.211, "args": {{"External id": {ext}, "cbid": 211, '
                    f'"correlation": {corr}}}}}')
                chunk.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {ts_g:.3f}, '
                    f'"dur": {dur}, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, '
                    f'"stream": {20 if name is NCCL else 7}, "correlation": {corr}, "registers per thread": 128, '
                    f'"shared memory": 49152, "blocks per SM": 1.0, "warps per SM": 4.0, "grid": [132, 1, 1], '
                    f'"block": [128, 1, 1], "est. achieved occupancy %": 6{extra}}}}}')
                chunk.append(f'{{"ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": {ts_h:.3f}, '
                             f'"cat": "ac2g", "name": "ac2g"}}')
                chunk.append(f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {ts_g:.3f}, "cat": "ac2g", '
                             f'"name": "ac2g", "bp": "e"}}')
                if k % 4 == 0:
                    allocated += rnd.choice((1, -1)) * (1 << 20)
                    chunk.append(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": '
                                 f'4242, "tid": 4242, "ts": {ts_h + 1:.3f}, "args": {{"Total Reserved": '
                                 f'{4 << 30}, "Total Allocated": {allocated}, "Bytes": 1048576, "Addr": '
                                 f'139872000000000, "Device Id": 0, "Device Type": 1}}}}')
                gpu += dur
                corr += 1
                ext += 1
            chunk.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 4242, '
                         f'"tid": 4242, "ts": {BASE + step_begin:.3f}, "dur": {host - step_begin:.3f}, '
                         f'"args": {{"External id": {ext}}}}}')
            step += 1
            ext += 1
            text = ("" if first else ",\n") + ",\n".join(chunk)
            first = False
            f.write(text)
            written += len(text)
            events += len(chunk)
        f.write('\n  ],\n  "traceName": "bench.json", "displayTimeUnit": "ms"\n}\n')
    return events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0, help="uncompressed size of the generated trace")
    ap.add_argument("--gzip", action="store_true", help="write and read it as .json.gz")
    ap.add_argument("--keep", action="store_true", help="leave the trace in its temporary folder")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fakegpu-bench-trace-"))
    path = folder / ("trace.json.gz" if args.gzip else "trace.json")
    t0 = time.perf_counter()
    events = write_trace(path, int(args.gib * (1 << 30)), args.gzip)
    print(f"generated {path.stat().st_size / 2**30:.2f} GiB on disk, {events:,} events in "
          f"{time.perf_counter() - t0:.1f} s")
    try:
        for what, extra in (("replay", []), ("replay + what-if a100", ["--profile", "a100"])):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "fakegpu", "replay-trace", str(path), "--json", *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode:
                sys.exit(f"replay-trace failed ({done.returncode}): {done.stderr[-2000:]}")
            # ru_maxrss of RUSAGE_CHILDREN is the largest child's peak (KiB on Linux); the generator ran in-process
            rss = after.ru_maxrss / 1024
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(f"{what}: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.0f} MiB (targets: 60 s, 1024 MiB)")
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
