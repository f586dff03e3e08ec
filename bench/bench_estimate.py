"""Speed and memory of estimate-llm on a synthetic Llama-3.1-405B-shaped sharded checkpoint (headers only).

Prints wall time and peak RSS of the full CLI run, side by side with a bare `python -c pass` measured in the
same run, and the ratio between them. Acceptance (issue 8): <= 1 s and <= 200 MB RSS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fakegpu.estimate.model_config import parse_model_config
from fakegpu.estimate.synthetic import synthesize

LLAMA_405B = {
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
    "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
RUNS = 5


def measure(argv: list[str]) -> tuple[float, float]:
    """Best-of-RUNS wall seconds and the peak RSS in MB of a child process."""
    best_t, best_rss = float("inf"), float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{argv} failed with {status}")
        best_t, best_rss = min(best_t, elapsed), min(best_rss, usage.ru_maxrss / 1024)
    return best_t, best_rss


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fakegpu-405b-") as tmp:
        model = Path(tmp) / "llama-405b"
        synthesize(model, LLAMA_405B, parse_model_config(LLAMA_405B, model / "config.json"), "BF16", 4_300_000_000)
        shards = len(list(model.glob("*.safetensors")))
        base_t, base_rss = measure([sys.executable, "-c", "pass"])
        cli = [sys.executable, "-m", "fakegpu", "estimate-llm", "--model-dir", str(model), "--json",
               "--target-profile", "a100", "--tensor-parallel", "8"]
        est_t, est_rss = measure(cli)
        from fakegpu.estimate.inference import InferenceOptions
        from fakegpu.estimate.llm import estimate_llm

        start = time.perf_counter()
        estimate_llm(model, InferenceOptions(tensor_parallel=8), target="a100")
        lib_t = time.perf_counter() - start
    print(f"checkpoint: 405,853,388,800 parameters in {shards} header-only shards")
    print(f"{'':28s}{'wall s':>10s}{'peak RSS MB':>14s}")
    print(f"{'python -c pass (baseline)':28s}{base_t:10.3f}{base_rss:14.1f}")
    print(f"{'fakegpu estimate-llm (CLI)':28s}{est_t:10.3f}{est_rss:14.1f}")
    print(f"{'ratio CLI / baseline':28s}{est_t / base_t:10.2f}x{est_rss / base_rss:13.2f}x")
    print(f"library call alone: {lib_t:.3f} s")
    ok = est_t <= 1.0 and est_rss <= 200
    print(f"acceptance (<= 1 s, <= 200 MB): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
