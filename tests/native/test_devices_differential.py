"""The C device reader and fakegpu/devices must agree: same grammar, same SHA-256 identities, same table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fakegpu.devices.spec import resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.errors import InvalidDeviceSpec

from .conftest import DEVTOOL, NativeEnv

pytestmark = pytest.mark.native

SPECS = [
    "a100",
    "a100:4",
    "A100-SXM4-80GB:2",
    "NVIDIA A100-SXM4-80GB",
    " a100 : 3 , h100:2 ",
    "l4-24gb,a100:1,rtx4090:2",
    "a100_sxm4_80gb:1",
    "h100:9",
    "a100:64",
    "a100:007",
]
SEEDS = [None, "0", "1", "node-3", "rank 7"]


def c_devices(native: NativeEnv, **env: str) -> list[list[str]]:
    out = subprocess.run([str(DEVTOOL)], capture_output=True, text=True, env=native.env(**env), timeout=30)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


def py_devices(spec: str, seed: str | None, catalog) -> list[list[str]]:
    return [
        [str(d.index), d.uuid, d.serial, d.pci_bus_id, d.profile.name, d.profile.id, str(d.profile.memory_total_bytes)]
        for d in resolve_devices(spec, seed if seed is not None else "0", catalog)
    ]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spec", SPECS)
def test_spec_resolution_matches_python(native: NativeEnv, test_catalog, spec: str, seed: str | None) -> None:
    env = {"FAKEGPU_DEVICES": spec}
    if seed is not None:
        env["FAKEGPU_SEED"] = seed
    assert c_devices(native, **env) == py_devices(spec, seed, test_catalog[1])


@pytest.mark.parametrize("spec", ["a100:0", "a100:65", "a100:2,a100:63", "nope", "a100,", ",a100", "a100:x",
                                  "a100:-1", ":2", "a1$00", "a100:1:2"])
def test_bad_specs_are_rejected_by_both(native: NativeEnv, test_catalog, spec: str) -> None:
    with pytest.raises(InvalidDeviceSpec):
        resolve_devices(spec, "0", test_catalog[1])
    out = subprocess.run([str(DEVTOOL)], capture_output=True, text=True,
                         env=native.env(FAKEGPU_DEVICES=spec), timeout=30)
    assert out.returncode == 1
    assert "FAKEGPU_DEVICES" in out.stderr


@pytest.mark.parametrize("spec", ["", "  ", "void", "none", "NONE"])
def test_no_devices_requested(native: NativeEnv, spec: str) -> None:
    assert c_devices(native, FAKEGPU_DEVICES=spec) == []


def test_device_table_written_by_python_reads_back(native: NativeEnv, test_catalog, tmp_path: Path) -> None:
    devices = resolve_devices("h100:3,a100:2", "table-seed", test_catalog[1])
    table = tmp_path / "devices.tbl"
    write_table(table, devices, "h100:3,a100:2", "table-seed")
    # The table wins over FAKEGPU_DEVICES.
    got = c_devices(native, FAKEGPU_DEVICE_TABLE=str(table), FAKEGPU_DEVICES="a100:1")
    assert got == py_devices("h100:3,a100:2", "table-seed", test_catalog[1])


MIG_SPECS = [
    "a100:mig=3g.40gb+2g.20gb+1g.10gb",
    "a100:2:mig=3g.40gb+2g.20gb+2g.20gb,h100",
    "h100,a100:mig=1g.10gb*7",
    "a100:mig=1g.10gb+me@3+1g.10gb*6",
    "a100:mig=4g.40gb+3g.40gb@4",
    "a100:mig=MIG 7g.80gb",
    "a100:mig=9+14+19+19",
    "a100:mig=1g.20gb*4",
]


def py_mig_devices(spec: str, catalog) -> list[list[str]]:
    return mig_rows(resolve_devices(spec, "0", catalog))


def mig_rows(devices) -> list[list[str]]:
    rows = []
    for d in devices:
        rows.append([str(d.index), d.uuid, d.serial, d.pci_bus_id, d.profile.name, d.profile.id,
                     str(d.profile.memory_total_bytes)])
        rows.extend(["mig", str(d.index), str(m.index), str(m.gi_id), str(m.start), m.profile.name, m.uuid]
                    for m in d.mig or ())
    return rows


@pytest.mark.parametrize("spec", MIG_SPECS)
def test_mig_layouts_place_alike(native: NativeEnv, test_catalog, spec: str, tmp_path: Path) -> None:
    """The same grammar, placement search, GPU instance IDs and MIG UUIDs, from the spec and from a table."""
    want = py_mig_devices(spec, test_catalog[1])
    assert any(row[0] == "mig" for row in want)
    assert c_devices(native, FAKEGPU_DEVICES=spec) == want
    table = tmp_path / "devices.tbl"
    write_table(table, resolve_devices(spec, "0", test_catalog[1]), spec, "0")
    assert c_devices(native, FAKEGPU_DEVICE_TABLE=str(table)) == want


@pytest.mark.parametrize("spec", ["a100:mig=3g.40gb+3g.40gb+1g.10gb", "a100:mig=1g.10gb*8", "a100:mig=3g.4gb",
                                  "a100:mig=", "a100:mig=3g.40gb@2", "a100:mig=1g.10gb*9", "a100:mig=1g.10gb@1*2",
                                  "t4:mig=1g.5gb", "a100:mig=7g.80gb+1g.10gb", "a100:mig=1g.10gb+me*2",
                                  "a100:1:2:mig=1g.10gb"])
def test_bad_mig_layouts_are_rejected_by_both(native: NativeEnv, test_catalog, spec: str) -> None:
    with pytest.raises(InvalidDeviceSpec):
        resolve_devices(spec, "0", test_catalog[1])
    out = subprocess.run([str(DEVTOOL)], capture_output=True, text=True,
                         env=native.env(FAKEGPU_DEVICES=spec), timeout=30)
    assert out.returncode == 1, out.stdout
    assert "FAKEGPU_DEVICES" in out.stderr


CUDA_SPEC = "a100:mig=3g.40gb+2g.20gb+1g.10gb,h100,a100"


def py_cuda_view(visible: str | None, catalog) -> list[list[str]]:
    from fakegpu.devices.cuda_view import cuda_view

    return [[str(d.index), d.uuid, d.profile.name, str(board), str(d.profile.cuda_total_bytes),
             str(d.profile.data["sm_count"])]
            for d, board in cuda_view(resolve_devices(CUDA_SPEC, "0", catalog), visible)]


def _visible_cases(catalog) -> list[str | None]:
    devices = resolve_devices(CUDA_SPEC, "0", catalog)
    mig = devices[0].mig
    return [None, "", "0", "1,0", "2,1", "1,1,2", "0,7,2", "x,1", "1, 2", "0001", devices[1].uuid,
            devices[1].uuid[:12], "GPU-", mig[1].uuid, mig[2].uuid[:10] + "," + devices[2].uuid, mig[1].uuid.upper(),
            f"{mig[0].uuid},0", "MIG-"]


def test_cuda_view_matches_python(native: NativeEnv, test_catalog) -> None:
    """CUDA_VISIBLE_DEVICES and MIG expansion: the same devices, order, names, memory, SMs and boards in C."""
    for visible in _visible_cases(test_catalog[1]):
        env = {"FAKEGPU_DEVICES": CUDA_SPEC}
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        full = native.env(**env)
        if visible is None:
            full.pop("CUDA_VISIBLE_DEVICES", None)
        out = subprocess.run([str(DEVTOOL), "--cuda"], capture_output=True, text=True, env=full, timeout=30)
        assert out.returncode == 0, out.stderr
        got = [line.split("\t") for line in out.stdout.splitlines()]
        assert got == py_cuda_view(visible, test_catalog[1]), visible


def test_cuda_view_rules(test_catalog) -> None:
    rows = {v: [r[2] for r in py_cuda_view(v, test_catalog[1])] for v in (None, "", "1,0", "0,7,2", "1,1,2")}
    a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
    assert rows[None] == [f"{a100} MIG 3g.40gb", f"{a100} MIG 2g.20gb", f"{a100} MIG 1g.10gb", h100, a100]
    assert rows[""] == []
    assert rows["1,0"] == [h100, f"{a100} MIG 3g.40gb", f"{a100} MIG 2g.20gb", f"{a100} MIG 1g.10gb"]
    assert rows["0,7,2"] == rows[None][:3]  # enumeration stops at the first entry that names nothing
    assert rows["1,1,2"] == [h100]  # ... or repeats one


SELECT_SPEC = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb,h100,a100:mig=1g.10gb*7"


def _selections(catalog) -> list[str]:
    host = resolve_devices(SELECT_SPEC, "0", catalog)
    return ["0:1", host[0].mig[1].uuid, "0", host[2].uuid, "2:3,1,0:2", f"2:6,{host[0].mig[0].uuid},0:2,0"]


def test_selected_tables_read_back_alike(native: NativeEnv, test_catalog, tmp_path: Path) -> None:
    """NVIDIA_VISIBLE_DEVICES's MIG selections as the container's table holds them (an empty mig.layout for a
    MIG-mode GPU named whole): C reads the same MIG devices, and CUDA in C enumerates what cuda_view does."""
    from fakegpu.devices.cuda_view import cuda_view
    from fakegpu.devices.select import select_devices

    catalog = test_catalog[1]
    for visible in _selections(catalog):
        entries = visible.split(",")
        devices = select_devices(resolve_devices(SELECT_SPEC, "0", catalog), entries, SELECT_SPEC)
        table = tmp_path / "devices.tbl"
        write_table(table, devices, SELECT_SPEC, "0", entries)
        assert c_devices(native, FAKEGPU_DEVICE_TABLE=str(table)) == mig_rows(devices), visible
        full = native.env(FAKEGPU_DEVICE_TABLE=str(table))
        full.pop("CUDA_VISIBLE_DEVICES", None)
        out = subprocess.run([str(DEVTOOL), "--cuda"], capture_output=True, text=True, env=full, timeout=30)
        assert out.returncode == 0, out.stderr
        want = [[str(d.index), d.uuid, d.profile.name, str(board), str(d.profile.cuda_total_bytes),
                 str(d.profile.data["sm_count"])] for d, board in cuda_view(devices, None)]
        assert [line.split("\t") for line in out.stdout.splitlines()] == want, visible


def test_a_mig_gpu_named_whole_is_no_cuda_device(native: NativeEnv, test_catalog, tmp_path: Path) -> None:
    from fakegpu.devices.select import select_devices

    devices = select_devices(resolve_devices(SELECT_SPEC, "0", test_catalog[1]), ["0", "1"], SELECT_SPEC)
    table = tmp_path / "devices.tbl"
    write_table(table, devices, SELECT_SPEC, "0", ["0", "1"])
    assert "\tmig.layout=\t" in table.read_text()
    full = native.env(FAKEGPU_DEVICE_TABLE=str(table))
    full.pop("CUDA_VISIBLE_DEVICES", None)
    out = subprocess.run([str(DEVTOOL), "--cuda"], capture_output=True, text=True, env=full, timeout=30)
    assert out.returncode == 0, out.stderr
    assert [line.split("\t")[2] for line in out.stdout.splitlines()] == ["NVIDIA H100 80GB HBM3"]
