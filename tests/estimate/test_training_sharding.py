"""Where adapters, offloaded shards and NCCL buffers sit under FSDP/ZeRO-3, and which dtype PEFT gives adapters."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fakegpu.estimate import runtime
from fakegpu.estimate.training import TrainingOptions, plan_training
from fakegpu.profiles.workspace_profiles import non_pytorch_bytes
from tests.estimate.conftest import DEVSET, make_model

LORA = TrainingOptions(method="lora", lora_rank=16, micro_batch=1, seq_len=512, precision="bf16-mixed")
# Qwen3-8B: untied embeddings and lm_head, 151936 x 4096 each, in bf16: FSDP's root unit.
QWEN3_8B_ROOT_BYTES = 2 * 151936 * 4096 * 2


def components(models, options: TrainingOptions, phase: str = "backward") -> tuple[dict, int]:
    r = plan_training(models["qwen3-8b"], options)
    return r["phases"][phase]["components"], r["trainable_parameters"]


def test_peft_before_0_12_keeps_adapters_in_the_base_dtype(models):
    new, n = components(models, replace(LORA, peft="0.13.2"))
    old, _ = components(models, replace(LORA, peft="0.10.0"))
    assert new["weights"] == pytest.approx(n * 4, rel=1e-6)  # autocast_adapter_dtype: fp32 adapters
    assert old["weights"] == pytest.approx(n * 2, rel=1e-6)  # LoraLayer.update_layer: .to(weight.dtype)
    assert old["optimizer_states"] == pytest.approx(n * 2 * 2, rel=1e-6)  # AdamW's two states follow the params


def test_uint8_stored_4bit_leaves_old_peft_adapters_in_fp32(models):
    # Single-GPU QLoRA stores NF4 as uint8 (not floating point): old PEFT's cast does not apply. FSDP needs a float
    # quant_storage to flatten the 4-bit weight with the bf16 norms, so there the adapters follow it to bf16.
    single, n = components(models, replace(LORA, method="qlora", peft="0.10.0"))
    sharded, _ = components(models, replace(LORA, method="qlora", peft="0.10.0", fsdp="full", gpus=2))
    assert single["weights"] == pytest.approx(n * 4, rel=1e-6)
    assert sharded["weights"] == pytest.approx(n * 2 / 2, rel=1e-6)


def test_fsdp_and_zero3_partition_the_adapters(models):
    for sharding in ({"fsdp": "full"}, {"zero": 3}):
        parts, n = components(models, replace(LORA, gpus=8, **sharding))
        assert parts["weights"] == pytest.approx(n * 4 / 8, rel=1e-6)
    ddp, n = components(models, replace(LORA, gpus=8))
    assert ddp["weights"] == pytest.approx(n * 4, rel=1e-6)


def test_fsdp_offload_stages_the_largest_shard_on_the_gpu(models):
    offload, _ = components(models, replace(LORA, fsdp="full", gpus=2, offload="params"))
    # The root unit (embeddings + head) is Qwen3-8B's largest FSDP unit: its shard is copied host-to-device first.
    assert offload["offload_staging"] == pytest.approx(QWEN3_8B_ROOT_BYTES / 2, rel=0.01)
    assert offload["frozen_weights"] == 0 and offload["weights"] == 0
    resident, _ = components(models, replace(LORA, fsdp="full", gpus=2))
    zero3, _ = components(models, replace(LORA, zero=3, gpus=2, offload="params"))
    assert resident["offload_staging"] == 0 and zero3["offload_staging"] == 0
    peak = {o: plan_training(models["qwen3-8b"], replace(LORA, fsdp="full", gpus=2, offload=o))["peak"]
            for o in ("none", "params")}
    assert peak["params"]["max_memory_reserved"] < peak["none"]["max_memory_reserved"]


def test_nccl_buffers_follow_the_measured_communicator_sizes(models):
    assert runtime.nccl_bytes(1) == 0
    assert runtime.nccl_bytes(2) == 544_000_000  # NVIDIA/nccl#964: 2-rank group on 4x A100 NVLink
    assert runtime.nccl_bytes(4) == runtime.nccl_bytes(8) == 688_000_000
    r = plan_training(models["qwen3-8b"], replace(LORA, fsdp="full", gpus=2), target="a100")
    context = non_pytorch_bytes((8, 0))  # the context as a process that ran kernels and cuBLAS holds it
    assert r["peak"]["nvidia_smi_used"] - r["peak"]["max_memory_reserved"] == context + 544_000_000


def test_fsdp_setup_leaves_its_copies_cached(tmp_path):
    # Answer.AI's Llama-2-7B QLoRA FSDP run on 2 GPUs: "It's actually about 3.72GiB (see reserved_after_model_wrap)".
    config = json.loads((DEVSET / "configs" / "llama-2-7b.json").read_text())
    model = make_model(tmp_path, "llama-2-7b", config)
    o = TrainingOptions(method="qlora", lora_rank=64, lora_targets="q_proj,k_proj,v_proj,gate_proj,up_proj,down_proj",
                        precision="bf16", micro_batch=1, seq_len=512, grad_checkpointing=True, fsdp="full", gpus=2,
                        bitsandbytes="0.43.0", peft="0.10.0")
    r = plan_training(model, o)
    setup = r["phases"]["fsdp_setup"]
    assert setup["max_memory_reserved"] == pytest.approx(3.72 * 2**30, rel=0.03)
    assert setup["max_memory_reserved"] - r["phases"]["load"]["max_memory_reserved"] > 1.5 * 2**30
    assert "fsdp_setup" not in plan_training(model, replace(o, fsdp="none", gpus=1))["phases"]


def test_deepspeed_keeps_fp32_master_and_states_for_bf16_adapters(models):
    # DeepSpeed v0.14 stage3.py _create_fp32_partitions: the optimizer steps fp32 copies of each partition whatever
    # the adapters' dtype, so PEFT < 0.12's bf16 adapters still cost 4 + 8 bytes of optimizer memory per parameter
    # under ZeRO; FSDP's torch AdamW keeps its states in the parameters' bf16.
    old = replace(LORA, peft="0.10.0", gpus=2)
    zero3, n = components(models, replace(old, zero=3), "optimizer_step")
    fsdp, _ = components(models, replace(old, fsdp="full"), "optimizer_step")
    assert zero3["weights"] == pytest.approx(n * 2 / 2, rel=1e-6)  # the bf16 partition the model computes with
    assert zero3["gradients"] == pytest.approx(n * 2 / 2, rel=1e-6)  # grad_accum_dtype = model dtype under ZeRO
    assert zero3["optimizer_states"] == pytest.approx(n * (4 + 8) / 2, rel=1e-6)
    assert zero3["step_temporaries"] == pytest.approx(n * 4 / 2, rel=1e-6)  # _prepare_fp32_grad_for_sub_group
    assert fsdp["optimizer_states"] == pytest.approx(n * 2 * 2 / 2, rel=1e-6)
    offloaded, _ = components(models, replace(old, zero=3, offload="optimizer"), "optimizer_step")
    assert offloaded["optimizer_states"] == 0 and offloaded["step_temporaries"] == 0
    fp32, _ = components(models, replace(old, zero=3, precision="fp32"), "optimizer_step")
    assert fp32["optimizer_states"] == pytest.approx(n * 8 / 2, rel=1e-6)
