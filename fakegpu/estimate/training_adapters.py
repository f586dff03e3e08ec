"""Per adapted module: what a LoRA / DoRA / IA3 / prompt-tuning adapter keeps for backward, from the module's shapes.

The base linear is frozen, so it saves nothing of its own; the adapter does (PEFT's tuners/lora/layer.py Linear.forward
and tuners/lora/dora.py DoraLinearLayer.forward, tuners/ia3/layer.py, tuners/prompt_tuning; torchtune's LoRALinear
and DoRALinear follow the same algebra):
- lora_A keeps its input for its weight gradient: the module's input, or with lora_dropout > 0 the dropped copy
  (plus the bool mask nn.Dropout keeps). Without dropout modules that share an input (q/k/v; gate/up) share one
  tensor; o_proj's input is the attention output flash already saved. down_proj's is the wide intermediate
  act(gate) * up, which a frozen MLP does not keep otherwise.
- lora_B keeps x @ A (rank r wide) per module.
- DoRA adds the magnitude vector (out_features trainable) and per forward recomputes the weight norm: lora_weight =
  B(A(eye(in))) (an in x in identity and an out x in product), weight + scaling * lora_weight (another out x in) and
  the base weight dequantized for QLoRA; all detached, so transient. It saves base_result and lora_result (each
  out_features wide) for the magnitude's and B's gradients.
- IA3 scales k/v outputs (saving each module's output) and down_proj's input (saving that input).
- Prompt tuning prepends virtual tokens: every activation and the logits see seq_len + virtual tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.errors import shorten
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.safetensors_header import Checkpoint
from fakegpu.profiles.matching import did_you_mean

# Short names accepted by --lora-targets (torchtune's lora_attn_modules say output_proj for o_proj).
TARGET_ALIASES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "output_proj": "o_proj",
                  "gate": "gate_proj", "up": "up_proj", "down": "down_proj", "w1": "gate_proj", "w3": "up_proj",
                  "w2": "down_proj"}
ATTENTION_INPUT = ("q_proj", "k_proj", "v_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv")
MLP_INPUT = ("gate_proj", "up_proj", "gate_up_proj", "fc1", "c_fc", "w1", "w3", "dense_h_to_4h")
MLP_DOWN = ("down_proj", "fc2", "c_proj", "w2", "dense_4h_to_h")
# PEFT's TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING / ..._FEEDFORWARD_MODULES_MAPPING for llama-like models.
IA3_TARGETS = ("k_proj", "v_proj", "down_proj")
IA3_FEEDFORWARD = ("down_proj",)


@dataclass(frozen=True)
class Module:
    name: str
    in_features: int
    out_features: int


def normalise_targets(text: str) -> set[str] | None:
    """The module names a --lora-targets value means (None: all linear layers)."""
    if text.strip() == "all-linear":
        return None
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise EstimateInputError("--lora-targets", "is empty; give module names (q,k,v,o,gate,up,down) or all-linear")
    if "" in items:
        # "q,,v" is a slip (a name left out, a variable unset), not a list of two: adapting fewer modules than meant
        # would understate the memory, so it is not read as q,v
        raise EstimateInputError("--lora-targets", f"{shorten(text)}: item {items.index('') + 1} is empty; give a "
                                 "comma list of module names without empty items (q,k,v,o,gate,up,down or "
                                 "q_proj,v_proj) or all-linear")
    return {TARGET_ALIASES.get(n, n) for n in items}


def layer_modules(ckpt: Checkpoint) -> list[Module]:
    """The 2-D linears of one transformer layer (the first), as (name, in, out); MoE routers excluded."""
    out: dict[str, Module] = {}
    first = None
    for t in ckpt.tensors.values():
        if len(t.shape) != 2 or (".layers." not in t.name and ".h." not in t.name):
            continue
        if not t.name.endswith((".weight", ".qweight")):
            continue
        parts = t.name.split(".")
        marker = "layers" if "layers" in parts else "h"
        layer = parts[parts.index(marker) + 1]
        first = first if first is not None else layer
        if layer != first:
            continue
        name = parts[-2]
        out_f, in_f = t.shape
        if t.name.endswith(".qweight"):
            in_f, out_f = t.shape[0] * 8, t.shape[1]
        if name not in out and name != "gate":
            out[name] = Module(name, in_f, out_f)
    return list(out.values())


def check_targets(ckpt: Checkpoint, lora_targets: str) -> None:
    """Every named target must be a linear of the model: else the accepted names and a close match."""
    targets = normalise_targets(lora_targets)
    if targets is None:
        return
    known = sorted(m.name for m in layer_modules(ckpt))
    for t in sorted(targets):
        if t not in known:
            hint = did_you_mean(t, [*known, *TARGET_ALIASES], quote=False)
            raise EstimateInputError("--lora-targets", f"no linear layer named {t!r} in the checkpoint{hint}; "
                                     f"this model has {', '.join(known)}, or say all-linear "
                                     "(short names q,k,v,o,gate,up,down are accepted)")


def adapted(ckpt: Checkpoint, lora_targets: str) -> list[Module]:
    targets = normalise_targets(lora_targets)
    return [m for m in layer_modules(ckpt) if targets is None or m.name in targets]


def lora_saved_per_token(modules: list[Module], rank: int, a: float, dropout: bool, attention_output_saved: bool,
                         tp: int = 1) -> float:
    """Bytes per token per layer that LoRA adapters keep beyond the frozen layer. With dropout the dropped copies
    and masks are counted by the caller (training_activations, per module); here only what stays without it, and
    x @ A for every module."""
    xa = len(modules) * rank * a
    if dropout:
        return xa
    names = {m.name for m in modules}
    widths = {m.name: m.in_features for m in modules}
    shared = 0.0
    attn = [n for n in names if n in ATTENTION_INPUT]
    if attn:
        shared += widths[attn[0]] * a
    mlp = [n for n in names if n in MLP_INPUT]
    if mlp:
        shared += widths[mlp[0]] * a
    for n in names:
        if n in MLP_DOWN:
            shared += widths[n] / tp * a
    for n in names:
        if n not in ATTENTION_INPUT and n not in MLP_INPUT and n not in MLP_DOWN:
            if n in ("o_proj", "dense", "out_proj") and attention_output_saved:
                continue  # flash/SDPA already saved the attention output that is o_proj's input
            shared += widths[n] / tp * a
    return xa + shared


def dora_saved_per_token(modules: list[Module], a: float, tp: int = 1) -> float:
    """base_result and lora_result, each out_features wide, per DoRA module."""
    return sum(2 * m.out_features / tp * a for m in modules)


def dora_transient(modules: list[Module], a: float, qlora: bool, tp: int = 1) -> float:
    """The weight-norm recomputation's temporaries for the largest adapted module (one module runs at a time)."""
    worst = 0.0
    for m in modules:
        weight = m.out_features * m.in_features / tp
        eye = m.in_features * m.in_features
        worst = max(worst, (eye + 2 * weight + (weight if qlora else 0)) * a)
    return worst


def dora_parameters(modules: list[Module], layers: int) -> int:
    return sum(m.out_features for m in modules) * layers


def ia3_modules(ckpt: Checkpoint, lora_targets: str) -> list[Module]:
    """IA3's targets: the named ones, else PEFT's defaults for llama-like models (k, v, down)."""
    mods = layer_modules(ckpt)
    targets = normalise_targets(lora_targets)
    wanted = set(IA3_TARGETS) if targets is None else targets
    return [m for m in mods if m.name in wanted]


def ia3_saved_per_token(modules: list[Module], a: float, tp: int = 1) -> float:
    """Non-feedforward modules scale (and save) their output; feedforward ones scale (and save) their input."""
    return sum((m.in_features if m.name in IA3_FEEDFORWARD else m.out_features) / tp * a for m in modules)


def ia3_parameters(modules: list[Module], layers: int) -> int:
    return sum(m.in_features if m.name in IA3_FEEDFORWARD else m.out_features for m in modules) * layers
