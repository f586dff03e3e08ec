#!/usr/bin/env bash
# Measure the HF FSDP+QLoRA recipe's GPU memory on FakeGPU's native fake CUDA and compare it with
# `fakegpu plan-training`. See README.md next to this file.
#
# Environment (all optional):
#   HF_PROBE_WORK      work dir for checkpoints, data, runs, predictions   (default /tmp/fakegpu-hf-probe)
#   HF_PROBE_VENV      venv with the pinned 2024 HF stack, reused if there  (default $HF_PROBE_WORK/venv)
#   HF_PROBE_PYTHON    interpreter that creates the venv, 3.10-3.12        (default python3)
#   HF_PROBE_SNAPSHOT  1: also dump rank 0's allocator trace per run (a few MB per run)
set -euo pipefail

TOOL=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$TOOL/../.." && pwd)
WORK=${HF_PROBE_WORK:-/tmp/fakegpu-hf-probe}
VENV=${HF_PROBE_VENV:-$WORK/venv}
BASE_PYTHON=${HF_PROBE_PYTHON:-python3}
FAKEGPU=$REPO/.venv/bin/fakegpu
LAYER_COUNTS=(2 4)

# The stack as of March 2024 (PEFT's examples/sft QLoRA+FSDP recipe), on the torch the native CUDA 12 shims are
# tested with. datasets 2.18 needs numpy<2 and an old pyarrow; TRL 0.8.1 imports rich without declaring it.
PINNED=(
  torch==2.10.0 triton==3.6.0
  transformers==4.39.3 accelerate==0.28.0 peft==0.10.0 trl==0.8.1 bitsandbytes==0.43.0
  datasets==2.18.0 pyarrow==15.0.2 numpy==1.26.4 pandas==2.2.3 tokenizers==0.15.2 safetensors==0.8.0 rich==15.0.0
)

die() { echo "run.sh: $*" >&2; exit 1; }
stamp() { date +%H:%M:%S; }

[[ -x $FAKEGPU ]] || die "$FAKEGPU not found: run 'make' in $REPO first (it creates .venv and builds native/)."
[[ -d $REPO/native/build/lib ]] || die "$REPO/native/build/lib not found: run 'make' in $REPO first (native shims)."

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

# --- venv --------------------------------------------------------------------------------------------------------
# The stamp holds the pin list, so a venv from an interrupted install or other pins is completed, not trusted.
want_stamp=$(printf '%s\n' "${PINNED[@]}")
if [[ -f $VENV/.hf-probe-installed && $(cat "$VENV/.hf-probe-installed") == "$want_stamp" ]]; then
  echo "[$(stamp)] reusing venv $VENV"
else
  if [[ ! -x $VENV/bin/python ]]; then
    "$BASE_PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' \
      || die "$BASE_PYTHON is not Python 3.10-3.12 (numpy 1.26 / pyarrow 15 wheels); set HF_PROBE_PYTHON."
    echo "[$(stamp)] creating venv $VENV"
    "$BASE_PYTHON" -m venv "$VENV"
  fi
  echo "[$(stamp)] installing the pinned stack (torch + CUDA wheels: ~4 GB download the first time)"
  "$VENV/bin/pip" install --quiet "${PINNED[@]}"
  echo "$want_stamp" > "$VENV/.hf-probe-installed"
fi

# --- inputs ------------------------------------------------------------------------------------------------------
echo "[$(stamp)] writing synthetic checkpoints, tokenizer and data under $WORK"
"$VENV/bin/python" "$TOOL/write_synthetic_inputs.py" "$WORK" "${LAYER_COUNTS[@]}"

# --- runs --------------------------------------------------------------------------------------------------------
export FAKEGPU_MEMORY=accounting
# bitsandbytes 0.43 picks its library by torch's CUDA version (12.8, which it has no build for); 123 selects
# libbitsandbytes_cuda123.so, whose CUDA imports all resolve in FakeGPU's CUDA 12 shims.
export BNB_CUDA_VERSION=123
export HF_HOME=$WORK/hfhome HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
export PATH=$VENV/bin:$PATH
snapshot_flag=()
[[ ${HF_PROBE_SNAPSHOT:-0} == 1 ]] && snapshot_flag=(--snapshot)

for offload in true false; do
  for n in "${LAYER_COUNTS[@]}"; do
    out=$WORK/runs/L${n}_offload_$offload
    rm -rf "$out"
    mkdir -p "$out"
    echo "[$(stamp)] run L$n offload_params=$offload -> $out/log.txt"
    if ! (cd "$TOOL" && "$FAKEGPU" run --devices a100:2 --memory accounting --report-dir "$out/report" -- \
        "$VENV/bin/accelerate" launch --config_file "$TOOL/accelerate_fsdp_offload_$offload.yaml" \
        "$TOOL/train_with_probes.py" "$WORK/llama70b-L$n" "$WORK/data" "$out" "${snapshot_flag[@]}" \
        > "$out/log.txt" 2>&1); then
      tail -n 40 "$out/log.txt" >&2
      die "run L$n offload_params=$offload failed; full log: $out/log.txt"
    fi
    grep -h "RUN MAX" "$out/log.txt" | sort -u
  done
done

# --- predictions -------------------------------------------------------------------------------------------------
mkdir -p "$WORK/pred"
for offload in true false; do
  offload_opt=()
  [[ $offload == true ]] && offload_opt=(--offload params)
  for n in "${LAYER_COUNTS[@]}"; do
    "$FAKEGPU" plan-training --model-dir "$WORK/llama70b-L$n" --method qlora --lora-rank 8 --lora-targets all-linear \
      --lora-dropout 0.1 --optimizer adamw --precision bf16 --micro-batch 2 --seq-len 2048 --grad-checkpointing \
      --checkpoint-impl hf-reentrant --fsdp full --gpus 2 "${offload_opt[@]}" --bitsandbytes 0.43.0 --peft 0.10.0 \
      --json > "$WORK/pred/L${n}_offload_$offload.json"
  done
done

# --- comparison --------------------------------------------------------------------------------------------------
echo "[$(stamp)] measured vs plan-training"
"$REPO/.venv/bin/python" "$TOOL/compare_with_estimate.py" "$WORK" | tee "$WORK/comparison.md"
echo
echo "[$(stamp)] table also in $WORK/comparison.md; per-run logs and mem_rank*.json under $WORK/runs"
