"""Training plans: orderings that must hold, sharding arithmetic, and config files."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training import TrainingOptions, plan_training
from fakegpu.estimate.training_config import read_config_file

BASE = TrainingOptions(micro_batch=1, seq_len=1024)


def peak(models, **changes) -> int:
    return plan_training(models["qwen3-8b"], replace(BASE, **changes))["peak"]["max_memory_allocated"]


def test_method_ordering(models):
    full, lora, qlora = (peak(models, method=m) for m in ("full", "lora", "qlora"))
    assert full > lora > qlora
    params = 8_190_735_360
    assert full > 16 * params  # mixed-precision AdamW: 16 bytes per parameter before activations
    assert lora - qlora > 0.7 * 6.9e9 * (2 - 0.52)  # 4-bit instead of bf16 for ~6.9B linear parameters


def test_zero_stages_shrink_model_states(models):
    stages = [peak(models, zero=z, gpus=8) for z in (0, 1, 2, 3)]
    assert stages[0] > stages[1] > stages[2] > stages[3]
    r = plan_training(models["qwen3-8b"], replace(BASE, zero=3, gpus=8))
    states = r["phases"]["optimizer_step"]["components"]["optimizer_states"]
    assert states == pytest.approx(8_190_735_360 * 12 / 8, rel=0.01)


def test_fsdp_full_is_zero3_plus_its_unsharded_root_and_offload_removes_states(models):
    # FSDP keeps the root unit (embeddings, final norm, lm_head) unsharded from forward into backward
    # (torch's _post_forward_reshard); ZeRO-3 re-partitions them. Qwen3-8B: 2 x 151936 x 4096 bf16 parameters.
    fsdp = plan_training(models["qwen3-8b"], replace(BASE, fsdp="full", gpus=8))
    zero3 = plan_training(models["qwen3-8b"], replace(BASE, zero=3, gpus=8))
    root = fsdp["phases"]["backward"]["components"]["fsdp_root_params"]
    assert root == pytest.approx(2 * 151936 * 4096 * 2, rel=0.01)
    assert zero3["phases"]["backward"]["components"]["fsdp_root_params"] == 0
    # ZeRO reduces through DeepSpeed's 5e8-element bucket; FSDP reduce-scatters one FlatParameter at a time, the
    # largest a decoder layer's bf16 gradient (Qwen3-8B: 36 layers).
    bucket_z = zero3["phases"]["backward"]["components"]["reduce_bucket"]
    bucket_f = fsdp["phases"]["backward"]["components"]["reduce_bucket"]
    assert bucket_z == 500_000_000 * 2
    assert bucket_f == pytest.approx(8_190_735_360 / 36 * 2, rel=0.01)
    assert fsdp["peak"]["max_memory_allocated"] == pytest.approx(
        zero3["peak"]["max_memory_allocated"] + root - bucket_z + bucket_f, rel=0.01)
    r = plan_training(models["qwen3-8b"], replace(BASE, zero=2, gpus=8, offload="optimizer"))
    assert r["phases"]["optimizer_step"]["components"]["optimizer_states"] == 0


def test_checkpointed_layer_and_logits_peak_apart_but_both_stay_reserved(models):
    # With checkpointing a layer's saved tensors come back only when it is recomputed, after the loss's buffers are
    # gone: allocated takes the larger of the two; reserved keeps both (the logits take fresh, larger segments).
    o = replace(BASE, method="lora", grad_checkpointing=True, micro_batch=2)
    r = plan_training(models["qwen3-8b"], o)
    backward = r["phases"]["backward"]
    full_logits = 2 * 1024 * 151936 * (2 + 4 + 4)  # bf16 head output, its fp32 copy, log-softmax (Qwen3 vocab)
    assert backward["components"]["logits"] < full_logits
    assert backward["max_memory_reserved"] - backward["max_memory_allocated"] > full_logits - backward[
        "components"]["logits"]
    plain = plan_training(models["qwen3-8b"], replace(o, grad_checkpointing=False))["phases"]["backward"]
    assert plain["components"]["logits"] == full_logits


def test_checkpointing_and_micro_batch(models):
    assert peak(models, grad_checkpointing=True, micro_batch=4) < peak(models, micro_batch=4)
    assert peak(models, micro_batch=4) > peak(models, micro_batch=1)


def test_optimizers(models):
    adam, adam8, sgd, ada = (peak(models, optimizer=o, zero=1, gpus=1) for o in
                             ("adamw", "adamw-8bit", "sgd", "adafactor"))
    assert adam > adam8 and adam > sgd > ada


def test_validation(models):
    with pytest.raises(EstimateInputError, match="multiple"):
        plan_training(models["tiny"], replace(BASE, gpus=3, tensor_parallel=2))
    with pytest.raises(EstimateInputError, match="ZeRO-3 or FSDP"):
        plan_training(models["tiny"], replace(BASE, offload="params"))
    with pytest.raises(EstimateInputError, match="no linear layer"):
        plan_training(models["tiny"], replace(BASE, method="lora", lora_targets="nonexistent_proj"))


def test_target_max_micro_batch(models):
    r = plan_training(models["tiny"], BASE, target="a100")
    assert r["target"]["verdict"] == "fits" and r["target"]["max_micro_batch"] > 1


def test_config_files(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                              "fp16": {"enabled": True}, "train_micro_batch_size_per_gpu": 8,
                              "optimizer": {"type": "AdamW"}}))
    assert read_config_file(ds) == {"zero": 2, "offload": "optimizer", "precision": "fp16-mixed", "micro_batch": 8,
                                    "optimizer": "adamw"}
    acc = tmp_path / "accelerate.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 16\n"
                   "mixed_precision: bf16\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n"
                   "  fsdp_offload_params: false\n  fsdp_activation_checkpointing: true\n")
    assert read_config_file(acc) == {"gpus": 16, "precision": "bf16-mixed", "fsdp": "hybrid",
                                     "grad_checkpointing": True, "checkpoint_impl": "fsdp-wrapper"}
    acc_ds = tmp_path / "acc-ds.yaml"
    acc_ds.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
                      "  zero_stage: 3\n  offload_param_device: cpu\n")
    assert read_config_file(acc_ds)["zero"] == 3 and read_config_file(acc_ds)["offload"] == "params"
    fsdp = tmp_path / "fsdp.yaml"
    fsdp.write_text("sharding_strategy: FULL_SHARD\ncpu_offload: true\n")
    assert read_config_file(fsdp) == {"fsdp": "full", "offload": "params"}
    junk = tmp_path / "junk.yaml"
    junk.write_text("hello: world\n")
    with pytest.raises(EstimateInputError, match="not a config plan-training reads"):
        read_config_file(junk)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"zero_optimization": {"stage": 7}}))
    with pytest.raises(EstimateInputError, match=r"zero_optimization\.stage"):
        read_config_file(bad)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\xff\xfe\x00\x80")
    with pytest.raises(EstimateInputError, match=r"model\.bin: not a text file \(not UTF-8"):
        read_config_file(binary)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("ds.json", '{"train_micro_batch_size_per_gpu": "abc"}', "field 'train_micro_batch_size_per_gpu': 'abc' is not "
                                                            "a whole number"),
    ("ds.json", '{"train_micro_batch_size_per_gpu": -4}', "field 'train_micro_batch_size_per_gpu': -4 is below 1"),
    ("ds.json", '{"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}',
     "field 'zero_optimization.offload_optimizer': 'cpu' is not a mapping of settings"),
    ("acc.yaml", "distributed_type: FSDP\nfsdp_config: 5\n", "field 'fsdp_config': 5 is not a mapping of settings"),
    ("acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: x}\n",
     "field 'deepspeed_config.zero_stage': 'x' is not a whole number"),
    ("tt.yaml", "batch_size: abc\nmodel: {_component_: torchtune.models.llama3.llama3_8b}\n",
     "field 'batch_size': 'abc' is not a whole number"),
    ("ax.yaml", "base_model: x\nadapter: lora\nlora_dropout: abc\nmicro_batch_size: 1\n",
     "field 'lora_dropout': 'abc' is not a number"),
])
def test_a_config_value_of_the_wrong_type_names_its_key(tmp_path, name, text, message) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(EstimateInputError) as err:
        read_config_file(path)
    assert err.value.message == f"{path}: {message}"


def test_auto_values_of_a_trainer_deepspeed_config_are_left_to_the_trainer(tmp_path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
                                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    assert read_config_file(path) == {"zero": 2, "offload": "optimizer"}


@pytest.mark.parametrize("field", ["peft", "bitsandbytes", "megatron_core"])
def test_library_versions_must_parse(field: str) -> None:
    TrainingOptions(**{field: "0.10.0"}).validate()
    with pytest.raises(EstimateInputError, match=f"--{field.replace('_', '-')}: 'latest' is not a version"):
        TrainingOptions(**{field: "latest"}).validate()
