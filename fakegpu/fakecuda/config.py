"""PYTORCH_CUDA_ALLOC_CONF, read by the same lexical rules as PyTorch so the model honours the user's settings.

Options that change which blocks the caching allocator picks are modeled; options that only change how the
real driver maps memory (expandable segments, pinned host memory, lock release) are accepted and recorded as
not modeled, because classic cudaMalloc segments are what the rules below describe.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field

from fakegpu.fakecuda.errors import AllocatorConfigError

MiB = 1 << 20
K_LARGE_BUFFER = 20 * MiB
ROUNDUP_INTERVALS = 16  # 1 MiB .. 64 GiB, one power of two each
SIZE_MAX = (1 << 64) - 1

# Accepted, parsed for validity, but without an effect on the classic-segment model.
_NOT_MODELED_BOOL = (
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
)


@dataclass
class AllocatorConfig:
    max_split_size: int = SIZE_MAX
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    roundup_power2_divisions: list[int] = field(default_factory=lambda: [0] * ROUNDUP_INTERVALS)
    garbage_collection_threshold: float = 0.0
    per_process_memory_fraction: float = 1.0
    not_modeled: list[str] = field(default_factory=list)

    def divisions_for(self, size: int) -> int:
        """The division count of the power-of-two interval `size` falls in (interval 0 starts at 1 MiB)."""
        index = size.bit_length() - 1 - 20
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]


def _lex(text: str) -> list[str]:
    tokens: list[str] = []
    buf = ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                tokens.append(buf)
                buf = ""
            tokens.append(ch)
        elif ch != " ":
            buf += ch
    if buf:
        tokens.append(buf)
    return tokens


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.i = 0

    def expect(self, token: str) -> None:
        if self.i >= len(self.tokens) or self.tokens[self.i] != token:
            raise AllocatorConfigError(f"Error parsing CachingAllocator settings, expected {token}")
        self.i += 1

    def value(self, key: str) -> str:
        self.expect(":")
        if self.i >= len(self.tokens):
            raise AllocatorConfigError(f"Error, expecting {key} value")
        self.i += 1
        return self.tokens[self.i - 1]

    def integer(self, key: str) -> int:
        raw = self.value(key)
        try:
            return int(raw)
        except ValueError:
            raise AllocatorConfigError(f"{key}: {raw!r} is not a whole number") from None


def _parse_divisions(p: _Parser, divisions: list[int]) -> None:
    if p.tokens[p.i + 1 : p.i + 2] == ["["]:
        p.expect(":")
        p.expect("[")
        first, last_index = True, 0
        while p.i < len(p.tokens) and p.tokens[p.i] != "]":
            bound = p.tokens[p.i]
            p.i += 1
            count = p.integer("roundup_power2_divisions")
            if count != 0 and not _is_pow2(count):
                raise AllocatorConfigError("For roundups, the divisons has to be power of 2 or 0 to disable roundup")
            if bound == ">":
                # Everything above the last named interval (PyTorch's own test pins 1024:4 surviving ">:1").
                divisions[last_index + 1 :] = [count] * (ROUNDUP_INTERVALS - last_index - 1)
            else:
                mb = int(bound)
                if not _is_pow2(mb):
                    raise AllocatorConfigError("For roundups, the intervals have to be power of 2")
                index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
                if first:
                    divisions[:index] = [count] * index
                    first = False
                divisions[index] = count
                last_index = index
            if p.i < len(p.tokens) and p.tokens[p.i] == ",":
                p.i += 1
        p.expect("]")
    else:
        count = p.integer("roundup_power2_divisions")
        if not _is_pow2(count):
            raise AllocatorConfigError("For roundups, the divisons has to be power of 2")
        divisions[:] = [count] * ROUNDUP_INTERVALS


def parse_alloc_conf(text: str | None) -> AllocatorConfig:
    """An AllocatorConfig from a PYTORCH_CUDA_ALLOC_CONF value; raises AllocatorConfigError as torch would."""
    config = AllocatorConfig()
    if not text:
        return config
    p = _Parser(text)
    while p.i < len(p.tokens):
        key = p.tokens[p.i]
        p.i += 1
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            mb = p.integer(key)
            if mb < K_LARGE_BUFFER // MiB:
                raise AllocatorConfigError(
                    f"CachingAllocator option {key} too small, must be >= {K_LARGE_BUFFER // MiB}"
                )
            size = min(mb, SIZE_MAX // MiB) * MiB
            if key == "max_split_size_mb":
                config.max_split_size = size
            else:
                config.max_non_split_rounding_size = size
        elif key == "roundup_power2_divisions":
            _parse_divisions(p, config.roundup_power2_divisions)
        elif key == "garbage_collection_threshold":
            raw = p.value(key)
            value = float(raw)
            if not 0.0 < value < 1.0:
                raise AllocatorConfigError("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
            config.garbage_collection_threshold = value
            config.not_modeled.append(key)
        elif key == "per_process_memory_fraction":
            value = float(p.value(key))
            if not (math.isfinite(value) and 0.0 < value <= 1.0):
                raise AllocatorConfigError("per_process_memory_fraction must be in (0.0, 1.0]")
            config.per_process_memory_fraction = value
        elif key == "backend":
            backend = p.value(key)
            if backend != "native":
                raise AllocatorConfigError(f"allocator backend {backend!r} is not modeled by fakecuda (only native)")
        elif key in _NOT_MODELED_BOOL:
            flag = p.value(key)
            if flag not in ("True", "False"):
                raise AllocatorConfigError(f"Expected a single True/False argument for {key}")
            if flag == "True":
                config.not_modeled.append(key)
        else:
            raise AllocatorConfigError(f"Unrecognized CachingAllocator option: {key}")
        if p.i < len(p.tokens):
            p.expect(",")
    return config


def config_from_env(environ: dict[str, str] | None = None) -> AllocatorConfig:
    env = os.environ if environ is None else environ
    config = parse_alloc_conf(env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF"))
    if config.not_modeled:
        warnings.warn(
            f"fakecuda: PYTORCH_CUDA_ALLOC_CONF options {', '.join(config.not_modeled)} are accepted but not "
            "modeled; memory is accounted with classic cudaMalloc segments",
            stacklevel=2,
        )
    return config
