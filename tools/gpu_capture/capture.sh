#!/usr/bin/env bash
# Ground truth from a real NVIDIA GPU, for the facts FakeGPU imitates: nvidia-smi's output and exit codes, NVML and
# driver-API answers, PyTorch's device properties and memory checkpoints, GEMM/bandwidth figures, telemetry under
# load. The same script runs under `fakegpu run` here, so each capture has a twin from the fake to diff against.
#
#     tools/gpu_capture/capture.sh OUT_DIR            # on a machine with a GPU (python3 with CUDA torch, pynvml)
#     fakegpu run --devices h200 -- tools/gpu_capture/capture.sh OUT_DIR     # the fake's answers, same steps
#
# Every step has its own time limit and writes NAME.out / NAME.err; steps.tsv says how each ended. A failed step
# never stops the others: a rented GPU hour is too dear to lose to one bad query.
set -u
out=${1:?usage: capture.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=${PYTHON:-python3}
quick=${CAPTURE_QUICK:-0}   # 1: short loops (a dry run under the fake, where timings mean nothing)
export CAPTURE_QUICK=$quick PYTHONUNBUFFERED=1
mkdir -p "$out"
printf 'step\trc\tseconds\n' >"$out/steps.tsv"

step() {  # step NAME LIMIT_S CMD...
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s%N)
    timeout -k 5 "$limit" "$@" >"$out/$name.out" 2>"$out/$name.err"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((($(date +%s%N) - t0) / 1000000))ms" >>"$out/steps.tsv"
    echo "== $name rc=$rc"
}

# nvidia-smi as users call it; each command's exit status matters as much as its text.
smi() {  # smi NAME ARGS...
    local name=$1
    shift
    step "smi_$name" 30 nvidia-smi "$@"
}

step env 30 sh -c 'uname -a; cat /proc/driver/nvidia/version; ls -l /dev/nvidia* /proc/driver/nvidia/gpus;
    ldconfig -p | grep -E "libcuda|libnvidia-ml"; nproc; grep MemTotal /proc/meminfo; command -v nvcc && nvcc --version;
    '"$py"' -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda,
    torch.backends.cudnn.version(), torch.cuda.nccl.version())"; '"$py"' -m pip list 2>/dev/null |
    grep -iE "^(torch|nvidia|cuda|transformers|triton|numpy)"'

smi default
smi L -L
smi q -q
smi qx -q -x
smi help -h
smi help_query_gpu --help-query-gpu
smi help_query_apps --help-query-compute-apps
smi topo topo -m
smi nvlink_s nvlink -s
for d in MEMORY UTILIZATION ECC TEMPERATURE POWER CLOCK COMPUTE PIDS PERFORMANCE SUPPORTED_CLOCKS PAGE_RETIREMENT \
         ACCOUNTING ENCODER_STATS FBC_STATS ROW_REMAPPER RESET_STATUS GSP_FIRMWARE_VERSION; do
    smi "qd_$d" -q -d "$d"
done
# Every field the driver lists, in one query and field by field where the whole query is refused.
fields=$(nvidia-smi --help-query-gpu | sed -n 's/^"\([a-z_.]*\)".*/\1/p' | sort -u | paste -sd, -)
smi query_all "--query-gpu=$fields" --format=csv
smi query_all_raw "--query-gpu=$fields" --format=csv,noheader,nounits
smi query_common --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pstate,mig.mode.current --format=csv
smi query_apps --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv
smi dmon dmon -c 2
smi pmon pmon -c 1
smi mig_lgip mig -lgip
smi mig_lgipp mig -lgipp
smi mig_lgi mig -lgi
smi mig_lcip mig -lcip
# Errors: their text and exit status.
smi err_index -i 7
smi err_index_q -i 7 -q
smi err_uuid -i GPU-00000000-0000-0000-0000-000000000000
smi err_field --query-gpu=memory.bogus --format=csv
smi err_format --query-gpu=name --format=xml
smi err_flag --no-such-flag
smi err_dflag -q -d NOSUCH
smi err_lgi_perm mig -cgi 19

step collect_env 60 "$py" -m torch.utils.collect_env
step nvml 60 "$py" "$here/nvml_dump.py"
step driver 90 "$py" "$here/driver_dump.py"
step identity 30 "$py" "$repo/tests/data/probes/driver_identity.py"
step torch 120 "$py" "$here/torch_memory.py" "$out"
step telemetry 60 "$py" "$here/telemetry.py"
step perf 150 "$py" "$here/perf.py"
step mem_workloads 120 "$py" "$repo/tests/memory_fidelity/probe.py" workloads --trace --out "$out/mem_workloads.json"
deadline=$([ "$quick" = 1 ] && echo 20 || echo 90)
step mem_opdb $((deadline + 60)) "$py" "$repo/tests/memory_fidelity/probe.py" opdb --samples 3 --deadline "$deadline" \
    --out "$out/mem_opdb.json"
cat "$out/steps.tsv"
