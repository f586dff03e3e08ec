"""Can a device run this binary? CUDA's rules, as the CUDA C++ Programming Guide ("Binary Compatibility",
"PTX Compatibility", "Application Compatibility") states them:

    SASS sm_XY      runs on compute capability X.Z with Z >= Y (same major version only)
    SASS sm_XYa     runs on X.Y exactly (architecture-specific features)
    SASS sm_XYf     runs on X.Z with Z >= Y (the family)
    PTX compute_XY  the driver JIT-compiles it for any device of capability >= X.Y
    PTX compute_XYa only for X.Y;  compute_XYf only for X.Z with Z >= Y

With neither a SASS image nor a PTX it can JIT, a launch fails with cudaErrorNoKernelImageForDevice."""

from __future__ import annotations

from typing import Any


def split_arch(arch: str) -> tuple[int, int, str]:
    """("sm_90a") -> (9, 0, "a"); the last digit is the minor version."""
    digits = arch.split("_", 1)[1]
    variant = digits[-1] if digits[-1] in "af" else ""
    number = int(digits.rstrip("af"))
    return number // 10, number % 10, variant


def runs(arch: str, device: tuple[int, int]) -> bool:
    major, minor, variant = split_arch(arch)
    if arch.startswith("sm_"):
        if variant == "a":
            return (major, minor) == device
        return major == device[0] and minor <= device[1]
    if variant == "a":
        return (major, minor) == device
    if variant == "f":
        return major == device[0] and minor <= device[1]
    return (major, minor) <= device


def verdict(sass: list[str], ptx: list[str], device: tuple[int, int]) -> dict[str, Any]:
    """Whether code with these SASS and PTX architectures runs on `device` (major, minor), how, and why."""
    cc = f"{device[0]}.{device[1]}"
    native = sorted(a for a in set(sass) if runs(a, device))
    jit = sorted(a for a in set(ptx) if runs(a, device))
    if native:
        return {"runs": True, "how": "sass", "images": native,
                "why": f"SASS for {', '.join(native)} runs on compute capability {cc}"}
    if jit:
        return {"runs": True, "how": "ptx-jit", "images": jit,
                "why": f"no SASS for compute capability {cc}; the driver JIT-compiles the PTX of {', '.join(jit)} "
                       "at first launch (slower start; cached afterwards)"}
    reasons = []
    for arch in sorted(set(sass)):
        major, minor, variant = split_arch(arch)
        if variant == "a":
            reasons.append(f"{arch} is architecture-specific: it runs on compute capability {major}.{minor} only")
        elif major != device[0]:
            reasons.append(f"{arch} is for compute capability {major}.x: SASS runs only within its major version")
        else:
            reasons.append(f"{arch} needs compute capability {major}.{minor} or a later {major}.x")
    for arch in sorted(set(ptx)):
        major, minor, variant = split_arch(arch)
        if variant == "a":
            reasons.append(f"PTX {arch} is architecture-specific: the driver JIT-compiles it for {major}.{minor} only")
        elif variant == "f":
            reasons.append(f"PTX {arch} is family-specific: {major}.{minor} or a later {major}.x only")
        else:
            reasons.append(f"PTX {arch} needs compute capability {major}.{minor} or later")
    if not sass and not ptx:
        reasons.append("no device code was read")
    elif not ptx:
        reasons.append("and there is no PTX the driver could JIT-compile")
    return {"runs": False, "how": None, "images": [],
            "why": f"no kernel image for compute capability {cc}: launches fail with cudaErrorNoKernelImageForDevice "
                   f"({'; '.join(reasons)})"}


def best_sass(images: list[str], device: tuple[int, int]) -> str | None:
    """The SASS image the driver loads among those that run: the newest minor version, an arch-specific one
    over a plain one of the same version."""
    usable = [a for a in images if a.startswith("sm_") and runs(a, device)]
    return max(usable, key=lambda a: (split_arch(a)[1], split_arch(a)[2] == "a")) if usable else None
