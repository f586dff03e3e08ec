"""Issue 20, point 3: what recipes switch on, each a flag with its term, and the recipe files that set them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.training import TrainingOptions, plan_training
from fakegpu.estimate.training_config import merge_config_files, read_config
from fakegpu.reports import validate

# Qwen3-8B: vocabulary 151936, hidden 4096, intermediate 12288, 36 layers, 8.19e9 parameters.
V, H, INTER, LAYERS = 151936, 4096, 12288, 36
TOKENS = 2 * 1024
FULL = TrainingOptions(method="full", micro_batch=2, seq_len=1024, precision="bf16", framework="torchtune")


def phases(models, **changes) -> dict:
    return plan_training(models["qwen3-8b"], replace(FULL, **changes))["phases"]


def test_chunked_and_fused_losses_drop_the_fp32_logits(models):
    full = phases(models)["backward"]["components"]["logits"]
    chunked = phases(models, loss="chunked")["backward"]["components"]["logits"]
    fused = phases(models, loss="fused")["backward"]["components"]["logits"]
    assert full == TOKENS * V * (2 + 8)
    assert chunked == TOKENS * V * 2 + TOKENS / 8 * V * 8  # bf16 chunks kept, one chunk upcast at a time
    assert fused == TOKENS / 8 * V * (2 + 8)
    compiled = phases(models, loss="chunked", compile=True)["backward"]["components"]["logits"]
    assert compiled == TOKENS * V * 2  # the compiled loss fuses each chunk's upcast and log-softmax


def test_compile_drops_norm_upcasts_and_the_silu_output(models):
    eager = phases(models)["forward"]["components"]["activations"]
    compiled = phases(models, compile=True)["forward"]["components"]["activations"]
    # two norms go from an fp32 upcast (4h x 2 for bf16 residuals) to the bf16 input; silu(gate) is recomputed
    assert eager - compiled == pytest.approx(TOKENS * LAYERS * ((4 * H * 2 - 2 * H * 2) + INTER * 2), rel=1e-6)


def test_optimizer_in_backward_keeps_one_gradient_and_no_step_temporary(models):
    plain = phases(models)
    fused = phases(models, optimizer_in_backward=True)
    assert plain["optimizer_step"]["components"]["gradients"] == pytest.approx(8_190_735_360 * 2, rel=1e-3)
    assert plain["optimizer_step"]["components"]["step_temporaries"] > 0
    assert fused["backward"]["components"]["gradients"] == V * H * 2  # the largest tensor, an embedding
    assert fused["optimizer_step"]["components"]["step_temporaries"] == 0
    assert phases(models, fused_adam=True)["optimizer_step"]["components"]["step_temporaries"] == 0


def test_activation_offloading_keeps_one_layer(models):
    ckpt = phases(models, grad_checkpointing=True)["forward"]["components"]["activations"]
    off = phases(models, grad_checkpointing=True, activation_offloading=True)["forward"]["components"]["activations"]
    assert ckpt - off == pytest.approx(TOKENS * H * 2 * (LAYERS - 1), rel=1e-6)  # the other layers' inputs


def test_eight_bit_and_paged_optimizer_states(models):
    def states(opt):
        return phases(models, optimizer=opt)["optimizer_step"]["components"]["optimizer_states"]
    assert states("adamw") == pytest.approx(8_190_735_360 * 4, rel=1e-3)  # two bf16 states
    assert states("adamw-8bit") == pytest.approx(8_190_735_360 * 2, rel=1e-3)
    assert states("paged-adamw-8bit") == 0 and states("paged-adamw") == 0  # unified memory, outside the allocator


def test_recipe_options_are_validated():
    with pytest.raises(EstimateInputError, match=r"--loss.*did you mean chunked.*full, chunked, fused"):
        TrainingOptions(loss="chunkd").validate()
    with pytest.raises(EstimateInputError, match="--optimizer-in-backward"):
        TrainingOptions(optimizer_in_backward=True, zero=2, gpus=2).validate()
    with pytest.raises(EstimateInputError, match="--compile"):
        TrainingOptions(framework="megatron", compile=True).validate()
    with pytest.raises(EstimateInputError, match=r"--varying-lengths.*not modelled for --framework megatron"):
        TrainingOptions(framework="megatron", varying_lengths=True).validate()


TORCHTUNE = """\
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_3b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  apply_lora_to_output: False
  lora_rank: 64
  lora_dropout: 0.0
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: 4096
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  packed: True
batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  lr: 3e-4
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
compile: True
enable_activation_checkpointing: True
enable_activation_offloading: True
dtype: bf16
enable_fp8_training: True
"""

AXOLOTL = """\
base_model: NousResearch/Meta-Llama-3-8B
load_in_4bit: true
adapter: qlora
lora_r: 32
lora_dropout: 0.05
lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
sequence_len: 4096
sample_packing: true
micro_batch_size: 2
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
optimizer: paged_adamw_8bit
bf16: auto
flash_attention: true
unsloth_lora_mlp: true
"""

MEGATRON = """\
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
  --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \\
  --use-distributed-optimizer --recompute-granularity selective \\
  --num-layers 32 --num-layers-per-virtual-pipeline-stage 4 --hidden-size 4096 \\
  --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 --fp8-format hybrid
"""


def test_torchtune_recipe(tmp_path):
    f = tmp_path / "3B_lora.yaml"
    f.write_text(TORCHTUNE)
    settings, notes = read_config(f)
    assert settings == {
        "framework": "torchtune", "method": "lora", "lora_targets": "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        "lora_rank": 64, "lora_dropout": 0.0, "micro_batch": 2, "seq_len": 4096, "packed": True,
        "varying_lengths": False, "grad_checkpointing": True, "checkpoint_impl": "fsdp-wrapper",
        "activation_offloading": True, "compile": True,
        "loss": "chunked", "optimizer": "adamw", "fused_adam": True, "precision": "bf16"}
    assert any("enable_fp8_training" in n for n in notes)
    TrainingOptions(**settings).validate()


def test_axolotl_config(tmp_path):
    f = tmp_path / "qlora.yml"
    f.write_text(AXOLOTL)
    settings, notes = read_config(f)
    assert settings["method"] == "qlora" and settings["lora_rank"] == 32 and settings["packed"] is True
    assert settings["optimizer"] == "paged-adamw-8bit" and settings["checkpoint_impl"] == "hf-non-reentrant"
    assert settings["seq_len"] == 4096 and settings["micro_batch"] == 2 and settings["precision"] == "bf16-mixed"
    assert any("unsloth_lora_mlp" in n for n in notes)  # changes memory, not modelled: said, not ignored
    TrainingOptions(**settings).validate()


def test_recipes_without_packing_have_batches_of_varying_length(tmp_path):
    # torchtune's collate and axolotl's (without pad_to_sequence_len) pad each batch to its own longest sample.
    f = tmp_path / "tt.yaml"
    f.write_text(TORCHTUNE.replace("  packed: True", "  packed: False"))
    settings = read_config(f)[0]
    assert settings["packed"] is False and settings["varying_lengths"] is True
    f = tmp_path / "ax.yml"
    f.write_text(AXOLOTL.replace("sample_packing: true", "sample_packing: false"))
    assert read_config(f)[0]["varying_lengths"] is True
    f.write_text(AXOLOTL.replace("sample_packing: true", "sample_packing: false\npad_to_sequence_len: true"))
    assert read_config(f)[0]["varying_lengths"] is False
    assert read_config(tmp_path / "tt.yaml")[0]["varying_lengths"] is True


def test_megatron_argument_list(tmp_path):
    f = tmp_path / "pretrain.sh"
    f.write_text(MEGATRON)
    settings, notes = read_config(f)
    assert settings == {"framework": "megatron", "method": "full", "tensor_parallel": 4, "pipeline_parallel": 2,
                        "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "gpus": 16, "sequence_parallel": True,
                        "distributed_optimizer": True, "recompute": "selective", "pp_schedule": "interleaved",
                        "virtual_stages": 4, "precision": "bf16-mixed"}
    assert any("--fp8-format" in n for n in notes) and any("model shape" in n for n in notes)
    TrainingOptions(**settings).validate()


def test_cli_reads_a_recipe_and_reports_what_it_assumed(models, tmp_path):
    f = tmp_path / "3B_lora.yaml"
    f.write_text(TORCHTUNE.replace("4096", "512"))
    result = CliRunner().invoke(app, ["plan-training", "--model-dir", str(models["qwen3-8b"]), "--config", str(f),
                                      "--lora-targets", "q,v", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    data = doc["data"]
    assert data["options"]["loss"] == "chunked" and data["options"]["lora_targets"] == "q,v"  # typed wins
    assert data["assumptions"]["recipe"]["loss"].startswith("CEWithChunkedOutputLoss")
    assert any("enable_fp8_training" in n for n in data["assumptions"]["config_notes"])
    bad = CliRunner().invoke(app, ["plan-training", "--model-dir", str(models["qwen3-8b"]), "--loss", "chunky"])
    assert bad.exit_code == 2 and "full, chunked, fused" in bad.output and "Traceback" not in bad.output
    helped = CliRunner().invoke(app, ["plan-training", "--help"], env={"COLUMNS": "200"})
    for flag in ("--loss", "--compile", "--activation-offloading", "--optimizer-in-backward", "--packed", "--dora",
                 "--virtual-tokens", "--fused-adam", "--varying-lengths"):
        assert flag in helped.stdout, flag


def test_merge_keeps_notes_in_file_order(tmp_path):
    a, b = tmp_path / "a.yml", tmp_path / "b.yaml"
    a.write_text(AXOLOTL)
    b.write_text(TORCHTUNE)
    notes: list[str] = []
    merged = merge_config_files([Path(a), Path(b)], {"micro_batch": 3}, notes)
    assert merged["framework"] == "torchtune" and merged["micro_batch"] == 3
    assert "unsloth" in notes[0] and "fp8" in notes[-1]


def test_readme_example_is_the_devset_lora_row(tmp_path):
    """The README's first recipe command is the torchtune table's LoRA row: it runs as shown and predicts that row."""
    from fakegpu.estimate.devset import load_devset, run_row
    from tests.conftest import REPO
    from tests.estimate.conftest import DEVSET, make_model

    readme = (REPO / "README.md").read_text()
    part = readme[readme.index("### Adapters and recipe features"):]
    start = part.index("    fakegpu plan-training")
    args = part[start:part.index("\n", part.index("--fused-adam", start))].replace("\\\n", " ").split()[1:]
    config = json.loads((DEVSET / "configs" / "llama-3.2-3b.json").read_text())
    args[args.index("--model-dir") + 1] = str(make_model(tmp_path, "llama-3.2-3b", config))
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["data"]
    rows = load_devset(DEVSET / "devset.json")
    row = next(r for r in rows if r["id"] == "torchtune-llama3.2-3b-lora-recipe-flags-a100")
    expected = run_row(row, DEVSET, tmp_path / "scratch").predicted
    assert data["peak"]["max_memory_allocated"] == expected
    assert abs(expected - row["observed_bytes"]) / row["observed_bytes"] < 0.05
