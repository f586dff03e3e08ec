"""Compile profiles/*.yaml into the catalog the rest of FakeGPU reads.

    python -m fakegpu.profiles.compile            # validate and write fakegpu/data/catalog.json
    python -m fakegpu.profiles.compile --check    # validate; fail if the committed catalog is stale

Validation is the JSON Schema (profiles/schema.json) plus the invariants in `invariants.py`. The compiled
form merges each profile with its compute capability's facts (per-SM limits, CUDA device attributes, the
persisting-L2 fractions, a context's default limits) and with the load model's figures (profiles/load_model.yaml,
`telemetry`), so readers never repeat those merges.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fakegpu.atomic_file import write_atomic
from fakegpu.errors import CatalogError
from fakegpu.profiles.catalog import CATALOG_FORMAT, COMPILED_CATALOG, Profile
from fakegpu.profiles.invariants import CAPABILITY_GROUPS, check_catalog

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"


def _load_yaml(path: Path) -> Any:
    import yaml  # only the build needs YAML; the runtime path reads the compiled JSON

    try:
        with path.open(encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML", [str(exc)]) from exc


def schema_errors(profile: Any, schema: dict[str, Any]) -> list[str]:
    """Every schema violation of one profile document, as 'path: message' lines."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(profile), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors]


def load_capabilities(profiles_dir: Path = PROFILES_DIR) -> dict[str, dict[str, Any]]:
    """compute_capabilities.yaml by compute capability; its "_" keys only hold the sets the rows share."""
    raw = _load_yaml(profiles_dir / "compute_capabilities.yaml")
    return {cc: row for cc, row in raw.items() if not cc.startswith("_")}


def capability_facts(row: dict[str, Any]) -> dict[str, Any]:
    """One compute capability's row as the compiled profile carries it: sm_limits (the row's flat keys),
    cuda_attributes (textures and attributes, keyed by CUDA attribute name), l2_persisting, context_limits."""
    return {
        "sm_limits": {k: v for k, v in row.items() if k != "arch" and k not in CAPABILITY_GROUPS},
        "cuda_attributes": {**row["textures"], **row["attributes"]},
        "l2_persisting": dict(row["l2_persisting"]),
        "context_limits": dict(row["context_limits"]),
    }


def load_sources(profiles_dir: Path = PROFILES_DIR) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Read and schema-check every profile. Returns ({relative path: profile}, compute capability table)."""
    if not profiles_dir.is_dir():
        raise CatalogError(f"profile sources not found at {profiles_dir}")
    schema = json.loads((profiles_dir / "schema.json").read_text(encoding="utf-8"))
    capabilities = load_capabilities(profiles_dir)
    problems: list[str] = []
    profiles: dict[str, dict[str, Any]] = {}
    for path in sorted(profiles_dir.glob("*/*.yaml")):
        rel = str(path.relative_to(profiles_dir))
        doc = _load_yaml(path)
        errs = schema_errors(doc, schema)
        problems.extend(f"{rel}: {e}" for e in errs)
        if not errs:
            profiles[rel] = doc
    if problems:
        raise CatalogError(f"{len(problems)} schema violation(s) in {profiles_dir}", problems)
    return profiles, capabilities


def derived_cuda_total(nvml_total: int, segment: str) -> int:
    """CUDA's totalGlobalMem where no real board was measured.

    On data-center and workstation boards the driver keeps part of the framebuffer, so the runtime reports
    less than NVML: H100 80GB HBM3 81559 -> 81090 MiB, H200 143771 -> 143155.94 (measured), RTX 6000 Ada 49140 -> 48622.
    About 0.58% (at least 256 MiB) matches those within 0.2%. GeForce boards give nearly all of it to CUDA
    (RTX 4090: 24564 -> 24563 MiB). Derived values are flagged `cuda_total_derived` in the compiled catalog.
    """
    mib = 1 << 20
    reserve = mib if segment == "consumer" else max(256 * mib, nvml_total * 58 // 10000)
    return (nvml_total - reserve) // mib * mib


def _achieved_rates(doc: dict[str, Any]) -> tuple[float, float]:
    """(TFLOP/s of the GEMMs training runs: bf16, else fp16, else fp32; GB/s of a device-to-device copy) the board
    reaches: its data sheet's peaks times the roofline's efficiency factors (fakegpu/profiles/efficiency.yaml, the one
    home of those shares: the H200 capture's for Hopper, each other architecture's own or its fallback's)."""
    from fakegpu.profiles.efficiency import load

    eff, arch, tflops = load(), doc["architecture"], doc["tflops"]
    dtype = next(d for d in ("bf16", "fp16", "fp32") if tflops.get(d))
    gemm = tflops[dtype] * eff.factor(arch, f"gemm.compute.{dtype}").expected
    return gemm, doc["memory"].get("bandwidth_gb_s", 0) * eff.factor(arch, "memory.copy").expected


def telemetry(doc: dict[str, Any], load_model: dict[str, Any]) -> dict[str, Any]:
    """The load model's figures for one board (native/nvml/model.c reads them as telemetry.*): the profile's own
    where it has them (the H200's, from a real board), else load_model.yaml's rules from the power limit (named in
    `derived`) or its defaults, measured on no board (named in `defaulted`). The curves' shape (load_model.yaml's
    `model`) is the same for every board and reaches C through the generated contract (tools/gen_contract.py)."""
    model, rule, default = load_model["model"], load_model["derive"], load_model["defaults"]
    power, clocks, thermal = doc["power"], doc["clocks_mhz"], doc.get("thermal", {})
    limit = power["default_limit_w"]
    derived: list[str] = []

    defaulted: list[str] = []

    def given(section: dict[str, Any], key: str, name: str, fallback: float, rule: bool = True) -> float:
        if key in section:
            return section[key]
        (derived if rule else defaulted).append(name)
        return fallback

    gemm_tflops, copy_gb_s = _achieved_rates(doc)
    idle_w = given(power, "idle_w", "idle_w", round(limit * rule["idle_w_per_limit_w"], 1))
    out = {
        "idle_w": idle_w,
        "active_idle_w": given(power, "active_idle_w", "active_idle_w",
                               round(idle_w + limit * rule["active_idle_w_above_idle_per_limit_w"], 1)),
        "compute_w": given(power, "compute_w", "compute_w", round(limit * rule["compute_w_per_limit_w"], 1)),
        "memory_w": given(power, "memory_w", "memory_w", round(limit * rule["memory_w_per_limit_w"], 1)),
        "cap_w": round(limit * model["cap_fraction"], 1),
        "video_idle_mhz": given(clocks, "video_idle", "video_idle_mhz", default["video_idle_mhz"], rule=False),
        "idle_c": given(thermal, "idle_c", "idle_c", default["idle_c_fans" if doc.get("fans") else "idle_c_fanless"],
                        rule=False),
        "compute_c_per_w": given(thermal, "compute_c_per_w", "compute_c_per_w",
                                 round(rule["compute_c_at_limit"] / limit, 5)),
        "memory_c_per_w": given(thermal, "memory_c_per_w", "memory_c_per_w",
                                round(rule["memory_c_at_limit"] / limit, 5)),
        "gemm_tflops": round(gemm_tflops, 2),
        "copy_gb_s": round(copy_gb_s, 1),
        "derived": derived,
        "defaulted": defaulted,
    }
    if not out["idle_w"] <= out["active_idle_w"] < min(out["memory_w"], out["compute_w"], out["cap_w"]):
        raise CatalogError(f"{doc['id']}: telemetry must satisfy idle <= active idle < memory, compute and cap draw",
                           [f"{k}={out[k]}" for k in ("idle_w", "active_idle_w", "memory_w", "compute_w", "cap_w")])
    return out


def compile_catalog(profiles_dir: Path = PROFILES_DIR) -> dict[str, Any]:
    """Validate the sources and return the compiled catalog document."""
    sources, capabilities = load_sources(profiles_dir)
    problems = check_catalog(sources, capabilities)
    if problems:
        raise CatalogError(f"{len(problems)} invariant violation(s) in {profiles_dir}", problems)
    load_model = _load_yaml(profiles_dir / "load_model.yaml")
    compiled = []
    for doc in sources.values():
        merged = json.loads(json.dumps(doc))  # deep copy through JSON: also proves it serialises
        facts = capability_facts(capabilities[doc["compute_capability"]])
        facts["sm_limits"].update(doc.get("sm_limits", {}))
        merged.update(facts)
        memory = merged["memory"]
        memory["cuda_total_derived"] = "cuda_total_bytes" not in memory
        memory.setdefault("cuda_total_bytes", derived_cuda_total(memory["total_bytes"], doc["segment"]))
        merged["telemetry"] = telemetry(doc, load_model)
        compiled.append(merged)
    compiled.sort(key=lambda p: p["id"])
    return {"format": CATALOG_FORMAT, "profiles": compiled}


def render(catalog: dict[str, Any]) -> str:
    return json.dumps(catalog, indent=1, sort_keys=True) + "\n"


def outputs(catalog: dict[str, Any], json_path: Path) -> dict[Path, str]:
    """The compiled files: the JSON catalog and, beside it, the same catalog as a table for C readers, and the
    built-in workspace profiles as JSON (fakecuda reads them in the user's interpreter, which may lack PyYAML)."""
    from fakegpu.profiles import workspace_profiles
    from fakegpu.profiles.table import render_catalog_table

    table = render_catalog_table(Profile(p) for p in catalog["profiles"])
    return {json_path: render(catalog), json_path.with_suffix(".tbl"): table,
            json_path.with_name(workspace_profiles.COMPILED.name): workspace_profiles.compiled_text()}


def stale_outputs(catalog: dict[str, Any], json_path: Path = Path(COMPILED_CATALOG)) -> list[Path]:
    """The compiled files that differ from what the sources compile to."""
    return [p for p, text in outputs(catalog, json_path).items()
            if not p.exists() or p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the compiled catalog is stale")
    parser.add_argument("--output", type=Path, default=COMPILED_CATALOG, help="the JSON catalog; .tbl goes beside")
    args = parser.parse_args(argv)
    try:
        catalog = compile_catalog()
    except CatalogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    count = len(catalog["profiles"])
    if args.check:
        stale = stale_outputs(catalog, args.output)
        if stale:
            print(f"error: stale compiled catalog {', '.join(map(str, stale))}; run `make catalog`", file=sys.stderr)
            return 1
        print(f"catalog ok: {count} profiles, compiled files up to date")
        return 0
    files = outputs(catalog, args.output)
    for path, text in files.items():
        write_atomic(path, text)
    print(f"wrote {', '.join(str(p) for p in files)}: {count} profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
