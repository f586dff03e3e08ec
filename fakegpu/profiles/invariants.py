"""Cross-profile and physical invariants the JSON Schema cannot express."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

MIB = 1 << 20
MIG_MEMORY_SLACK = 1.02  # GI memory x (memory slices / placement size) may exceed the board total by 2% at most
_MIG_NG = re.compile(r"^([1-8])g\.")
# The nested groups of a compute_capabilities.yaml row; its other keys (but arch) are per-SM limits.
CAPABILITY_GROUPS = ("textures", "attributes", "l2_persisting", "context_limits")


def _lookup_keys(profile: dict[str, Any]) -> list[str]:
    return [profile["id"], *profile["aliases"]]


def check_profile(rel_path: str, p: dict[str, Any], capabilities: dict[str, Any]) -> list[str]:
    """Problems of one schema-valid profile, each prefixed with its file."""
    out: list[str] = []

    def bad(msg: str) -> None:
        out.append(f"{rel_path}: {msg}")

    path = PurePath(rel_path)
    if path.stem != p["id"]:
        bad(f"id {p['id']!r} differs from the file name {path.stem!r}")
    if path.parent.name != p["architecture"]:
        bad(f"architecture {p['architecture']!r} but the file is under {path.parent.name}/")
    cc = capabilities.get(p["compute_capability"])
    if cc is None:
        bad(f"compute capability {p['compute_capability']} is not in compute_capabilities.yaml")
    elif cc["arch"] != p["architecture"]:
        bad(f"compute capability {p['compute_capability']} is {cc['arch']}, not {p['architecture']}")
    if not p["name"].startswith(("NVIDIA ", "Tesla ", "Quadro ", "GeForce ", "Orin", "Xavier", "Jetson")):
        bad(f"name {p['name']!r} does not look like an NVML board name")
    if p["cuda_cores"] % p["sm_count"]:
        bad(f"{p['cuda_cores']} CUDA cores do not split evenly over {p['sm_count']} SMs")
    clocks = p["clocks_mhz"]
    if clocks["boost"] < clocks["base"]:
        bad(f"boost clock {clocks['boost']} MHz is below base {clocks['base']} MHz")
    if clocks.get("memory_supported", [clocks["memory"]])[0] != clocks["memory"]:
        bad("clocks_mhz.memory_supported starts with the max memory clock, clocks_mhz.memory")
    low = clocks.get("graphics_min")
    if low is not None and (low > clocks["boost"] or (clocks["boost"] - low) % 15):
        bad("clocks_mhz.graphics_min is below boost by whole 15 MHz steps (NVML lists graphics clocks so)")
    thermal = p.get("thermal")
    if thermal and not thermal["gpu_max_c"] <= thermal["slowdown_c"] <= thermal["shutdown_c"]:
        bad("thermal thresholds must satisfy gpu_max <= slowdown <= shutdown")
    mem = p["memory"]
    if mem["total_bytes"] % MIB:
        bad("memory.total_bytes is not a whole number of MiB (NVML totals are)")
    if "cuda_total_bytes" in mem and not mem["cuda_total_bytes"] < mem["total_bytes"]:
        bad("memory.cuda_total_bytes must be below the NVML total (the driver reserves some)")
    power = p["power"]
    lo = power.get("min_limit_w", 0)
    if not lo <= power["default_limit_w"] <= power["max_limit_w"]:
        bad("power limits must satisfy min <= default <= max")
    if p["mig"]["supported"] != ("max_instances" in p["mig"]):
        bad("mig.max_instances is given exactly when MIG is supported")
    if p["nvlink"]["links"] and "bandwidth_gb_s" not in p["nvlink"]:
        bad("nvlink.bandwidth_gb_s is required when the board has NVLink")
    if p["segment"] == "consumer" and mem["ecc"]:
        bad("consumer boards do not enable ECC by default")
    if "device_id" not in p["pci"] and p["segment"] != "embedded":
        bad("pci.device_id is required for every board but integrated (embedded) GPUs")
    tflops = p["tflops"]
    if "fp32" not in tflops:
        bad("tflops.fp32 is published for every board and is required")
    out.extend(f"{rel_path}: {msg}" for msg in check_mig(p))
    return out


def check_mig(p: dict[str, Any]) -> list[str]:
    """Physical checks of a board's MIG block: slices, GPU instance profiles and their placements."""
    mig = p["mig"]
    gips = mig.get("gpu_instance_profiles")
    out: list[str] = []
    if not mig["supported"]:
        if gips is not None or "slices" in mig:
            out.append("mig.gpu_instance_profiles and mig.slices are given only when MIG is supported")
        return out
    if gips is None:
        return out
    slices = mig.get("slices")
    if slices is None:
        out.append("mig.slices is required with mig.gpu_instance_profiles")
        return out
    mem_slices, compute_slices = slices["memory"], slices["compute"]
    total_mib = p["memory"]["total_bytes"] / MIB
    seen: set[str] = set()
    for gip in gips:
        name = gip["name"]
        where = f"mig profile {name}"
        if name in seen:
            out.append(f"{where} is listed twice")
        seen.add(name)
        m = _MIG_NG.match(name)
        if m is None or int(m.group(1)) != gip["compute_slices"]:
            out.append(f"{where}: the name's Ng does not match compute_slices {gip['compute_slices']}")
        if gip["compute_slices"] > compute_slices:
            out.append(f"{where}: {gip['compute_slices']} compute slices, but the board has {compute_slices}")
        if gip["compute_slices"] == compute_slices and gip["instances"] != 1:
            out.append(f"{where} takes every compute slice, so it can have 1 instance, not {gip['instances']}")
        placements = gip["placements"]
        size, starts = placements["size"], placements["starts"]
        if len(set(starts)) != len(starts):
            out.append(f"{where}: placement starts repeat")
        for start in starts:
            if start + size > mem_slices:
                out.append(f"{where}: placement {start}:{size} runs past the {mem_slices} memory slices")
        if gip["instances"] > len(starts):
            out.append(f"{where}: {gip['instances']} instances but only {len(starts)} placements")
        if size <= mem_slices and gip["memory_mib"] * mem_slices / size > total_mib * MIG_MEMORY_SLACK:
            out.append(f"{where}: {gip['memory_mib']} MiB per {size} of {mem_slices} memory slices "
                       f"exceeds the board's {total_mib:.0f} MiB")
        if gip["sm_count"] > p["sm_count"]:
            out.append(f"{where}: {gip['sm_count']} SMs, but the board has {p['sm_count']}")
    base = [g for g in gips if g["compute_slices"] == 1 and g["nvml_profile"] == 0]
    if base and mig["max_instances"] != base[0]["instances"]:
        out.append(f"mig.max_instances {mig['max_instances']} differs from the {base[0]['instances']} "
                   f"instances of the 1-slice profile {base[0]['name']}")
    return out


def check_capabilities(capabilities: dict[str, Any]) -> list[str]:
    """Problems of compute_capabilities.yaml: every row carries every group, each group the same keys in every
    row (C answers an attribute from the catalog only where the catalog names it), integers where CUDA has
    integers and fractions of the L2 between 0 and 1."""
    out: list[str] = []
    keys: dict[str, tuple[str, set[str]]] = {}
    for cc, row in capabilities.items():
        for group in CAPABILITY_GROUPS:
            values = row.get(group)
            if not isinstance(values, dict):
                out.append(f"compute capability {cc}: {group} is missing")
                continue
            first = keys.setdefault(group, (cc, set(values)))
            if group != "context_limits" and set(values) != first[1]:
                out.append(f"compute capability {cc}: {group} keys differ from {first[0]}'s: "
                           f"{sorted(set(values) ^ first[1])}")
            for key, v in values.items():
                ok = 0 <= v <= 1 if group == "l2_persisting" else isinstance(v, int) and not isinstance(v, bool)
                if not ok:
                    out.append(f"compute capability {cc}: {group}.{key} = {v!r} is out of range")
    return out


def check_catalog(profiles: dict[str, dict[str, Any]], capabilities: dict[str, Any]) -> list[str]:
    """Problems across the whole catalog: per-profile checks plus uniqueness of ids, names and aliases."""
    problems: list[str] = check_capabilities(capabilities)
    owners: dict[str, str] = {}
    names: dict[str, str] = {}
    for rel, p in profiles.items():
        problems.extend(check_profile(rel, p, capabilities))
        for key in _lookup_keys(p):
            if key in owners and owners[key] != p["id"]:
                problems.append(f"{rel}: {key!r} is already the id or an alias of {owners[key]}")
            owners.setdefault(key, p["id"])
        lname = p["name"].lower()
        if lname in names:
            problems.append(f"{rel}: name {p['name']!r} is also used by {names[lname]}")
        names.setdefault(lname, p["id"])
    return problems
