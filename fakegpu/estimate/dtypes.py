"""Element sizes of the dtypes that safetensors headers and --dtype options name."""

from __future__ import annotations

# Bits per element as the safetensors format defines them. Sub-byte types (F4, F6_*) are packed, which is why
# this table is in bits: a tensor's payload is ceil(numel * bits / 8).
SAFETENSORS_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}

FLOAT_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "F16", "BF16", "F32", "F64"})

# What a user may type for --dtype / --kv-cache-dtype, mapped to the safetensors spelling.
USER_DTYPES: dict[str, str] = {
    "fp32": "F32", "float32": "F32", "f32": "F32",
    "fp16": "F16", "float16": "F16", "half": "F16", "f16": "F16",
    "bf16": "BF16", "bfloat16": "BF16",
    "fp8": "F8_E4M3", "fp8_e4m3": "F8_E4M3", "float8_e4m3fn": "F8_E4M3", "fp8_e5m2": "F8_E5M2",
    "int8": "I8",
}


def payload_bytes(dtype: str, numel: int) -> int:
    return (numel * SAFETENSORS_BITS[dtype] + 7) // 8


def element_bytes(dtype: str) -> float:
    return SAFETENSORS_BITS[dtype] / 8


def normalise_user_dtype(name: str) -> str | None:
    """The safetensors spelling of a user's dtype name, or None when it is not one we know."""
    key = name.strip().lower().removeprefix("torch.")
    if key in USER_DTYPES:
        return USER_DTYPES[key]
    upper = name.strip().upper()
    return upper if upper in SAFETENSORS_BITS else None
