"""The dev-set acceptance bar, and header-only speed on a 405B-shaped sharded checkpoint."""

from __future__ import annotations

import json
import time

from fakegpu.estimate.devset import of_kind, run_devset, score
from fakegpu.estimate.inference import InferenceOptions
from fakegpu.estimate.llm import estimate_llm
from fakegpu.estimate.synthetic import sparse_ok
from tests.estimate.conftest import DEVSET, make_model


def test_devset_rows_are_complete():
    rows = json.loads((DEVSET / "devset.json").read_text())["rows"]
    assert len(rows) >= 5
    for row in rows:
        assert row["metric"] in ("memory_allocated", "max_memory_allocated", "max_memory_reserved", "nvidia-smi",
                                 "kv_cache_bytes", "gpu_blocks")
        assert row["source"] and row["gpu"] and row["software"] and (DEVSET / row["config"]).is_file()


def test_devset_acceptance():
    """Issue 8's bar, on the inference rows and on the whole dev set (training rows included)."""
    results = run_devset(DEVSET / "devset.json")
    for s in (score(of_kind(results, "inference")), score(results)):
        assert s["median_abs_error"] <= 0.05, s
        assert s["worst_underestimate"] >= -0.10, s


def test_405b_sharded_index_in_under_a_second(tmp_path):
    config = {
        "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
        "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
    }
    model = make_model(tmp_path, "405b", config, shard_bytes=4_300_000_000)
    assert sparse_ok(next(model.glob("*.safetensors")))
    start = time.perf_counter()
    r = estimate_llm(model / "model.safetensors.index.json", InferenceOptions(tensor_parallel=8), target="a100")
    assert time.perf_counter() - start < 1.0
    assert r["model"]["parameter_count"] == 405_853_388_800
    assert r["model"]["files"] > 100
