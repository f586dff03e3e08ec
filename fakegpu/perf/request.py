"""What to estimate, from the three ways a user names it: one op (FLOPs and bytes, or a GEMM shape), an op list
file, or a model directory with a phase. The CLI passes its options straight here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError, shorten
from fakegpu.perf import model_ops, oplist
from fakegpu.perf.ops import Custom, Gemm, Op, dtype_name
from fakegpu.perf.units import parse_quantity

_SHAPE = re.compile(r"^\s*(\d+)\s*[x,*]\s*(\d+)\s*[x,*]\s*(\d+)\s*$", re.IGNORECASE)


@dataclass
class Request:
    flops: str | None = None
    bytes: str | None = None
    gemm: str | None = None
    dtype: str | None = None
    ops_file: Path | None = None
    model_dir: Path | None = None
    phase: str = "decode"
    batch: int = 1
    seq_len: int = 2048
    attention: str | None = None
    given: set[str] = field(default_factory=set)  # model-only options the user typed


@dataclass(frozen=True)
class Resolved:
    ops: list[Op]
    source: dict[str, Any]
    model: dict[str, Any] | None
    notes: list[str]


def resolve(req: Request) -> Resolved:
    """The ops a request names; UsageError when it names none, several sources, or a half-given one."""
    single = req.flops is not None or req.bytes is not None
    sources = [name for name, on in (("--flops/--bytes", single), ("--gemm", req.gemm is not None),
                                     ("--ops", req.ops_file is not None), ("--model-dir", req.model_dir is not None))
               if on]
    if len(sources) != 1:
        what = "none" if not sources else " and ".join(sources)
        raise UsageError(f"give exactly one of --flops/--bytes (with --dtype), --gemm MxNxK, --ops FILE or "
                         f"--model-dir DIR; got {what}")
    if req.model_dir is None and req.given:
        raise UsageError(f"{', '.join(sorted(req.given))} only apply to --model-dir")
    if single:
        if req.flops is None or req.bytes is None or req.dtype is None:
            raise UsageError("--flops, --bytes and --dtype go together: one op's work, traffic and dtype")
        op = Custom(name="op", flops=parse_quantity(req.flops, "--flops"), bytes=parse_quantity(req.bytes, "--bytes"),
                    dtype=dtype_name(req.dtype))
        return Resolved([op], {"kind": "single"}, None, [
            "--flops/--bytes: priced as a kernel reaching the large-GEMM compute share and the copy bandwidth share"])
    if req.gemm is not None:
        found = _SHAPE.match(req.gemm)
        if not found:
            raise UsageError(f"--gemm: {shorten(req.gemm)} is not a shape; expected MxNxK such as 8192x8192x8192")
        m, n, k = (int(x) for x in found.groups())
        if min(m, n, k) < 1:
            raise UsageError("--gemm: every dimension must be at least 1")
        op = Gemm(name=f"gemm {m}x{n}x{k}", m=m, n=n, k=k, dtype=dtype_name(req.dtype or "bf16"))
        return Resolved([op], {"kind": "single"}, None, [])
    if req.ops_file is not None:
        if req.dtype is not None:
            raise UsageError("--dtype does not apply to --ops: each op in the file names its own dtype")
        return Resolved(oplist.load(req.ops_file), {"kind": "ops", "path": str(req.ops_file)}, None, [])
    backend = req.attention
    if backend is not None:
        from fakegpu.profiles.efficiency import load

        known = load().attention_backends()
        if backend not in known:
            raise UsageError(f"--attention: {backend!r} is not one of {', '.join(known)}")
    built = model_ops.from_model_dir(req.model_dir, req.phase, req.batch, req.seq_len, req.dtype, backend)
    source = {"kind": "model", "path": str(req.model_dir), "phase": req.phase, "batch": req.batch,
              "seq_len": req.seq_len, "dtype": built.summary["dtype"]}
    return Resolved(built.ops, source, built.summary, built.notes)
