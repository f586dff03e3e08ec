"""The operations the roofline prices: what each costs in FLOPs and in bytes of device memory traffic.

An op is a GEMM (or batched GEMM), an attention call, a bandwidth-bound elementwise or reduction kernel, or a
custom (flops, bytes) pair. Bytes are the minimum traffic: every operand read once, every result written once.
`count` repeats an op (a transformer's layers); totals multiply by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakegpu.errors import UsageError
from fakegpu.estimate.dtypes import element_bytes, normalise_user_dtype

# The roofline's dtype names -> the storage dtype (safetensors spelling) whose element size they move. TF32 is a
# math mode over fp32 storage; fp8 means e4m3 or e5m2 alike.
STORAGE = {"fp64": "F64", "fp32": "F32", "tf32": "F32", "fp16": "F16", "bf16": "BF16", "fp8": "F8_E4M3",
           "int8": "I8", "fp4": "F4"}
_FROM_STORAGE = {"F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16", "F8_E4M3": "fp8", "F8_E5M2": "fp8",
                 "I8": "int8", "F4": "fp4"}
# What torch writes for a low-precision GEMM: torch._scaled_mm returns bf16 (as the capture ran it), _int_mm int32.
_DEFAULT_OUT = {"fp8": 2.0, "int8": 4.0}
OP_TYPES = ("gemm", "bmm", "attention", "elementwise", "reduction", "custom")


def dtype_name(text: str, what: str = "--dtype") -> str:
    """The roofline's name for a dtype a user typed (bf16, bfloat16, torch.float16, tf32, fp8, ...)."""
    key = str(text).strip().lower().removeprefix("torch.")
    if key in STORAGE:
        return key
    found = normalise_user_dtype(key)
    if found in _FROM_STORAGE:
        return _FROM_STORAGE[found]
    from fakegpu.profiles.matching import did_you_mean

    hint = did_you_mean(key, STORAGE, paren=False)
    raise UsageError(f"{what}: unknown dtype {text!r}{hint} (known: {', '.join(STORAGE)})")


def elem_bytes(dtype: str) -> float:
    return element_bytes(STORAGE[dtype])


@dataclass(frozen=True, kw_only=True)
class Op:
    """Common to every op: what to call it in the report, how many times it runs, its dtype."""

    name: str
    dtype: str
    count: int = 1

    op = "custom"  # the op type, as the op list spells it

    def work(self) -> tuple[float, float]:
        """(FLOPs, bytes of device memory traffic) of one run."""
        raise NotImplementedError

    @property
    def launch_class(self) -> str:
        """Which host issue time (efficiency.yaml launch.eager.classes) the op pays."""
        return {"gemm": "gemm", "bmm": "gemm", "attention": "attention", "reduction": "reduction"}.get(
            self.op, "elementwise")

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Gemm(Op):
    """C[m,n] = A[m,k] @ B[k,n], `batch` times (a bmm when batched); B is the weight of a linear layer."""

    m: int
    n: int
    k: int
    batch: int = 1
    batched: bool = False
    sparse: bool = False  # B is 2:4 structured-sparse
    impl: str | None = None  # a kernel path with its own factor (efficiency.yaml gemm.impl)

    @property
    def op(self) -> str:  # type: ignore[override]
        return "bmm" if self.batched else "gemm"

    def weight_bytes(self) -> float:
        # The sparse operand is stored compressed: half its values (the 2-bit metadata is left out).
        return self.batch * self.k * self.n * elem_bytes(self.dtype) * (0.5 if self.sparse else 1.0)

    def work(self) -> tuple[float, float]:
        e = elem_bytes(self.dtype)
        out = _DEFAULT_OUT.get(self.dtype, e)
        flops = 2.0 * self.batch * self.m * self.n * self.k
        return flops, self.batch * (self.m * self.k * e + self.m * self.n * out) + self.weight_bytes()

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "name": self.name, "count": self.count}
        if self.batched:
            d["batch"] = self.batch
        d |= {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype}
        if self.sparse:
            d["sparse"] = True
        if self.impl:
            d["impl"] = self.impl
        return d


@dataclass(frozen=True, kw_only=True)
class Attention(Op):
    """scaled_dot_product_attention over [batch, heads, q_len, head_dim] queries and kv_heads K/V heads."""

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    kv_heads: int | None = None
    backend: str | None = None  # resolved per board when None (efficiency.yaml attention_backends)
    backward: bool = False  # forward and backward together

    op = "attention"

    @property
    def groups(self) -> int:
        return self.kv_heads or self.heads

    def pairs(self) -> float:
        """(query, key) pairs scored per head: all of them, or under a causal mask aligned to the last key
        (FlashAttention's convention when q_len < kv_len, as a decode or chunked-prefill step has it)."""
        q, kv = self.q_len, self.kv_len
        if not self.causal:
            return float(q * kv)
        if q <= kv:
            return q * (kv - q) + q * (q + 1) / 2.0
        return kv * (kv + 1) / 2.0

    def forward_flops(self) -> float:
        return 4.0 * self.batch * self.heads * self.pairs() * self.head_dim

    def work(self) -> tuple[float, float]:
        e = elem_bytes(self.dtype)
        q_side = self.heads * self.q_len * self.head_dim
        kv_side = self.groups * self.kv_len * self.head_dim
        # forward: Q, K, V in, O out; backward adds O, dO, Q, K, V in and dQ, dK, dV out. The backward pass does
        # 2.5x the forward's matmul work (five GEMMs against two), as the capture counts it.
        if self.backward:
            return 3.5 * self.forward_flops(), self.batch * 6 * (q_side + kv_side) * e
        return self.forward_flops(), self.batch * 2 * (q_side + kv_side) * e

    def describe(self) -> dict[str, Any]:
        d = {"op": "attention", "name": self.name, "count": self.count, "batch": self.batch, "heads": self.heads,
             "kv_heads": self.groups, "q_len": self.q_len, "kv_len": self.kv_len, "head_dim": self.head_dim,
             "causal": self.causal, "dtype": self.dtype, "backward": self.backward}
        if self.backend:
            d["backend"] = self.backend
        return d


@dataclass(frozen=True, kw_only=True)
class MemoryOp(Op):
    """A bandwidth-bound kernel: `bytes` read plus written, of a `kind` the efficiency table knows."""

    bytes: float
    kind: str
    reduction: bool = False
    flops: float = 0.0
    dtype: str = "fp32"

    @property
    def op(self) -> str:  # type: ignore[override]
        return "reduction" if self.reduction else "elementwise"

    def work(self) -> tuple[float, float]:
        return self.flops, self.bytes

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "name": self.name, "count": self.count, "kind": self.kind,
                             "bytes": self.bytes}
        if self.flops:
            d |= {"flops": self.flops, "dtype": self.dtype}
        return d


@dataclass(frozen=True, kw_only=True)
class Custom(Op):
    """Any kernel given as FLOPs and bytes: priced with the large-GEMM compute share and the copy bandwidth
    share, the best a real kernel of that dtype sustains."""

    flops: float
    bytes: float

    def work(self) -> tuple[float, float]:
        return self.flops, self.bytes

    def describe(self) -> dict[str, Any]:
        return {"op": "custom", "name": self.name, "count": self.count, "flops": self.flops, "bytes": self.bytes,
                "dtype": self.dtype}
