"""What vLLM's start-up profile run costs besides the weights: the activation peak, non-torch memory, CUDA graphs.

vLLM measures these on the GPU; here they are modelled from the code paths it runs:

- the profile run is one forward over max_num_batched_tokens tokens split into min(max_num_seqs, tokens)
  requests, then (V1) the sampler over one logits row per request with top-k/top-p on. The peak is the larger of
  the two, since the forward's activations are gone when the sampler runs;
- inside the forward the peak sits in a decoder layer: the residual stream, its normalised copy and the layer
  output, plus the gate/up projection and its activated half (fused-MoE: the per-expert caches instead);
- the sampler (V1) holds the logits, their fp32 copy, the sorted fp32 values with int64 indices and their softmax;
  V0 (before 0.8) profiled the logits only;
- CUDA graphs: one graph per capture size; vLLM 0.21+ profiles their memory into the budget, older versions
  capture them after the KV cache is allocated, so they use memory beyond gpu_memory_utilization.
"""

from __future__ import annotations

from math import ceil

from fakegpu.estimate.model_config import ModelConfig
from fakegpu.estimate.serving_weights import VOCAB_PADDING

GIB = 1 << 30
# non_torch_memory vLLM reports at start-up (NCCL, custom all-reduce and cuBLAS handles outside torch's
# allocator, measured from its init snapshot): published lines span 0.03-0.35 GiB (0.16 on an H100 at TP=1,
# 0.20-0.25 at TP=2/4 on 24 GB cards, 0.35 on an RTX 3090); the middle of that range is assumed.
NON_TORCH_BYTES = GIB // 4
# Memory one captured CUDA graph adds (its pool's private blocks and the graph object): vLLM 0.21 logged
# "Estimated CUDA graph memory: 0.52 GiB total" for 51 piecewise + 35 full graphs of an 8B model.
BYTES_PER_GRAPH = 6 * (1 << 20)
SAMPLER_BYTES_PER_LOGIT = 20  # fp32 copy (4) + sorted fp32 values (4) + int64 sort indices (8) + softmax (4)
ID_BYTES_PER_TOKEN = 16  # input ids and positions, int64 each


def forward_peak(cfg: ModelConfig, tokens: int, a: float, tp: int) -> int:
    """Bytes alive at the peak of one decoder layer's forward over `tokens` tokens on one rank."""
    h = cfg.hidden_size
    stream = 3 * tokens * h * a
    q_dim = cfg.head_dim
    if cfg.mla is not None:
        q_dim = cfg.mla.qk_nope_head_dim + cfg.mla.qk_rope_head_dim
    heads = max(1, cfg.num_heads // tp)
    kv_heads = max(1, cfg.num_kv_heads // tp)
    attention = tokens * (heads * q_dim + 2 * kv_heads * cfg.head_dim + heads * cfg.head_dim) * a
    copies = 3 if cfg.gated_mlp else 2
    mlp = copies * tokens * cfg.intermediate_size / tp * a
    if cfg.moe is not None:
        m = cfg.moe
        # fused_moe keeps the gate/up output, its activation and the per-expert outputs for every routed token.
        routed = tokens * m.experts_per_token * (3 * m.expert_intermediate / tp + h) * a
        shared = 3 * tokens * m.shared_intermediate / tp * a
        router = tokens * m.num_experts * 4
        dense = mlp if m.dense_layers else 0
        mlp = max(routed + shared + router, dense)
    return int(stream + max(attention, mlp))


def sampler_peak(cfg: ModelConfig, requests: int, a: float, engine: str) -> int:
    vocab = ceil(cfg.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    hidden = requests * cfg.hidden_size * a
    if engine == "v0":
        return int(requests * vocab * a + hidden)
    return int(requests * vocab * (a + SAMPLER_BYTES_PER_LOGIT) + hidden)


def activation_peak(cfg: ModelConfig, tokens: int, seqs: int, a: float, tp: int, engine: str) -> dict[str, int]:
    requests = min(seqs, tokens)
    fwd = forward_peak(cfg, tokens, a, tp)
    smp = sampler_peak(cfg, requests, a, engine)
    return {"forward_bytes": fwd, "sampler_bytes": smp, "profile_requests": requests,
            "peak_bytes": max(fwd, smp) + tokens * ID_BYTES_PER_TOKEN}


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, version: tuple[int, int]) -> dict[str, list[int]]:
    """vLLM V1's default cudagraph_capture_sizes: piecewise graphs up to min(2 x max_num_seqs, 512) (512 before
    0.10), full decode graphs (0.11+) up to max_num_seqs; never beyond max_num_batched_tokens."""
    largest = min(2 * max_num_seqs, 512) if version >= (0, 10) else 512
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    piecewise = [s for s in sizes if s <= min(largest, max_num_batched_tokens)]
    full = [s for s in piecewise if s <= max_num_seqs] if version >= (0, 11) else []
    return {"piecewise": piecewise, "full": full}


def cuda_graph_bytes(sizes: dict[str, list[int]]) -> int:
    return (len(sizes["piecewise"]) + len(sizes["full"])) * BYTES_PER_GRAPH
