"""Input nested deeper than Python's JSON, YAML and TOML readers recurse: every reader of a user's file says so as a
usage error naming the file, never a RecursionError traceback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.user_files import load_yaml, loads_json

DEPTH = 100_000
DEEP_JSON = "[" * DEPTH + "]" * DEPTH
DEEP_YAML = "a: " + "[" * 5000 + "]" * 5000 + "\n"
TINY_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 64}


def test_the_helpers_raise_their_readers_own_errors() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        loads_json(DEEP_JSON)
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        loads_json(DEEP_JSON.encode())
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        load_yaml(DEEP_YAML)
    assert loads_json('{"a": [1]}') == {"a": [1]} and load_yaml("a: [1]") == {"a": [1]}


def _model(folder: Path, config: str | None = None, header: str | None = None) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(config or json.dumps(TINY_CONFIG))
    raw = (header or json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 8)
    return folder


CASES = {
    "workspace-profiles file (JSON)": lambda d: ["workspace-profiles", "list", "--file", _write(d, "w.json")],
    "workspace-profiles file (YAML)": lambda d: ["workspace-profiles", "list", "--file", _write(d, "w.yaml")],
    "op list": lambda d: ["estimate-roofline", "-p", "h100", "--ops", _write(d, "ops.json")],
    "fabric file": lambda d: ["simulate-topology", "-f", _write(d, "fabric.yaml")],
    "validate manifest (JSON)": lambda d: ["validate", _write(d, "m.json")],
    "validate manifest (TOML)": lambda d: ["validate", _write(d, "m.toml")],
    "model config.json": lambda d: ["estimate-llm", "--model-dir", str(_model(d / "m", config=DEEP_JSON))],
    "safetensors header": lambda d: ["estimate-llm", "--model-dir", str(_model(d / "m", header=DEEP_JSON))],
    "training --config (JSON)": lambda d: ["plan-training", "--model-dir", str(_model(d / "m")),
                                           "--config", _write(d, "ds.json")],
    "training --config (YAML)": lambda d: ["plan-training", "--model-dir", str(_model(d / "m")),
                                           "--config", _write(d, "recipe.yaml")],
    "calibrate observation": lambda d: ["calibrate", "compare", _write(d, "p.json"), _write(d, "o.json")],
    "capabilities report": lambda d: ["capabilities", "--from-report", _write(d, "r.json")],
    "trace event": lambda d: ["replay-trace", _write(d, "t.json", '{"traceEvents": [{"args": ' + DEEP_JSON + "}]}")],
    "fault plan": lambda d: ["run", "--mode", "fakecuda", "--faults", _write(d, "plan.yaml"), "--", "true"],
    "telemetry recording": lambda d: ["run", "--mode", "fakecuda", "--telemetry-replay", _write(d, "t.json"),
                                      "--", "true"],
}


def _write(folder: Path, name: str, text: str | None = None) -> str:
    path = folder / name
    if text is None:
        text = {"yaml": DEEP_YAML, "toml": "a = " + "[" * 5000 + "]" * 5000 + "\n"}.get(name.rsplit(".", 1)[1],
                                                                                         DEEP_JSON)
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("case", list(CASES))
def test_a_deeply_nested_file_is_a_usage_error(case: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, CASES[case](tmp_path))
    assert isinstance(result.exception, SystemExit), result.exception  # not a RecursionError
    assert result.exit_code == 2, result.output
    assert "nested too deeply" in result.stderr


def test_a_deeply_nested_notebook_is_skipped_by_the_repository_scan(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    (tmp_path / "deep.ipynb").write_text(DEEP_JSON)
    result = CliRunner().invoke(app, ["analyze-repo", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "unreadable: 1: deep.ipynb" in result.stdout
