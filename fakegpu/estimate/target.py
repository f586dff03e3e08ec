"""The fit verdict on a target board, and the search for the largest workload that still fits."""

from __future__ import annotations

from collections.abc import Callable

from fakegpu.profiles import Profile, load_catalog

# Less free memory than this share of the board is called "tight": allocator behaviour and library versions
# move real peaks by a few percent.
TIGHT_SHARE = 0.05


def resolve_profile(name: str) -> Profile:
    """The catalog's profile for `name`; UnknownProfile (with suggestions) when there is none."""
    return load_catalog().get(name)


def verdict(profile: Profile, reserved: int, context: int, smi_used: int) -> dict:
    """Compare torch's view (reserved + context within cudaMemGetInfo's total) and nvidia-smi's (NVML total)."""
    torch_budget = profile.cuda_total_bytes - context
    torch_headroom = torch_budget - reserved
    smi_headroom = profile.memory_total_bytes - smi_used
    headroom = min(torch_headroom, smi_headroom)
    if headroom < 0:
        word = "does-not-fit"
    elif headroom < TIGHT_SHARE * profile.cuda_total_bytes:
        word = "tight"
    else:
        word = "fits"
    return {
        "profile": profile.id,
        "name": profile.name,
        "compute_capability": profile.data["compute_capability"],
        "cuda_total_bytes": profile.cuda_total_bytes,
        "memory_total_bytes": profile.memory_total_bytes,
        "verdict": word,
        "headroom_bytes": headroom,
        "torch_headroom_bytes": torch_headroom,
        "nvidia_smi_headroom_bytes": smi_headroom,
    }


def fits(profile: Profile, reserved: int, context: int, smi_used: int) -> bool:
    return verdict(profile, reserved, context, smi_used)["headroom_bytes"] >= 0


def largest(ok: Callable[[int], bool], start: int = 1, cap: int = 1 << 24) -> int:
    """The largest n in [start, cap] with ok(n), assuming ok is monotone (true, then false); 0 if none."""
    if not ok(start):
        return 0
    lo, hi = start, start
    while hi < cap and ok(min(hi * 2, cap)):
        lo = hi = min(hi * 2, cap)
    if hi >= cap:
        return cap
    hi = min(hi * 2, cap)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
