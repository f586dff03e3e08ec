"""The GPU catalog: every profile passes the schema and the invariants, and the facts we pin are right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fakegpu.errors import CatalogError, UnknownProfile
from fakegpu.profiles import load_catalog
from fakegpu.profiles.compile import PROFILES_DIR, compile_catalog, load_capabilities, schema_errors, stale_outputs
from fakegpu.profiles.invariants import check_catalog

MIB = 1 << 20
SCHEMA = json.loads((PROFILES_DIR / "schema.json").read_text())
CAPABILITIES = load_capabilities()
SOURCES = sorted(PROFILES_DIR.glob("*/*.yaml"))
BAD_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "profiles" / "bad"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_profile_passes_schema(path: Path) -> None:
    assert schema_errors(yaml.safe_load(path.read_text()), SCHEMA) == []


def test_catalog_invariants_hold() -> None:
    docs = {str(p.relative_to(PROFILES_DIR)): yaml.safe_load(p.read_text()) for p in SOURCES}
    assert check_catalog(docs, CAPABILITIES) == []


def test_compiled_catalog_is_up_to_date() -> None:
    assert stale_outputs(compile_catalog()) == [], "run `make catalog`"


def test_catalog_covers_every_generation_and_segment() -> None:
    catalog = load_catalog()
    assert len(catalog) >= 82
    assert {p.architecture for p in catalog} == {
        "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"}
    assert {p.segment for p in catalog} == {"consumer", "workstation", "datacenter", "embedded"}


@pytest.mark.parametrize("name", [
    "p100", "v100", "v100-32gb", "t4", "a10", "a16", "a30", "a40", "a100", "a100-40gb", "a100-pcie", "l4", "l40",
    "l40s", "h100", "h100-pcie", "h100-nvl", "h20", "h200", "gh200", "b200", "b300", "gb200", "rtx4090",
    "rtx6000-ada", "rtx-pro-6000", "jetson-agx-orin",
])
def test_named_boards_are_in_the_catalog(name: str) -> None:
    assert load_catalog().find(name) is not None, f"{name} missing"


@pytest.mark.parametrize(("name", "board", "nvml_mib"), [
    ("h100", "NVIDIA H100 80GB HBM3", 81559),
    ("a100", "NVIDIA A100-SXM4-80GB", 81920),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960),
    ("h200", "NVIDIA H200", 143771),
    ("b200", "NVIDIA B200", 183359),
])
def test_memory_totals_match_real_boards(name: str, board: str, nvml_mib: int) -> None:
    p = load_catalog().get(name)
    assert p.name == board
    assert p.memory_total_bytes == nvml_mib * MIB
    assert p.cuda_total_bytes < p.memory_total_bytes


def test_every_compiled_profile_carries_full_sm_limits_and_a_source() -> None:
    for p in load_catalog():
        limits = p.data["sm_limits"]
        assert limits["warp_size"] == 32
        assert limits["max_threads_per_block"] == 1024
        assert limits["shared_memory_per_block_bytes"] <= limits["shared_memory_per_block_optin_bytes"]
        assert p.data["source"]["specs"]


def test_compute_capability_table_is_consistent() -> None:
    for cc, row in CAPABILITIES.items():
        assert row["shared_memory_per_block_optin_bytes"] <= row["shared_memory_per_sm_bytes"], cc
        assert row["max_threads_per_sm"] % 32 == 0, cc


def test_lookup_ignores_case_spacing_and_vendor_prefix() -> None:
    catalog = load_catalog()
    a100 = catalog.get("a100")
    assert catalog.get("A100") is a100
    assert catalog.get("NVIDIA A100-SXM4-80GB") is a100
    assert catalog.get("a100_sxm4_80gb") is a100


def test_unknown_profile_suggests_close_names() -> None:
    with pytest.raises(UnknownProfile) as err:
        load_catalog().get("a10O")
    assert err.value.suggestions[0] == "a100"


@pytest.mark.parametrize("fixture", sorted(BAD_FIXTURES.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_profiles_are_rejected_with_the_reason(fixture: Path, tmp_path: Path) -> None:
    # Each bad fixture is dropped into a copy of the catalog sources; its first line says what must be reported.
    expected = fixture.read_text().splitlines()[0].removeprefix("# expect: ").strip()
    root = tmp_path / "profiles"
    (root / "ampere").mkdir(parents=True)
    for name in ("schema.json", "compute_capabilities.yaml"):
        (root / name).write_text((PROFILES_DIR / name).read_text())
    (root / "ampere" / "a100-sxm4-80gb.yaml").write_text((PROFILES_DIR / "ampere" / "a100-sxm4-80gb.yaml").read_text())
    (root / "ampere" / fixture.name).write_text(fixture.read_text())
    with pytest.raises(CatalogError) as err:
        compile_catalog(root)
    assert expected in str(err.value)


def test_every_compute_capability_row_carries_the_same_cuda_facts() -> None:
    import copy

    from fakegpu.profiles.invariants import check_capabilities

    assert check_capabilities(CAPABILITIES) == []
    broken = copy.deepcopy(CAPABILITIES)
    del broken["8.0"]["attributes"]["memory_pools_supported"]
    broken["9.0"]["l2_persisting"]["max_fraction"] = 1.5
    del broken["7.5"]["textures"]
    problems = "\n".join(check_capabilities(broken))
    assert "8.0: attributes keys differ" in problems
    assert "9.0: l2_persisting.max_fraction = 1.5 is out of range" in problems
    assert "7.5: textures is missing" in problems


def test_compiled_profiles_carry_their_compute_capabilitys_cuda_facts() -> None:
    h200 = load_catalog().get("h200").data
    assert h200["cuda_attributes"]["maximum_texture1d_mipmapped_width"] == 32768
    assert h200["cuda_attributes"]["handle_type_fabric_supported"] == 1
    assert h200["l2_persisting"] == {"max_fraction": 0.625, "default_fraction": 0.1875}
    assert "dev_runtime_sync_depth" not in h200["context_limits"]  # none from cc 9.0 on
    assert load_catalog().get("a100").data["context_limits"]["dev_runtime_sync_depth"] == 2
