"""What PyTorch's caching allocator reserves on top of what a step allocates, as measured, not assumed.

The coefficients come from data/reserved_fit.json, which tools/reserved_fit/run.py (`make reserved-fit`) writes
from training and inference steps run in native mode: PyTorch's own caching allocator on FakeGPU's simulated
device memory, so the segments, rounding and caching it reports are the real allocator's. The model, per kind of
step and per allocator configuration:

    reserved = resident + max(transient, a * transient + c * optimizer_states + b) + v * logits

`resident` is what stays allocated across steps (weights; in training also the optimizer states), `transient` the
step's peak allocation above it. `a` is how much more than its own peak the step's blocks of varying sizes hold;
`c` is the extra that optimizer states cost when the first step allocates them in between freed activations (the
next step's activations no longer fit the split blocks); `b` is a constant such as the small-block pool's 2 MiB
segments. A step never reserves less than it allocates, hence the max. `v` is nonzero only for training whose
batches vary in length: every step's loss buffers (the full-vocabulary logits, their fp32 upcast and log-softmax:
`logits`, as training_recipes.logits_bytes counts them) have another size, and segments cut for earlier steps'
sizes stay reserved; on the fit's runs that extra is proportional to those buffers (the other tensors of a step
are smaller and reuse split blocks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fakegpu.estimate.errors import EstimateInputError

SCHEMA = "fakegpu.reserved-fit/v1"
DEFAULT_FIT_PATH = Path(__file__).resolve().parent / "data" / "reserved_fit.json"
# Kinds of step with their own coefficients. Checkpointed and plain training steps share one set: what checkpointing
# adds (a recomputed layer's blocks cached beside the logits') is plan-training's own term (training.py, cached_only),
# so separate coefficients fitted on measured totals would count it twice; the fit file still scores the
# checkpointed runs apart. Training whose batches vary in length (padded per batch, no packing) has its own set:
# the fixed-length step's a and c plus v (on Llama-2-7B's LoRA step, 0.7 GiB more than at a fixed length).
KINDS = ("training", "training_varying", "inference")
DEFAULT_ALLOC = "default"  # PYTORCH_CUDA_ALLOC_CONF unset (expandable_segments off)
TERMS = ("a", "c", "b")
OPTIONAL_TERMS = ("v",)  # absent in fit files written before it: 0


@dataclass(frozen=True)
class Terms:
    """reserved-over-allocated terms of one kind of step (see the module docstring)."""

    a: float
    c: float
    b: float
    v: float = 0.0

    def held(self, transient: float, optimizer_states: float = 0, logits: float = 0) -> float:
        """Bytes the allocator reserves for a step whose peak is `transient` above the resident tensors, `logits`
        the bytes of its loss buffers (used by `v`)."""
        if transient <= 0:
            return 0.0
        return max(float(transient), self.a * transient + self.c * optimizer_states + self.b) + self.v * logits


@dataclass(frozen=True)
class ReservedFit:
    path: Path
    torch: str
    terms: dict[str, dict[str, Terms]]  # allocator configuration -> kind -> terms

    def for_kind(self, kind: str, alloc: str = DEFAULT_ALLOC) -> Terms:
        return self.terms[alloc][kind]

    def summary(self, alloc: str = DEFAULT_ALLOC) -> dict:
        """What a report says it assumed: the file, the torch it was measured with, and the coefficients."""
        return {"source": self.path.name, "torch": self.torch, "alloc_conf": alloc,
                "terms": {k: vars(t) for k, t in self.terms[alloc].items()}}


def parse_fit(doc: object, path: Path) -> ReservedFit:
    """A ReservedFit from the fit file's JSON; says which key is missing or malformed."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise EstimateInputError(path, f"not a reserved-memory fit (expected schema {SCHEMA!r}, found {found!r})",
                                 field="schema")
    confs = doc.get("alloc_confs")
    if not isinstance(confs, dict) or DEFAULT_ALLOC not in confs:
        raise EstimateInputError(path, f"needs alloc_confs.{DEFAULT_ALLOC}", field="alloc_confs")
    terms: dict[str, dict[str, Terms]] = {}
    for alloc, conf in confs.items():
        kinds = conf.get("terms") if isinstance(conf, dict) else None
        if not isinstance(kinds, dict) or set(kinds) != set(KINDS):
            raise EstimateInputError(path, f"needs terms for exactly {', '.join(KINDS)}",
                                     field=f"alloc_confs.{alloc}.terms")
        terms[alloc] = {}
        for kind, t in kinds.items():
            if not isinstance(t, dict) or not all(isinstance(t.get(k), (int, float)) for k in TERMS):
                raise EstimateInputError(path, f"needs numbers {', '.join(TERMS)}",
                                         field=f"alloc_confs.{alloc}.terms.{kind}")
            if not all(isinstance(t.get(k, 0), (int, float)) for k in OPTIONAL_TERMS):
                raise EstimateInputError(path, f"{', '.join(OPTIONAL_TERMS)} must be numbers",
                                         field=f"alloc_confs.{alloc}.terms.{kind}")
            terms[alloc][kind] = Terms(*(float(t[k]) for k in TERMS), *(float(t.get(k, 0)) for k in OPTIONAL_TERMS))
    return ReservedFit(path, str(doc.get("torch", "")), terms)


def load_fit(path: Path | str | None = None) -> ReservedFit:
    """The fit at `path`, by default the one shipped with the package (data/reserved_fit.json)."""
    return _load(Path(path) if path else DEFAULT_FIT_PATH)


@lru_cache(maxsize=4)
def _load(path: Path) -> ReservedFit:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EstimateInputError(path, f"cannot read the reserved-memory fit: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise EstimateInputError(path, f"reserved-memory fit is not JSON: {exc}") from exc
    return parse_fit(doc, path)
