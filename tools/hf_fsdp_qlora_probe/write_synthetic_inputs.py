"""Write Llama-2-70B-shaped checkpoints with few layers, a word-level tokenizer and a packed text data set.

Usage: python write_synthetic_inputs.py WORK_DIR [N ...]   (default N: 2 4)

Weights are zeros: accounting mode keeps no tensor values, so only shapes and dtypes matter.
Layers live once under WORK_DIR/shards and each WORK_DIR/llama70b-L<N> links to them, so L2 and L4 share
the first two layers' 3.4 GB.
Needs the probe venv (torch, safetensors, tokenizers, transformers, datasets). Reruns skip what exists.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import torch
from datasets import Dataset, DatasetDict, disable_progress_bar
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, VOCAB = 8192, 28672, 64, 8, 32000
HEAD_DIM = HIDDEN // HEADS

LLAMA2_70B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": INTERMEDIATE,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": HEADS,
    "num_hidden_layers": None,
    "num_key_value_heads": KV_HEADS,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.39.3",
    "use_cache": True,
    "vocab_size": VOCAB,
    "attention_bias": False,
    "rope_theta": 10000.0,
}


def zeros(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


def ones(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bfloat16)


def write_shard(shards: Path, name: str, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, str], int]:
    path = shards / name
    if not path.exists():
        # Write under a temporary name so an interrupted run never leaves a truncated shard that looks done.
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        tmp.rename(path)
    return {key: name for key in tensors}, sum(t.numel() * t.element_size() for t in tensors.values())


def layer_tensors(i: int) -> dict[str, torch.Tensor]:
    p = f"model.layers.{i}."
    return {
        p + "self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.k_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.v_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.o_proj.weight": zeros(HIDDEN, HEADS * HEAD_DIM),
        p + "mlp.gate_proj.weight": zeros(INTERMEDIATE, HIDDEN),
        p + "mlp.up_proj.weight": zeros(INTERMEDIATE, HIDDEN),
        p + "mlp.down_proj.weight": zeros(HIDDEN, INTERMEDIATE),
        p + "input_layernorm.weight": ones(HIDDEN),
        p + "post_attention_layernorm.weight": ones(HIDDEN),
    }


def write_checkpoints(work: Path, layer_counts: list[int]) -> list[Path]:
    shards = work / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    weight_map, total = write_shard(
        shards, "model-embed.safetensors", {"model.embed_tokens.weight": zeros(VOCAB, HIDDEN)}
    )
    head_map, head_bytes = write_shard(
        shards, "model-head.safetensors", {"lm_head.weight": zeros(VOCAB, HIDDEN), "model.norm.weight": ones(HIDDEN)}
    )
    weight_map.update(head_map)
    total += head_bytes
    layers = [
        write_shard(shards, f"model-layer-{i:02d}.safetensors", layer_tensors(i)) for i in range(max(layer_counts))
    ]

    dirs = []
    for n in layer_counts:
        model_dir = work / f"llama70b-L{n}"
        model_dir.mkdir(parents=True, exist_ok=True)
        config = dict(LLAMA2_70B_CONFIG, num_hidden_layers=n)
        (model_dir / "config.json").write_text(json.dumps(config, indent=2))
        generation = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "transformers_version": "4.39.3"}
        (model_dir / "generation_config.json").write_text(json.dumps(generation))
        model_map, model_bytes = dict(weight_map), total
        for layer_map, layer_bytes in layers[:n]:
            model_map.update(layer_map)
            model_bytes += layer_bytes
        index = {"metadata": {"total_size": model_bytes}, "weight_map": model_map}
        (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        for name in set(model_map.values()):
            link = model_dir / name
            if not os.path.lexists(link):
                link.symlink_to(shards / name)
        print(f"checkpoint {model_dir}: {n} layers, {model_bytes / 2**30:.2f} GiB bf16", flush=True)
        dirs.append(model_dir)
    return dirs


def build_tokenizer() -> PreTrainedTokenizerFast:
    # One token per word "w<id>", so every document tokenises to exactly its word count and packing is fixed.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{j}": j for j in range(3, VOCAB)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=4096
    )
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def write_dataset(data_dir: Path) -> None:
    rng = random.Random(0)

    def docs(count: int, words: int) -> list[str]:
        return [" ".join(f"w{rng.randrange(3, VOCAB)}" for _ in range(words)) for _ in range(count)]

    # 40 x 840 = 33,600 tokens pack into 16 sequences of 2048: 8 per rank, i.e. 2 optimizer steps of 2 micro-steps
    # at micro-batch 2. 10 x 900 = 9,000 eval tokens pack into 4 sequences (2 per rank).
    splits = DatasetDict(
        train=Dataset.from_dict({"content": docs(40, 840)}), test=Dataset.from_dict({"content": docs(10, 900)})
    )
    disable_progress_bar()  # its bars would clutter run.sh's output
    splits.save_to_disk(str(data_dir))


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    work = Path(argv[0]).resolve()
    layer_counts = [int(n) for n in argv[1:]] or [2, 4]
    model_dirs = write_checkpoints(work, layer_counts)
    tokenizer = build_tokenizer()
    for model_dir in model_dirs:
        tokenizer.save_pretrained(str(model_dir))
    data_dir = work / "data"
    if not (data_dir / "dataset_dict.json").exists():
        write_dataset(data_dir)
    print(f"tokenizer ({len(tokenizer)} tokens) and data set {data_dir} written", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
