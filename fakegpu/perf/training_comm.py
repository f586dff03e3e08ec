"""A training step's communication on a fabric, from plan-training's inputs: the model (its config.json, read by
the estimators' model reader) and its parallelism (tensor, pipeline, data; DDP buckets, ZeRO, FSDP).

Ranks are laid out as Megatron-LM does, tensor-parallel innermost: rank = tp + TP * (dp + DP * pp), so a
tensor-parallel group is TP neighbouring GPUs of one node and a data-parallel group strides across nodes on one
rail. Each collective of the step is priced on the fabric with every group that runs it at the same moment (all
TP groups at once, all DP groups at once), so groups that meet on a link share it.

    tensor parallel    all-reduce of a micro-batch's activations, 2 in the forward and 2 in the backward of
                       every layer (Megatron-LM without sequence parallelism)
    pipeline parallel  send/recv of a micro-batch's activations between neighbouring stages, forward and back
    data parallel      DDP: the gradients all-reduced once per step in buckets (25 MiB by default, as DDP's
                       bucket_cap_mb); ZeRO-1/2: gradients reduce-scattered in buckets and parameters all-gathered
                       once; ZeRO-3 and FSDP full shard: each layer's parameters all-gathered in the forward and
                       again in the backward and its gradients reduce-scattered, every micro-batch; FSDP
                       grad-op (SHARD_GRAD_OP): one all-gather per layer per micro-batch; FSDP hybrid: full shard
                       inside a node, gradients all-reduced across nodes once per step
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fakegpu.errors import UsageError
from fakegpu.perf import collectives
from fakegpu.perf.topology import Fabric

FSDP = ("none", "full", "hybrid", "grad-op")
PRECISIONS = ("bf16-mixed", "fp16-mixed", "bf16", "fp32")


@dataclass(frozen=True)
class Parallelism:
    tensor: int = 1
    pipeline: int = 1
    zero: int = 0
    fsdp: str = "none"
    micro_batch: int = 1
    seq_len: int = 2048
    micro_batches: int = 1  # per optimizer step (gradient accumulation, or a pipeline's micro-batches)
    precision: str = "bf16-mixed"
    bucket_mb: float = 25.0

    def check(self) -> None:
        from fakegpu.profiles.documents import not_one_of

        if self.fsdp not in FSDP:
            raise UsageError(f"--fsdp: {not_one_of(self.fsdp, FSDP)}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"--precision: {not_one_of(self.precision, PRECISIONS)}")
        if self.zero not in (0, 1, 2, 3):
            raise UsageError(f"--zero: ZeRO stage {self.zero} does not exist; use 0, 1, 2 or 3")
        if self.zero and self.fsdp != "none":
            raise UsageError("--zero and --fsdp both shard the model; choose one")
        for name in ("tensor", "pipeline", "micro_batch", "seq_len", "micro_batches"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if not self.bucket_mb > 0:
            raise UsageError("--bucket-mb must be above 0")


@dataclass(frozen=True)
class _Op:
    name: str
    parallelism: str
    collective: str
    groups: list[np.ndarray]
    nbytes: float
    count: int


def step_communication(fabric: Fabric, model_dir: Path | str, par: Parallelism) -> dict[str, Any]:
    """Every collective of one optimizer step, priced on `fabric`, and their total."""
    from fakegpu.estimate.model_config import read_model_config
    from fakegpu.perf.model_ops import from_model_dir

    par.check()
    n = fabric.gpu_count
    tp, pp = par.tensor, par.pipeline
    if n % (tp * pp):
        raise UsageError(f"{n} GPUs do not split into tensor parallel {tp} x pipeline parallel {pp}")
    dp = n // (tp * pp)
    per_node = {node.gpus for node in fabric.spec.nodes}
    if tp > 1 and (len(per_node) != 1 or next(iter(per_node)) % tp):
        raise UsageError(f"tensor parallel {tp} must divide every node's GPUs ({', '.join(map(str, per_node))}): "
                         "tensor-parallel groups stay inside a node")
    cfg = read_model_config(model_dir)
    cfg.check_tensor_parallel(tp)
    summary = from_model_dir(model_dir, "prefill", 1, 1).summary
    layers, hidden = cfg.num_layers, cfg.hidden_size
    if layers % pp:
        raise UsageError(f"{layers} layers do not split into {pp} pipeline stages")
    embed = cfg.vocab_size * hidden * (1 if cfg.tie_word_embeddings else 2)
    layer_params = max(0.0, (summary["parameters"] - embed) / layers)
    act_e = 4 if par.precision == "fp32" else 2
    # DDP reduces gradients in the parameters' dtype: fp32 master weights under autocast, bf16 when the model is
    grad_e = 2 if par.precision == "bf16" else 4
    local_params = summary["parameters"] / (tp * pp)
    stage_layers = layers // pp
    m = par.micro_batches
    act = par.micro_batch * par.seq_len * hidden * act_e
    rank = np.arange(n).reshape(pp, dp, tp)  # rank[p, d, t] = t + tp * (d + dp * p)
    ops: list[_Op] = []
    if tp > 1:
        groups = list(rank.reshape(-1, tp))
        ops.append(_Op("activations (2 forward + 2 backward per layer)", "tensor", "all-reduce", groups, act,
                       4 * stage_layers * m))
    if pp > 1:
        chains = [rank[:, d, t] for d in range(dp) for t in range(tp)]
        # Megatron-LM sends each tensor-parallel rank's 1/TP of the activations (scatter-gather)
        ops.append(_Op("activations between stages (forward and backward)", "pipeline", "send-recv", chains,
                       act / tp, 2 * m))
    if dp > 1:
        dp_groups = [rank[p, :, t] for p in range(pp) for t in range(tp)]
        ops.extend(_data_parallel(par, fabric, rank, dp_groups, local_params, layer_params / tp, stage_layers,
                                  grad_e, act_e))
    rows = [_price(fabric, op) for op in ops]
    notes = []
    if cfg.moe is not None:
        notes.append("MoE: experts are taken as data-parallel weights; expert parallelism's all-to-alls are not "
                     "modelled")
    total = sum(r["seconds"] for r in rows)
    by: dict[str, float] = {}
    for r in rows:
        by[r["parallelism"]] = by.get(r["parallelism"], 0.0) + r["seconds"]
    return {
        "model": {"config": summary["config"], "model_type": summary["model_type"], "parameters":
                  summary["parameters"], "num_layers": layers, "hidden_size": hidden},
        "parallelism": {**asdict(par), "data": dp, "gpus": n},
        "ops": rows,
        "seconds": total,
        "seconds_by_parallelism": by,
        "notes": [
            "each collective's time is its own on the fabric; the total adds them as if none overlapped compute "
            "or each other (DDP and FSDP hide much of theirs behind the backward and forward in practice)",
            "ranks are laid out tensor-parallel innermost (Megatron-LM's order); groups that run a collective at "
            "the same moment share links",
            *notes,
        ],
    }


def _data_parallel(par: Parallelism, fabric: Fabric, rank: np.ndarray, groups: list[np.ndarray],
                   local_params: float, layer_params: float, stage_layers: int, grad_e: int,
                   act_e: int) -> list[_Op]:
    m = par.micro_batches
    bucket = par.bucket_mb * (1 << 20)
    grads = local_params * grad_e
    if par.fsdp == "none" and par.zero in (0, 1, 2):
        buckets = max(1, math.ceil(grads / bucket))
        if par.zero == 0:
            return [_Op(f"gradients in {buckets} bucket(s)", "data", "all-reduce", groups, grads / buckets,
                        buckets)]
        return [_Op(f"gradients in {buckets} bucket(s)", "data", "reduce-scatter", groups, grads / buckets, buckets),
                _Op("updated parameters", "data", "all-gather", groups, local_params * act_e, 1)]
    layer = layer_params * act_e  # FSDP gathers and reduces in the mixed-precision dtype
    if par.fsdp == "full" or par.zero == 3:
        return [_Op("layer parameters (forward and backward)", "data", "all-gather", groups, layer,
                    2 * stage_layers * m),
                _Op("layer gradients", "data", "reduce-scatter", groups, layer, stage_layers * m)]
    if par.fsdp == "grad-op":
        return [_Op("layer parameters (kept for the backward)", "data", "all-gather", groups, layer,
                    stage_layers * m),
                _Op("layer gradients", "data", "reduce-scatter", groups, layer, stage_layers * m)]
    # hybrid: shard among the data-parallel ranks of one node, replicate across nodes
    dp = rank.shape[1]
    node_of = fabric.node_of
    shard = sum(1 for d in range(dp) if node_of[rank[0, d, 0]] == node_of[rank[0, 0, 0]])
    if shard < 2 or dp % shard:
        raise UsageError(f"--fsdp hybrid needs two or more data-parallel ranks per node (here {shard})")
    shard_groups = [g[i:i + shard] for g in groups for i in range(0, dp, shard)]
    replicas = [g[i::shard] for g in groups for i in range(shard)]
    out = [_Op("layer parameters (forward and backward, inside a node)", "data", "all-gather", shard_groups,
               layer, 2 * stage_layers * m),
           _Op("layer gradients (inside a node)", "data", "reduce-scatter", shard_groups, layer, stage_layers * m)]
    if dp // shard > 1:
        out.append(_Op("gradient shards across nodes", "data", "all-reduce", replicas,
                       local_params * grad_e / shard, 1))
    return out


def _price(fabric: Fabric, op: _Op) -> dict[str, Any]:
    plans = collectives.group_plans(fabric, op.groups, op.collective)
    times, picks = collectives.fastest(fabric, plans, np.array([max(1.0, op.nbytes)]))
    t = float(times[0])
    algo, proto = picks[0]
    k = len(op.groups[0])
    return {"name": op.name, "parallelism": op.parallelism, "collective": op.collective, "group_size": k,
            "groups": len(op.groups), "bytes": op.nbytes, "count": op.count, "algorithm": algo, "protocol": proto,
            "time_us": t * 1e6, "busbw_gb_s": op.nbytes / t / 1e9 * _factor(op.collective, k),
            "seconds": t * op.count}


def _factor(collective: str, k: int) -> float:
    return collectives.busbw_factor(collective, k) if collective != "send-recv" else 1.0
