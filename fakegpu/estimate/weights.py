"""From tensor headers to parameters and bytes, quantized checkpoints included.

Quantized formats store one logical weight as a packed payload plus metadata tensors: bitsandbytes 4-bit packs
two values per uint8 next to absmax/quant_map, GPTQ and AWQ pack 32/bits values per int32 next to scales and
zeros, fp8 keeps one byte per value next to a scale. The parameter count is logical (what the model has); the
bytes are the payloads actually stored, so quantized checkpoints are sized from what they hold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fakegpu.estimate.dtypes import FLOAT_DTYPES
from fakegpu.estimate.safetensors_header import Checkpoint, TensorInfo

# Suffixes of tensors that only describe how another tensor is quantized.
QUANT_METADATA_SUFFIXES = (
    ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".SCB", ".weight_format",
    ".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_scale_inv", ".input_scale",
    ".weight_zero_point", ".weight_shape", ".weight_g_idx", ".zeros",
)
BUFFER_SUFFIXES = (".position_ids", ".inv_freq", ".masked_bias", "token_type_ids")
PACKED_INT_SUFFIXES = (".qweight", ".weight_packed")


@dataclass
class WeightSummary:
    parameter_count: int
    weight_bytes: int  # every payload byte in the checkpoint: parameters, quantization metadata, buffers
    parameter_bytes: int
    quant_metadata_bytes: int
    buffer_bytes: int
    tensor_count: int
    quantization: str | None
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    largest_tensor_bytes: int = 0

    def to_dict(self) -> dict:
        return {
            "parameter_count": self.parameter_count,
            "weight_bytes": self.weight_bytes,
            "parameter_bytes": self.parameter_bytes,
            "quant_metadata_bytes": self.quant_metadata_bytes,
            "buffer_bytes": self.buffer_bytes,
            "tensor_count": self.tensor_count,
            "quantization": self.quantization,
            "bytes_by_dtype": dict(sorted(self.bytes_by_dtype.items())),
        }


def classify(t: TensorInfo, names: set[str]) -> str:
    """'param', 'packed' (a quantized weight), 'meta' (quantization metadata) or 'buffer'."""
    if ".quant_state." in t.name or t.name.endswith(QUANT_METADATA_SUFFIXES):
        return "meta"
    if t.name.endswith(PACKED_INT_SUFFIXES):
        return "packed"
    if t.dtype in ("U8", "I8") and (f"{t.name}.absmax" in names or _scb_name(t.name) in names):
        return "packed"
    if t.dtype.startswith(("F8", "F4", "F6")) and (f"{t.name}_scale" in names or f"{t.name}_scale_inv" in names):
        return "packed"
    if t.name.endswith(BUFFER_SUFFIXES) or t.dtype not in FLOAT_DTYPES:
        return "buffer"
    return "param"


def _scb_name(weight_name: str) -> str:
    return weight_name.removesuffix(".weight") + ".SCB"


def logical_numel(t: TensorInfo, names: set[str], bits: int) -> int:
    """How many model parameters a packed tensor stands for."""
    if t.dtype == "U8" and f"{t.name}.absmax" in names:
        return t.numel * 2  # bitsandbytes 4-bit: two 4-bit values per byte
    if t.dtype in ("I32", "U32"):
        return t.numel * (32 // bits)
    return t.numel


def quant_bits(quantization: dict) -> int:
    bits = quantization.get("bits") or quantization.get("w_bit")
    for group in (quantization.get("config_groups") or {}).values():
        bits = bits or (group.get("weights") or {}).get("num_bits")
    return int(bits or 4)


def summarise(ckpt: Checkpoint, quantization: dict | None = None) -> WeightSummary:
    quantization = quantization or {}
    names = set(ckpt.tensors)
    bits = quant_bits(quantization)
    params = param_bytes = meta_bytes = buffer_bytes = 0
    by_dtype: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    largest = 0
    for t in ckpt.tensors.values():
        kind = classify(t, names)
        kinds[f"{kind}:{t.dtype}"] += 1
        by_dtype[t.dtype] += t.nbytes
        largest = max(largest, t.nbytes)
        if kind == "param":
            params += t.numel
            param_bytes += t.nbytes
        elif kind == "packed":
            params += logical_numel(t, names, bits)
            param_bytes += t.nbytes
        elif kind == "meta":
            meta_bytes += t.nbytes
        else:
            buffer_bytes += t.nbytes
    return WeightSummary(
        parameter_count=params,
        weight_bytes=param_bytes + meta_bytes + buffer_bytes,
        parameter_bytes=param_bytes,
        quant_metadata_bytes=meta_bytes,
        buffer_bytes=buffer_bytes,
        tensor_count=len(ckpt.tensors),
        quantization=_scheme(kinds, quantization),
        bytes_by_dtype=dict(by_dtype),
        largest_tensor_bytes=largest,
    )


def _scheme(kinds: Counter[str], quantization: dict) -> str | None:
    method = quantization.get("quant_method")
    if method:
        return str(method)
    if kinds.get("packed:U8"):
        return "bitsandbytes-4bit"
    if kinds.get("packed:I8"):
        return "bitsandbytes-8bit"
    if any(k.startswith("packed:F8") for k in kinds):
        return "fp8"
    if kinds.get("packed:I32"):
        return "gptq-or-awq"
    return None
