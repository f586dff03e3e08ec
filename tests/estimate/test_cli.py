"""The three commands through typer's CliRunner: JSON against the shipped schemas, errors without tracebacks."""

from __future__ import annotations

import json
import struct

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.reports import validate

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def data_of(result) -> dict:
    doc = json.loads(result.stdout)
    assert doc["schema"] == "fakegpu.cli/v1"
    validate(doc)  # the envelope's own schema
    return doc


def test_real_minilm_exact_parameters_and_bytes(minilm_dir):
    result = invoke("estimate-llm", "--model-dir", str(minilm_dir), "--json")
    assert result.exit_code == 0, result.output
    report = data_of(result)["data"]
    validate(report)
    model = report["model"]
    assert model["parameter_count"] == 22_713_216  # all-MiniLM-L6-v2, as transformers' num_parameters() says
    assert model["parameter_bytes"] == 22_713_216 * 4
    assert model["weight_bytes"] == 90_856_960  # + the int64 position_ids buffer; the file's full payload
    assert model["weight_bytes"] == (minilm_dir / "model.safetensors").stat().st_size - 8 - struct.unpack(
        "<Q", (minilm_dir / "model.safetensors").read_bytes()[:8])[0]
    assert not model["is_decoder"]
    assert any("activation" in n and "decoder" in n for n in report["notes"])


def test_estimate_llm_text_and_json(models):
    text = invoke("estimate-llm", "--model-dir", str(models["qwen3-8b"]), "--target-profile", "a100")
    assert text.exit_code == 0, text.output
    assert "prefill" in text.stdout and "decode" in text.stdout and "largest batch" in text.stdout
    as_json = invoke("estimate-llm", "--model-dir", str(models["tiny-sharded"]), "--json", "--batch-size", "4",
                     "--attention", "eager", "--target-profile", "a100", "--kv-cache-dtype", "fp8")
    assert as_json.exit_code == 0, as_json.output
    validate(data_of(as_json)["data"])


def test_check_flag_exit_code_when_it_does_not_fit(models):
    result = invoke("estimate-llm", "--model-dir", str(models["qwen3-8b"]), "--batch-size", "512",
                    "--prompt-tokens", "32768", "--target-profile", "a100", "--check", "--json")
    assert result.exit_code == 3
    assert data_of(result)["data"]["target"]["verdict"] == "does-not-fit"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing-config", "config.json"),
        ("unknown-arch", "model_type"),
        ("corrupt-header", "header is not JSON"),
        ("lying-length", "header length"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path, models, setup, expected):
    import shutil

    model = tmp_path / "m"
    shutil.copytree(models["tiny"], model)
    st = model / "model.safetensors"
    if setup == "missing-config":
        (model / "config.json").unlink()
    elif setup == "unknown-arch":
        (model / "config.json").write_text(json.dumps({"model_type": "rwkv99"}))
    elif setup == "corrupt-header":
        st.write_bytes(struct.pack("<Q", 5) + b"{oops" + bytes(10))
    else:
        st.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    for extra in ((), ("--json",)):
        result = invoke("estimate-llm", "--model-dir", str(model), *extra)
        assert result.exit_code == 2
        assert "Traceback" not in result.output
        assert expected in result.output
    assert data_of(invoke("estimate-llm", "--model-dir", str(model), "--json"))["errors"][0]["code"] == "estimate-input"


def test_unknown_profile_is_reported(models):
    result = invoke("estimate-llm", "--model-dir", str(models["tiny"]), "--target-profile", "a1000")
    assert result.exit_code == 2 and "unknown GPU profile" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["estimate-llm", "plan-training"])
def test_an_empty_target_profile_is_refused_not_ignored(models, command):
    # `--target-profile "$GPU" --check` with GPU unset must not pass the check by checking nothing.
    result = invoke(command, "--model-dir", str(models["tiny"]), "--target-profile", "", "--check")
    assert result.exit_code == 2 and "unknown GPU profile ''" in result.output


@pytest.mark.parametrize("args", [["estimate-llm"], ["plan-training"], ["plan-serving", "--profile", "a100"]])
def test_an_empty_model_dir_is_refused_not_the_current_folder(models, monkeypatch, args):
    # `--model-dir "$MODEL"` with MODEL unset must not size whatever model the current folder holds
    monkeypatch.chdir(models["tiny"])
    result = invoke(*args, "--model-dir", "")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--model-dir '' names no path; give a model folder, a .safetensors file or an index json" in result.stderr


@pytest.mark.parametrize("args", [["estimate-llm"], ["plan-training", "--gpus", "3"],
                                  ["plan-training", "--gpus", "3", "--framework", "megatron"],
                                  ["plan-serving", "--profile", "a100"],
                                  ["simulate-topology", "-p", "h100", "--gpus-per-node", "3"]])
def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused(models, args):
    result = invoke(*args, "--model-dir", str(models["tiny"]), "--tensor-parallel", "3")
    assert result.exit_code == 2, result.output
    assert "--tensor-parallel: 3 does not divide the 8 attention heads; use one of 1, 2, 4, 8" in result.output


def test_plan_training_json_and_schema(models, tmp_path):
    result = invoke("plan-training", "--model-dir", str(models["qwen3-8b"]), "--method", "lora", "--json",
                    "--target-profile", "a100", "--micro-batch", "2", "--seq-len", "1024", "--grad-checkpointing")
    assert result.exit_code == 0, result.output
    report = data_of(result)["data"]
    validate(report)
    assert report["target"]["max_micro_batch"] >= 2
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": 4}))
    result = invoke("plan-training", "--model-dir", str(models["qwen3-8b"]), "--config", str(ds), "--gpus", "8",
                    "--micro-batch", "1", "--json")
    assert result.exit_code == 0, result.output
    opts = data_of(result)["data"]["options"]
    assert (opts["zero"], opts["micro_batch"], opts["precision"], opts["gpus"]) == (3, 1, "bf16-mixed", 8)
    text = invoke("plan-training", "--model-dir", str(models["tiny"]))
    assert text.exit_code == 0 and "optimizer_step" in text.stdout


def test_plan_training_bad_options(models):
    result = invoke("plan-training", "--model-dir", str(models["tiny"]), "--zero", "2", "--fsdp", "full")
    assert result.exit_code == 2 and "choose one" in result.output


def test_calibrate_compare(models, tmp_path):
    pred = invoke("estimate-llm", "--model-dir", str(models["qwen3-8b"]), "--prompt-tokens", "9",
                  "--generated-tokens", "2", "--json")
    pred_path = tmp_path / "pred.json"
    pred_path.write_text(pred.stdout)
    obs_path = tmp_path / "obs.json"
    obs_path.write_text(json.dumps({
        "schema": "fakegpu.observation/v1", "workload": {"batch_size": 1, "prompt_tokens": 9},
        "measurements": [{"phase": "peak", "metric": "max_memory_allocated", "bytes": 16_396_630_528},
                         {"phase": "load", "metric": "max_memory_allocated", "bytes": 16_383_586_816}]}))
    result = invoke("calibrate", "compare", str(pred_path), str(obs_path), "--json")
    assert result.exit_code == 0, result.output
    report = data_of(result)["data"]
    validate(report)
    assert report["median_abs_error"] < 0.01
    assert 0.02 <= report["recommended_safety_margin"] < 0.03
    text = invoke("calibrate", "compare", str(pred_path), str(obs_path))
    assert "recommended safety margin" in text.stdout
    obs_path.write_text(json.dumps({"schema": "fakegpu.observation/v1", "workload": {"batch_size": 7},
                                    "measurements": [{"phase": "peak", "metric": "max_memory_allocated", "bytes": 1}]}))
    bad = invoke("calibrate", "compare", str(pred_path), str(obs_path))
    assert bad.exit_code == 2 and "workload.batch_size" in bad.output


def test_calibrate_compare_refuses_a_file_that_is_not_utf8(tmp_path):
    binary = tmp_path / "pred.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    obs = tmp_path / "obs.json"
    obs.write_text("{}")
    result = invoke("calibrate", "compare", str(binary), str(obs))
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2 and "pred.json: not JSON" in result.output


def test_plan_training_lora_dropout_costs_activation_memory(models):
    def forward(dropout: str) -> int:
        result = invoke("plan-training", "--model-dir", str(models["qwen3-8b"]), "--method", "lora",
                        "--lora-dropout", dropout, "--json")
        assert result.exit_code == 0, result.stdout
        return json.loads(result.stdout)["data"]["phases"]["forward"]["max_memory_allocated"]

    assert forward("0.1") > forward("0.0")
    assert invoke("plan-training", "--model-dir", str(models["tiny"]), "--lora-dropout", "1.5").exit_code == 2


def test_plan_training_framework_options_reach_the_model(models):
    def peak(*extra: str) -> int:
        result = invoke("plan-training", "--model-dir", str(models["qwen3-8b"]), "--method", "qlora", "--json", *extra)
        assert result.exit_code == 0, result.stdout
        return json.loads(result.stdout)["data"]["peak"]["max_memory_allocated"]

    assert peak("--bitsandbytes", "0.42.0") > peak("--bitsandbytes", "0.45")
    assert peak("--no-double-quant") > peak("--double-quant")
    assert invoke("plan-training", "--model-dir", str(models["tiny"]), "--framework", "keras").exit_code == 2
