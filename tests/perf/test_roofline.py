"""`fakegpu estimate-roofline` end to end: the issue's acceptance, each way of naming the work, the model phases,
boards side by side, and the errors a user meets."""

from __future__ import annotations

import pytest

from fakegpu.estimate.model_config import parse_model_config, read_model_config
from fakegpu.perf import model_ops
from fakegpu.perf.ops import Gemm, MemoryOp
from fakegpu.perf.roofline import Board, estimate, estimate_op
from fakegpu.profiles import load_catalog
from fakegpu.profiles.efficiency import load
from tests.perf.conftest import LLAMA_7B, REPO, roofline, roofline_error, roofline_json

QWEN3_30B_A3B = REPO / "tests" / "data" / "devset" / "configs" / "qwen3-30b-a3b.json"


def only_op(report: dict, profile: int = 0) -> dict:
    [op] = report["profiles"][profile]["ops"]
    return op


# ---------------------------------------------------------------- the acceptance


@pytest.mark.parametrize("how", [["--gemm", "8192x8192x8192", "--dtype", "bf16"],
                                 ["--flops", str(2 * 8192**3), "--bytes", str(3 * 8192 * 8192 * 2), "--dtype", "bf16"]])
def test_h100_bf16_gemm_8192_is_compute_bound_at_989_tflops(how):
    report = roofline_json("--profile", "h100", *how)
    op = only_op(report)
    assert report["profiles"][0]["profile"] == "h100-sxm5-80gb"
    assert op["bound"] == "compute" and op["roofline_bound"] == "compute"
    assert op["peak_tflops"] == pytest.approx(989.4)
    assert op["arithmetic_intensity"] == pytest.approx(8192 / 3, rel=1e-6)
    assert op["arithmetic_intensity"] > op["ridge_point"]
    assert op["ridge_point"] == pytest.approx(989.4e12 / 3352e9)
    assert op["seconds"]["lower"] == pytest.approx(2 * 8192**3 / 989.4e12)
    assert op["seconds"]["lower"] < op["seconds"]["expected"] < op["seconds"]["upper"]
    assert 0.6 < op["mfu"] < 0.8  # the measured large-GEMM share, not the datasheet


@pytest.mark.parametrize("seq_len", [1, 2048])
def test_7b_decode_on_h100_is_memory_bound_and_no_faster_than_weights_over_bandwidth(seq_len):
    report = roofline_json("--profile", "h100", "--model-dir", str(LLAMA_7B), "--phase", "decode", "--batch", "1",
                           "--seq-len", str(seq_len), "--dtype", "bf16")
    model, total = report["model"], report["profiles"][0]["total"]
    assert model["parameters"] == pytest.approx(6.738e9, rel=1e-3)  # Llama-2-7B
    assert model["weight_bytes"] == pytest.approx(2 * model["parameters"])
    assert total["bound"] == "memory"
    assert total["seconds"]["expected"] >= model["weight_bytes"] / 3.35e12
    # The lower bound streams every weight but the embedding table (a decode step reads one row of it).
    embedding = 32000 * 4096 * 2
    assert total["seconds"]["lower"] >= (model["weight_bytes"] - embedding) / 3352e9
    assert total["bytes"] >= model["weight_bytes"] - embedding + model["kv_cache_bytes"]


# ---------------------------------------------------------------- ways of naming the work


def test_op_list_prices_each_op_and_their_total(tmp_path):
    ops = tmp_path / "ops.yaml"
    ops.write_text("ops:\n"
                   "  - {op: gemm, m: 4096, n: 4096, k: 4096, dtype: bf16, name: proj, count: 2}\n"
                   "  - {op: bmm, batch: 32, m: 4096, n: 4096, k: 128, dtype: bf16}\n"
                   "  - {op: attention, batch: 4, heads: 32, kv_heads: 8, q_len: 4096, kv_len: 4096, head_dim: 128,"
                   " causal: true, dtype: bf16}\n"
                   "  - {op: elementwise, kind: gelu, bytes: 256MiB}\n"
                   "  - {op: reduction, kind: rmsnorm, bytes: 0.25GiB}\n"
                   "  - {op: custom, flops: 1T, bytes: 1G, dtype: fp8}\n")
    report = roofline_json("--profile", "h200", "--ops", str(ops))
    rows = report["profiles"][0]["ops"]
    assert [r["op"] for r in rows] == ["gemm", "bmm", "attention", "elementwise", "reduction", "custom"]
    assert rows[0]["name"] == "proj" and rows[0]["count"] == 2
    assert rows[3]["bytes"] == 256 << 20 and rows[4]["bytes"] == 1 << 28
    assert rows[2]["backend"] == "flash"  # torch 2.11's first choice on Hopper
    total = report["profiles"][0]["total"]
    assert total["flops"] == pytest.approx(sum(r["flops"] * r["count"] for r in rows))
    assert total["seconds"]["expected"] == pytest.approx(max(total["host_seconds"]["expected"],
                                                            total["device_seconds"]["expected"]))


def test_boards_side_by_side_in_the_order_given():
    report = roofline_json("--profile", "h100", "--profile", "a100", "--profile", "t4", "--gemm", "4096x4096x4096",
                           "--dtype", "fp16")
    boards = report["profiles"]
    assert [b["profile"] for b in boards] == ["h100-sxm5-80gb", "a100-sxm4-80gb", "tesla-t4"]
    times = [b["total"]["seconds"]["expected"] for b in boards]
    assert times == sorted(times)
    assert boards[2]["peaks"]["fp16"]["sparse_tflops"] is None  # Turing has no sparse tensor cores
    assert boards[1]["peaks"]["fp16"]["sparse_tflops"] == pytest.approx(624)
    text = roofline("--profile", "h100", "--profile", "a100", "--gemm", "4096x4096x4096", "--dtype", "fp16")
    assert text.exit_code == 0 and "PROFILE" in text.stdout and "a100-sxm4-80gb" in text.stdout


def test_text_output_names_the_bound_and_the_peak():
    result = roofline("--profile", "h100", "--gemm", "8192x8192x8192", "--dtype", "bf16")
    assert result.exit_code == 0, result.output
    assert "compute" in result.stdout and "bf16 989.4 TFLOP/s" in result.stdout and "ridge 295" in result.stdout


# ---------------------------------------------------------------- model phases


def test_prefill_is_compute_bound_and_train_step_adds_the_backward():
    cfg = read_model_config(LLAMA_7B)
    prefill = model_ops.from_config(cfg, model_ops.Workload("prefill", 1, 2048, "bf16"))
    train = model_ops.from_config(cfg, model_ops.Workload("train-step", 1, 2048, "bf16"))
    h100 = [load_catalog().get("h100")]
    assert estimate(prefill.ops, h100)["profiles"][0]["total"]["bound"] == "compute"
    names = {op.name for op in train.ops}
    assert {"attn.qkv_proj.dgrad", "attn.qkv_proj.wgrad", "optimizer.adamw", "loss.cross_entropy"} <= names

    def gemm_flops(ops, suffix=""):
        return sum(op.work()[0] * op.count for op in ops if isinstance(op, Gemm) and op.name.endswith(suffix))

    forward = sum(op.work()[0] * op.count for op in train.ops if isinstance(op, Gemm)
                  and not op.name.endswith(("dgrad", "wgrad")))
    assert gemm_flops(train.ops, "dgrad") == pytest.approx(forward)
    assert gemm_flops(train.ops, "wgrad") == pytest.approx(forward)
    [sdpa] = [op for op in train.ops if op.name == "attn.sdpa"]
    assert sdpa.backward


def test_decode_of_an_encoder_is_refused_and_moe_reads_only_reached_experts():
    code, message = roofline_error("--profile", "h100", "--model-dir", str(REPO / "tests" / "data" / "devset" /
                                   "configs" / "missing"), "--phase", "decode")
    assert code == 2 and "config.json" in message
    bert = parse_model_config({"model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6,
                               "num_attention_heads": 12, "vocab_size": 30522, "intermediate_size": 1536},
                              REPO / "config.json")
    with pytest.raises(Exception, match="encoder"):
        model_ops.from_config(bert, model_ops.Workload("decode", 1, 128, "fp32"))
    moe = read_model_config(QWEN3_30B_A3B)
    built = model_ops.from_config(moe, model_ops.Workload("decode", 1, 1024, "bf16"))
    [experts] = [op for op in built.ops if op.name == "moe.experts.gate_up_proj"]
    assert experts.batch == moe.moe.experts_per_token  # one token reaches top-k experts
    assert built.summary["parameters"] == pytest.approx(30.5e9, rel=0.02)  # Qwen3-30B-A3B


def test_mla_attention_is_priced():
    cfg = parse_model_config({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 4,
                              "num_attention_heads": 128, "vocab_size": 129280, "intermediate_size": 18432,
                              "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
                              "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
                              "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                              "v_head_dim": 128}, REPO / "config.json")
    built = model_ops.from_config(cfg, model_ops.Workload("prefill", 1, 512, "bf16"))
    names = [op.name for op in built.ops]
    assert "attn.kv_b_proj" in names and "moe.experts.down_proj" in names and "mlp.down_proj" in names
    report = estimate(built.ops, [load_catalog().get("h200")])
    assert report["profiles"][0]["total"]["seconds"]["expected"] > 0


# ---------------------------------------------------------------- launch, sparsity, fallbacks


def test_launch_modes_price_the_host():
    board, eff = Board.of(load_catalog().get("h100")), load()
    tiny = MemoryOp(name="add", bytes=3 * 4096, kind="add")
    graph, eager = (estimate_op(tiny, board, eff, mode) for mode in ("graph", "eager"))
    assert graph["host_seconds"]["expected"] == pytest.approx(0.92e-6)
    assert eager["host_seconds"]["expected"] == pytest.approx(10.4e-6)
    assert eager["bound"] == "launch" and eager["seconds"]["expected"] == pytest.approx(10.4e-6)
    report = roofline_json("--profile", "h100", "--gemm", "256x256x256", "--launch", "eager")
    assert only_op(report)["bound"] == "launch" and report["launch"] == "eager"


def test_sparse_gemm_uses_the_doubled_peak_where_the_board_has_one(tmp_path):
    ops = tmp_path / "ops.json"
    ops.write_text('[{"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "sparse": true}]')
    op = only_op(roofline_json("--profile", "h100", "--ops", str(ops)))
    assert op["peak_tflops"] == pytest.approx(2 * 989.4)
    assert op["efficiency"]["compute"]["assumed"]
    code, message = roofline_error("--profile", "v100", "--ops", str(ops))
    assert code == 2 and "no published bf16 rate" in message


def test_a_board_without_the_dtype_is_named():
    code, message = roofline_error("--profile", "t4", "--gemm", "1024x1024x1024", "--dtype", "bf16")
    assert code == 2 and "tesla-t4" in message and "bf16" in message and "fp16" in message


def test_factors_an_architecture_lacks_are_borrowed_and_marked_assumed():
    eff = load()
    own = eff.factor("turing", "memory.copy")
    assert not own.assumed and own.architecture == "turing" and "T4" in own.source
    borrowed = eff.factor("turing", "memory.gelu")
    assert borrowed.assumed and borrowed.architecture == "hopper" and "assumed" in borrowed.source
    # a bandwidth share moves with the borrower's copy share: T4's 0.75 against the H200's 0.891
    assert borrowed.expected == pytest.approx(0.651 * 0.75 / 0.891)
    assert eff.factor("pascal", "gemm.compute.fp32").architecture == "hopper"
    assert not eff.factor("hopper", "gemm.compute.bf16").assumed


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args,says", [
    ([], "exactly one of"),
    (["--gemm", "8x8x8", "--flops", "1"], "--flops/--bytes and --gemm"),
    (["--flops", "1T", "--dtype", "bf16"], "go together"),
    (["--gemm", "8x8"], "not a shape"),
    (["--flops", "lots", "--bytes", "1", "--dtype", "bf16"], "not an amount"),
    (["--gemm", "8x8x8", "--dtype", "bf61"], "did you mean 'bf16'"),
    (["--gemm", "8x8x8", "--phase", "prefill"], "only apply to --model-dir"),
    (["--gemm", "8x8x8", "--launch", "fast"], "expected one of: graph, eager"),
    (["--model-dir", str(LLAMA_7B), "--phase", "generate"], "prefill, decode, train-step"),
    (["--model-dir", str(LLAMA_7B), "--attention", "flsh"], "flash, cudnn, efficient"),
])
def test_usage_errors(args, says):
    code, message = roofline_error("--profile", "h100", *args)
    assert code == 2 and says in message, message


def test_an_empty_model_dir_is_refused_not_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(LLAMA_7B.read_text())
    monkeypatch.chdir(tmp_path)
    code, message = roofline_error("--profile", "h100", "--model-dir", "")
    assert code == 2 and "--model-dir '' names no path; give a model folder or its config.json" in message, message


def test_unknown_or_missing_profile():
    code, message = roofline_error("--profile", "h10O", "--gemm", "8x8x8")
    assert code == 2 and "h100" in message
    code, message = roofline_error("--gemm", "8x8x8")
    assert code == 2 and "--profile" in message
