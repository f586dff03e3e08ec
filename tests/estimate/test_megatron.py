"""plan-training --framework megatron: Korthikanti et al.'s activation formulas, Megatron-LM's own theoretical memory
report as a reference on the same inputs, pipeline schedules per stage, validation, the report and the CLI.

The reference below re-derives Megatron-LM's megatron/training/theoretical_memory_usage.py (weights and optimizer:
18 or 6 + 12/d bytes per parameter of the most loaded shard; activations: Table 2 of the paper with sequence
parallelism and selective recomputation, times the interleaved-schedule penalty or the fill of the 1F1B pipeline)
from its published formula, independently of fakegpu/estimate/megatron.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.estimate import megatron
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.model_config import parse_model_config
from fakegpu.estimate.training import TrainingOptions, plan_training
from fakegpu.reports import validate
from tests.conftest import REPO
from tests.estimate.conftest import make_model

# GPT-style (MHA, GeLU MLP 4h, LayerNorm, learned positions, tied embeddings): Korthikanti's model shape.
GPT = {"model_type": "gpt_bigcode", "n_embd": 1024, "n_head": 16, "n_inner": 4096, "n_layer": 8, "n_positions": 2048,
       "vocab_size": 50257, "multi_query": False, "torch_dtype": "bfloat16"}
# Llama-style (GQA, SwiGLU, RMSNorm, no biases, untied): the shapes Megatron's parameter count covers exactly.
LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
         "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
BASE = TrainingOptions(framework="megatron", micro_batch=2, seq_len=2048)
# GPT-3 175B as in Korthikanti et al.'s Table 3 (96 layers, hidden 12288, 96 heads), for the README's example.
GPT3 = {**GPT, "n_embd": 12288, "n_head": 96, "n_inner": 49152, "n_layer": 96}


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("megatron"), "gpt", GPT)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("megatron"), "llama", LLAMA)


def cfg_of(doc: dict):
    return parse_model_config(doc, None)


# --- Megatron-LM's theoretical memory report, from its formula ---------------------------------------------------

def megatron_weight_and_optimizer(doc: dict, tp: int, pp: int, dp: int, distributed: bool) -> float:
    h, f, L = doc["hidden_size"], doc["intermediate_size"], doc["num_hidden_layers"]
    heads, groups = doc["num_attention_heads"], doc["num_key_value_heads"]
    padded = megatron.padded_vocab(doc["vocab_size"], tp)
    attention = 2 * h * h * (1 + groups / heads)
    layer = 2 * h * (f * 3 / 2 + 1) + attention  # swiglu, RMSNorm (norm size 1)
    block = layer * L + h  # + final norm
    embedding = h * padded
    shard = (block / pp + embedding) / tp
    if pp == 1:
        shard += embedding / tp  # untied output layer
    return shard * (18 if not distributed else 6 + 12 / dp)


def megatron_activations(doc: dict, o: TrainingOptions, microbatches: int | None) -> float:
    """compute_activation_memory (sequence parallel + selective recompute), without the pp == 1 output-layer
    term (compared separately)."""
    s, b, h, f, L = o.seq_len, o.micro_batch, doc["n_embd"], doc["n_inner"], doc["n_layer"]
    pp, tp = o.pipeline_parallel, o.tensor_parallel
    act = s * b * h * (18 + 4 * f / h) * L
    act += 8 * s * b * pp + s * b * h * pp
    if o.pp_schedule == "interleaved":
        act *= 1 + (pp - 1) / (pp * o.virtual_stages)
    elif pp > 1 and microbatches is not None:
        act *= min(1, microbatches / pp)
    return act / tp


@pytest.mark.parametrize("tp,pp,gpus,distributed", [(1, 1, 1, False), (2, 1, 8, True), (4, 2, 16, False),
                                                    (2, 4, 32, True)])
def test_model_states_match_megatrons_report(llama, tp, pp, gpus, distributed):
    o = replace(BASE, tensor_parallel=tp, pipeline_parallel=pp, gpus=gpus, distributed_optimizer=distributed)
    stage0 = plan_training(llama, o)["megatron"]["stages"][0]
    dp = gpus // (tp * pp)
    reference = megatron_weight_and_optimizer(LLAMA, tp, pp, dp, distributed)
    # The report divides the norm weights by t as well; every tensor-parallel rank holds them whole.
    h, layers = LLAMA["hidden_size"], LLAMA["num_hidden_layers"]
    norms = (2 * h * layers + h) / pp * (1 - 1 / tp)
    reference += norms * (18 if not distributed else 6 + 12 / dp)
    assert stage0["model_state_bytes"] == pytest.approx(reference, rel=1e-6)


@pytest.mark.parametrize("pp,schedule,v,global_batch", [(2, "1f1b", 1, None), (4, "1f1b", 1, 64),
                                                        (4, "1f1b", 1, 4), (4, "interleaved", 2, 64),
                                                        (2, "interleaved", 4, 32)])
def test_first_stage_activations_match_megatrons_report(gpt, pp, schedule, v, global_batch):
    o = replace(BASE, tensor_parallel=4, pipeline_parallel=pp, gpus=4 * pp, sequence_parallel=True,
                recompute="selective", pp_schedule=schedule, virtual_stages=v, global_batch=global_batch)
    m = global_batch // (o.micro_batch * o.data_parallel) if global_batch else None
    ours = plan_training(gpt, o)["megatron"]["stages"][0]["activations_bytes"]
    # Megatron divides the int64 token ids by t as well (a simplification): within 0.1 %.
    assert ours == pytest.approx(megatron_activations(GPT, o, m), rel=1e-3)


def test_single_stage_adds_the_output_layer_and_loss(gpt):
    o = replace(BASE, tensor_parallel=2, gpus=2, sequence_parallel=True, recompute="selective")
    fwd = plan_training(gpt, o)["phases"]["forward"]["components"]
    s, b, t = o.seq_len, o.micro_batch, 2
    vocab = megatron.padded_vocab(GPT["vocab_size"], t)
    # Megatron's report: 4sbh(1 + v/h)/t; we keep its 4sbh/t and count the loss's logits as megatron-core has them:
    # the 16-bit output and its fp32 copy (6 bytes per logit) at the forward peak.
    assert fwd["output_layer_inputs"] == pytest.approx(4 * s * b * GPT["n_embd"] / t, rel=1e-6)
    assert fwd["logits"] == pytest.approx(6 * s * b * vocab / t, rel=1e-6)
    old = plan_training(gpt, replace(o, megatron_core="0.7.0"))["phases"]["forward"]["components"]
    assert old["logits"] == pytest.approx(10 * s * b * vocab / t, rel=1e-6)  # out-of-place max subtraction


def test_unfused_attention_holds_megatrons_score_buffer(gpt):
    o = replace(BASE, tensor_parallel=2, gpus=2, recompute="full")
    unfused = plan_training(gpt, replace(o, attention="unfused"))["phases"]
    fused = plan_training(gpt, o)["phases"]
    buffer = o.micro_batch * GPT["n_head"] / 2 * o.seq_len ** 2 * 2  # b x a/t x s x s, bf16, held for the run
    for phase in ("forward", "backward", "optimizer_step"):
        assert unfused[phase]["components"]["attention_score_buffer"] == pytest.approx(buffer)
        assert fused[phase]["components"]["attention_score_buffer"] == 0
    assert "attention_score_buffer" not in unfused["load"]["components"]


# --- Korthikanti et al. 2022, Table 2 ---------------------------------------------------------------------------

@pytest.mark.parametrize("t,sp", [(1, False), (4, False), (8, True)])
def test_layer_activations_are_the_papers_formulas(t, sp):
    cfg = cfg_of(GPT)
    s, b, h, a = 2048, 2, GPT["n_embd"], GPT["n_head"]
    o = replace(BASE, tensor_parallel=t, gpus=t, sequence_parallel=sp, attention="unfused")
    if not sp:
        paper = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    else:
        paper = s * b * h / t * (34 + 5 * a * s / h)
    assert megatron.layer_activation_bytes(cfg, o)[0] == pytest.approx(paper, rel=1e-9)
    # selective recomputation (or a fused attention kernel) drops exactly the 5as^2b/t attention term
    for dropped in (replace(o, recompute="selective"), replace(o, attention="fused")):
        assert megatron.layer_activation_bytes(cfg, dropped)[0] == pytest.approx(paper - 5 * a * s * s * b / t)
    # full recomputation keeps the layer input, 2sbh, split by t only with sequence parallelism
    assert megatron.layer_activation_bytes(cfg, replace(o, recompute="full"))[1] == 2 * s * b * h / (t if sp else 1)


def test_gqa_and_swiglu_size_the_split_tensors():
    cfg = cfg_of(LLAMA)
    o = replace(BASE, tensor_parallel=2, gpus=2)
    s, b, h, t = 2048, 2, LLAMA["hidden_size"], 2
    kv = LLAMA["num_key_value_heads"] * h // LLAMA["num_attention_heads"]
    # q and k, v (narrower under GQA), the projection input; SwiGLU keeps gate|up (2f) and their product (f).
    split = 2 * h + 2 * kv + 2 * kv + 2 * h + 6 * LLAMA["intermediate_size"]
    assert megatron.layer_activation_bytes(cfg, o)[0] == pytest.approx(s * b * (10 * h + split / t))


# --- pipeline schedules -------------------------------------------------------------------------------------------

def test_1f1b_stages_hold_fewer_microbatches_down_the_pipeline(gpt):
    r = plan_training(gpt, replace(BASE, pipeline_parallel=4, gpus=4, global_batch=32))
    stages = r["megatron"]["stages"]
    assert [st["in_flight_microbatches"] for st in stages] == [4, 3, 2, 1]
    acts = [st["activations_bytes"] for st in stages]
    assert acts == sorted(acts, reverse=True) and acts[0] > 3 * acts[3]
    # The phases shown are the rank that peaks highest: with this small model and its 50k vocabulary that is the
    # last stage (the loss's logits and the tied embedding's copy outweigh three extra micro-batches of 2 layers).
    peaks = [st["max_memory_allocated"] for st in stages]
    assert r["megatron"]["peak_stage"] == peaks.index(max(peaks)) == 3
    assert r["peak"]["max_memory_allocated"] == max(peaks)
    # fewer micro-batches per step than stages: the pipeline never fills
    short = plan_training(gpt, replace(BASE, pipeline_parallel=4, gpus=4, global_batch=4))
    assert [st["in_flight_microbatches"] for st in short["megatron"]["stages"]] == [2, 2, 2, 1]


def test_interleaved_first_stage_is_the_papers_factor(gpt):
    o = replace(BASE, pipeline_parallel=4, gpus=4, global_batch=64, pp_schedule="interleaved", virtual_stages=2)
    stages = plan_training(gpt, o)["megatron"]["stages"]
    flights = [st["in_flight_microbatches"] for st in stages]
    assert flights[0] == pytest.approx(4 * megatron.interleaved_penalty(4, 2))  # (1 + (pp - 1)/(pp v)) x pp
    assert flights == sorted(flights, reverse=True)
    one_f_one_b = plan_training(gpt, replace(o, pp_schedule="1f1b", virtual_stages=1))["megatron"]["stages"]
    assert stages[0]["activations_bytes"] > one_f_one_b[0]["activations_bytes"]


def test_distributed_optimizer_shards_master_weights_and_adam(llama):
    plain = plan_training(llama, replace(BASE, gpus=8))["phases"]["forward"]["components"]
    dist = plan_training(llama, replace(BASE, gpus=8, distributed_optimizer=True))["phases"]["forward"]["components"]
    params = plain["weights"] / 2
    assert plain["optimizer_states"] == pytest.approx(params * 12)
    assert dist["optimizer_states"] == pytest.approx(params * 12 / 8)
    assert dist["weights"] == plain["weights"] and dist["gradients"] == plain["gradients"] == pytest.approx(params * 4)


def test_fp16_and_torch_adam_step_temporaries(llama):
    fp16 = plan_training(llama, replace(BASE, precision="fp16-mixed"))["phases"]
    params = fp16["forward"]["components"]["weights"] / 2
    assert fp16["forward"]["components"]["gradients"] == pytest.approx(params * 2)  # fp16 grad buffer
    assert fp16["optimizer_step"]["components"]["step_temporaries"] == pytest.approx(params * 4)  # fp32 grad copies
    torch_adam = plan_training(llama, replace(BASE, fused_adam=False))["phases"]["optimizer_step"]["components"]
    assert torch_adam["step_temporaries"] == pytest.approx(params * 4)  # foreach sqrt of exp_avg_sq


# --- validation, report, CLI --------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes,flag,says", [
    ({"recompute": "fulll"}, "--recompute", "(did you mean full?); use none, selective, full"),
    ({"pp_schedule": "gpipe"}, "--pp-schedule", "use 1f1b, interleaved"),
    ({"attention": "flash"}, "--attention", "use fused, unfused"),
    ({"sequence_parallel": True}, "--sequence-parallel", "tensor-parallel"),
    ({"pp_schedule": "interleaved", "pipeline_parallel": 2, "gpus": 2}, "--virtual-stages", "2 or more"),
    ({"virtual_stages": 2}, "--virtual-stages", "interleaved"),
    ({"global_batch": 5, "gpus": 2}, "--global-batch", "multiple"),
    ({"method": "lora"}, "--method", "full"),
    ({"zero": 1}, "--framework", "--distributed-optimizer"),
    ({"grad_checkpointing": True}, "--grad-checkpointing", "--recompute"),
])
def test_invalid_megatron_options(changes, flag, says):
    with pytest.raises(EstimateInputError) as err:
        replace(BASE, **changes).validate()
    assert flag in str(err.value) and says in str(err.value)


def test_megatron_flags_need_the_megatron_framework():
    with pytest.raises(EstimateInputError, match=r"--sequence-parallel.*add --framework megatron"):
        TrainingOptions(tensor_parallel=2, gpus=2, sequence_parallel=True).validate()
    # --fused-adam is no longer Megatron's alone: torch.optim.AdamW(fused=True) drops the foreach temporary anywhere
    TrainingOptions(fused_adam=False).validate()


def test_report_carries_assumptions_and_stages(gpt, llama):
    o = replace(BASE, tensor_parallel=2, pipeline_parallel=2, gpus=8, sequence_parallel=True,
                distributed_optimizer=True, recompute="selective", global_batch=16)
    r = plan_training(gpt, o)
    validate(r)
    a = r["megatron"]["assumptions"]
    assert (a["data_parallel"], a["optimizer_shards"], a["microbatches_per_step"]) == (2, 2, 4)
    assert a["sequence_parallel"] and not a["attention_scores_kept"] and a["padded_vocab"] == 50432
    assert len(r["megatron"]["stages"]) == 2 and r["parallelism"]["zero_stage_equivalent"] == 1
    assert "megatron" not in plan_training(llama, TrainingOptions(micro_batch=1, seq_len=256))  # other runs as before


def test_cli_megatron_flags(gpt):
    runner = CliRunner()
    args = ["plan-training", "--model-dir", str(gpt), "--framework", "megatron", "--tensor-parallel", "2",
            "--pipeline-parallel", "2", "--gpus", "8", "--sequence-parallel", "--distributed-optimizer",
            "--recompute", "selective", "--pp-schedule", "interleaved", "--virtual-stages", "2", "--global-batch", "32",
            "--micro-batch", "1", "--seq-len", "1024"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["data"]
    validate(data)
    assert data["options"]["pp_schedule"] == "interleaved" and data["megatron"]["assumptions"]["virtual_stages"] == 2
    text = runner.invoke(app, args)
    assert text.exit_code == 0 and "pipeline stages" in text.stdout and "recompute selective" in text.stdout
    helped = runner.invoke(app, ["plan-training", "--help"], env={"COLUMNS": "200"})
    for flag in ("--sequence-parallel", "--distributed-optimizer", "--recompute", "--pp-schedule", "--virtual-stages",
                 "--global-batch", "--attention", "--no-fused-adam", "--megatron-core"):
        assert flag in helped.stdout, flag
    bad = runner.invoke(app, ["plan-training", "--model-dir", str(gpt), "--framework", "megatron", "--recompute", "al"])
    assert bad.exit_code == 2 and "none, selective, full" in bad.output and "Traceback" not in bad.output


def test_readme_example_runs_as_shown(tmp_path):
    readme = (REPO / "README.md").read_text()
    part = readme[readme.index("### Megatron-LM: `plan-training --framework megatron`"):]
    shown = part[part.index("    fakegpu plan-training"):part.index("\n\n", part.index("    fakegpu plan-training"))]
    args = shown.replace("\\\n", " ").split()[1:]
    model = make_model(tmp_path, "gpt-175b", GPT3)
    args[args.index("--model-dir") + 1] = str(model)
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["data"]
    assert data["megatron"]["assumptions"]["microbatches_per_step"] == 1536 // 16  # dp = 1024 / 64
    assert data["target"]["verdict"] in ("fits", "tight")  # Megatron trains GPT-3 this way on 80 GB GPUs
    bad = CliRunner().invoke(app, [*args[:args.index("--virtual-stages") + 1], "5"])
    assert bad.exit_code == 2 and "96 layers do not split" in bad.output
