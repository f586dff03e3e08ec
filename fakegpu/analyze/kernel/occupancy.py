"""Theoretical occupancy: how many blocks of a kernel fit on one SM at once, by the CUDA occupancy calculator's
rules. Four limits, the smallest wins:

    warps      max warps per SM // warps per block
    blocks     max blocks per SM
    registers  registers are given per warp in units (256): ceil(regs * 32 / unit) * unit per warp; the SM's
               registers hold floor(regs per SM / that) warps, rounded down to the warp allocation
               granularity (4); blocks = those warps // warps per block
    shared     (static + dynamic + reserved per block (1 KiB from cc 8.0)) rounded up to the allocation unit;
               blocks = shared per SM // that, at the largest carveout; the smallest carveout that keeps the
               same count is named too

The per-SM limits are the catalog's (`sm_limits`), the allocation rules occupancy_rules.yaml's, each with its
source. A block that cannot launch at all (too many threads, registers or shared memory for one block) is said
so, with the limit it breaks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

RULES = Path(__file__).resolve().parent / "occupancy_rules.yaml"


@cache
def _rules() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {cc: row for row in doc["rules"] for cc in row["capabilities"]}


def rules_for(cc: str) -> dict[str, Any] | None:
    """The allocation rules of compute capability `cc` ("8.0"), None when the table has none for it."""
    row = _rules().get(cc)
    return None if row is None else {k: v for k, v in row.items() if k != "capabilities"}


def capabilities() -> list[str]:
    return sorted(_rules(), key=lambda cc: tuple(int(p) for p in cc.split(".")))


@dataclass(frozen=True)
class Limits:
    """One SM's limits and allocation rules, as occupancy needs them."""

    cc: str
    warp_size: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    shared_per_sm: int
    shared_per_block_optin: int
    register_allocation_unit: int
    warp_allocation_granularity: int
    max_registers_per_thread: int
    shared_allocation_unit: int
    reserved_shared_per_block: int
    carveouts: tuple[int, ...]  # bytes

    @classmethod
    def of(cls, cc: str, sm_limits: dict[str, int]) -> Limits | None:
        rules = rules_for(cc)
        if rules is None:
            return None
        return cls(cc, sm_limits["warp_size"], sm_limits["max_threads_per_sm"], sm_limits["max_threads_per_block"],
                   sm_limits["max_blocks_per_sm"], sm_limits["registers_per_sm"], sm_limits["registers_per_block"],
                   sm_limits["shared_memory_per_sm_bytes"], sm_limits["shared_memory_per_block_optin_bytes"],
                   rules["register_allocation_unit"], rules["warp_allocation_granularity"],
                   rules["max_registers_per_thread"], rules["shared_allocation_unit_bytes"],
                   rules["reserved_shared_per_block_bytes"],
                   tuple(k * 1024 for k in rules["shared_carveouts_kib"]))


def _up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(limits: Limits, threads: int, registers: int, shared_bytes: int,
              dynamic_shared: int = 0, reserved_included: bool = False) -> dict[str, Any]:
    """Blocks and warps per SM for blocks of `threads` threads, `registers` per thread and the given shared
    memory, with the limit that decides and every limit's count; `launchable` False with `why` when one block
    alone exceeds a per-block limit. `reserved_included`: the binary's shared size already holds the system's
    per-block reservation (see Cubin.reserved_shared_in_binary), which is then not added again."""
    warp = limits.warp_size
    max_warps = limits.max_threads_per_sm // warp
    warps_per_block = math.ceil(threads / warp)
    regs_per_warp = _up(registers * warp, limits.register_allocation_unit) if registers else 0
    reserved = 0 if reserved_included else limits.reserved_shared_per_block
    user_shared = shared_bytes + dynamic_shared - (limits.reserved_shared_per_block if reserved_included else 0)
    shared_per_block = _up(shared_bytes + dynamic_shared + reserved, limits.shared_allocation_unit)
    result: dict[str, Any] = {
        "threads_per_block": threads, "registers_per_thread": registers,
        "shared_bytes_per_block": shared_bytes + dynamic_shared, "warps_per_block": warps_per_block,
        "registers_per_warp_allocated": regs_per_warp, "shared_bytes_per_block_allocated": shared_per_block,
        "reserved_shared_bytes": reserved, "launchable": True, "why": None,
    }
    problems = []
    if threads > limits.max_threads_per_block:
        problems.append(f"{threads} threads per block exceed the limit of {limits.max_threads_per_block}")
    if registers > limits.max_registers_per_thread:
        problems.append(f"{registers} registers per thread exceed the limit of {limits.max_registers_per_thread}")
    if regs_per_warp * warps_per_block > limits.registers_per_block:
        problems.append(f"{regs_per_warp * warps_per_block} registers per block ({warps_per_block} warps x "
                        f"{regs_per_warp}) exceed the limit of {limits.registers_per_block} "
                        "(cudaErrorLaunchOutOfResources)")
    if user_shared > limits.shared_per_block_optin:
        problems.append(f"{user_shared} bytes of shared memory per block exceed the opt-in "
                        f"limit of {limits.shared_per_block_optin}")
    if problems:
        result.update(launchable=False, why="; ".join(problems), blocks_per_sm=0, warps_per_sm=0,
                      occupancy=0.0, limited_by=None, limits={}, carveout_bytes=None)
        return result
    by = {
        "warps": max_warps // warps_per_block,
        "blocks": limits.max_blocks_per_sm,
        "registers": (limits.registers_per_sm // regs_per_warp // limits.warp_allocation_granularity
                      * limits.warp_allocation_granularity // warps_per_block) if regs_per_warp else None,
        "shared": limits.shared_per_sm // shared_per_block if shared_per_block else None,
    }
    counted = {k: v for k, v in by.items() if v is not None}
    blocks = min(counted.values())
    carveout = None
    if limits.carveouts and shared_per_block:
        carveout = next((c for c in sorted(limits.carveouts) if c // shared_per_block >= blocks),
                        max(limits.carveouts))
    result.update(blocks_per_sm=blocks, warps_per_sm=blocks * warps_per_block,
                  occupancy=round(blocks * warps_per_block / max_warps, 4),
                  limited_by=sorted(k for k, v in counted.items() if v == blocks), limits=by,
                  carveout_bytes=carveout)
    return result
