"""nvidia-smi on a board in MIG mode: the MIG device lines of -L, `nvidia-smi mig`'s listings and refusals, the
default view's MIG devices table and -q's MIG sections, checked against what pynvml and fakegpu/devices/mig.py
say of the same spec, and against the layouts of real captures (cited where a fact comes from one)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from fakegpu.devices.mig import MigBoard, remaining_capacity
from fakegpu.devices.spec import resolve_devices

from .conftest import NativeEnv

pytestmark = pytest.mark.native

A100_LAYOUT = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"
# The layout real A100/H100 nodes call all-balanced; on the H100 table it places 3g.40gb at slice 4.
H100_LAYOUT = "h100:1:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb"
PYNVML_MIG = """
import json, pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    migs = []
    try:
        mode = n.nvmlDeviceGetMigMode(h)[0]
    except n.NVMLError_NotSupported:
        mode = 0
    if mode:
        for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except n.NVMLError_NotFound:
                continue
            migs.append({"uuid": n.nvmlDeviceGetUUID(m), "gi": n.nvmlDeviceGetGpuInstanceId(m),
                         "name": n.nvmlDeviceGetName(m), "total": n.nvmlDeviceGetMemoryInfo(m).total})
    out.append({"uuid": n.nvmlDeviceGetUUID(h), "migs": migs})
print(json.dumps(out))
"""


def pynvml_migs(native: NativeEnv, spec: str) -> list[dict]:
    out = native.python(PYNVML_MIG, devices=spec)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def table_rows(text: str) -> list[list[str]]:
    """The data rows of a `nvidia-smi mig` table: its cells split on blanks, borders dropped."""
    return [line.strip("|").split() for line in text.splitlines() if re.match(r"^\|\s+\d+\s", line)]


@pytest.fixture
def a100(native: NativeEnv, test_catalog):
    return resolve_devices(A100_LAYOUT, "0", test_catalog[1])[0]


@pytest.mark.parametrize("spec", [A100_LAYOUT + ",l4-24gb", H100_LAYOUT])
def test_list_names_each_mig_device_with_the_uuid_pynvml_reports(native: NativeEnv, spec: str) -> None:
    out = native.smi("-L", devices=spec)
    assert out.returncode == 0, out.stdout
    want: list[str] = []
    for i, board in enumerate(pynvml_migs(native, spec)):
        assert any(line.startswith(f"GPU {i}: ") and board["uuid"] in line for line in out.stdout.splitlines())
        # "  MIG 3g.40gb     Device  0: (UUID: MIG-...)": the profile in 16 columns, the index in two (real -L
        # captures from 515.86.01 A100 80GB to 580.105.08 RTX PRO 6000 agree on this spacing).
        want += [f"  {'MIG ' + m['name'].split(' MIG ')[1]:<16}Device {k:2}: (UUID: {m['uuid']})"
                 for k, m in enumerate(board["migs"])]
    got = [line for line in out.stdout.splitlines() if line.startswith("  MIG ")]
    assert got == want and len(got) == (3 if spec.startswith("a100") else 4)
    assert all(line.split("UUID: ")[1].startswith("MIG-") for line in got)


def test_list_of_a_board_without_mig_is_unchanged(native: NativeEnv) -> None:
    out = native.smi("-L", devices="a100:2")
    assert out.returncode == 0 and "MIG" not in out.stdout
    assert len(out.stdout.splitlines()) == 2


@pytest.mark.parametrize("spec", [A100_LAYOUT, H100_LAYOUT])
def test_lgi_lists_the_layouts_gpu_instances(native: NativeEnv, test_catalog, spec: str) -> None:
    out = native.smi("mig", "-lgi", devices=spec)
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    # R515-R580 lay -lgi out 57 columns wide on A100/H100 (its name column 16).
    assert {len(line) for line in lines} == {57} and lines[1].startswith("| GPU instances:")
    board = resolve_devices(spec, "0", test_catalog[1])[0]
    want = sorted(((m.profile.size, m.profile.compute_slices, m.profile.memory_mib), m.gi_id,
                   ["0", "MIG", m.profile.name, str(m.profile.id), str(m.gi_id), f"{m.start}:{m.profile.size}"])
                  for m in board.mig)
    # Listed by profile, smallest first, then by instance ID, as real -lgi lists a 4g+2g+1g A100 (1g first).
    assert table_rows(out.stdout) == [row for _, _, row in want]


def test_lgi_facts_of_the_a100_layout(native: NativeEnv) -> None:
    rows = table_rows(native.smi("mig", "-lgi", devices=A100_LAYOUT).stdout)
    # fakegpu places 3g.40gb first fit at slice 0 (GPU instance 1), 2g.20gb at 4 (5), 1g.10gb at 6 (13): the IDs a
    # real A100 80GB gives `-cgi 9,14,19` (ztouchnetworks/k8s-dra-driver-gpu README.md lists GI 1, 5, 13, 14).
    assert {r[2]: (r[4], r[5]) for r in rows} == {"3g.40gb": ("1", "0:4"), "2g.20gb": ("5", "4:2"),
                                                  "1g.10gb": ("13", "6:1")}


def test_lgi_facts_of_the_h100_layout(native: NativeEnv) -> None:
    rows = table_rows(native.smi("mig", "-lgi", devices=H100_LAYOUT).stdout)
    # With the two 1g.10gb the first fit moves 3g.40gb to slice 4 (GPU instance 2).
    assert [(r[2], r[4], r[5]) for r in rows] == [("1g.10gb", "9", "2:1"), ("1g.10gb", "10", "3:1"),
                                                  ("2g.20gb", "3", "0:2"), ("3g.40gb", "2", "4:4")]


def test_lci_lists_one_spanning_compute_instance_per_gpu_instance(native: NativeEnv, a100) -> None:
    out = native.smi("mig", "-lci", devices=A100_LAYOUT)
    assert out.returncode == 0 and {len(line) for line in out.stdout.splitlines()} == {70}
    # Compute instance profile 2 for a 3g.40gb, placed 0:4 over its GPU instance (an R5xx -lci of two 3g.40gb
    # shows "MIG 3g.40gb 2 0 0:4"); 1 for 2g.20gb, 0 for 1g.10gb.
    want = {str(m.gi_id): [m.profile.name, {1: "0", 2: "1", 3: "2"}[m.profile.compute_slices], "0",
                           f"0:{m.profile.size}"] for m in a100.mig}
    assert {r[1]: r[3:] for r in table_rows(out.stdout)} == want
    only = table_rows(native.smi("mig", "-lci", "-gi", "5", devices=A100_LAYOUT).stdout)
    assert [r[1] for r in only] == ["5"]


def test_lgip_counts_what_still_fits_beside_the_layout(native: NativeEnv, a100) -> None:
    out = native.smi("mig", "-lgip", devices=A100_LAYOUT)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert {len(line) for line in lines} == {79}
    board = MigBoard.of(a100.profile)
    rows = [r for r in table_rows(out.stdout) if r[1] == "MIG"]
    # Real A100 80GB -lgip order: 1g.10gb (19), 1g.10gb+me (20), ..., 3g.40gb (9), 4g.40gb (5), 7g.80gb (0).
    assert [r[3] for r in rows] == ["19", "20", "15", "14", "9", "5", "0"]
    for r in rows:
        p = board.find(r[2])
        free = remaining_capacity(a100.mig, board, p)
        assert r[4] == f"{free}/{p.instances}"
        assert r[5] == f"{p.memory_mib / 1024:.2f}" and r[6] == ("Yes" if p.p2p else "No")
        assert r[7:10] == [str(p.sm_count), str(p.decoders), str(p.encoders)]
    # A real A100 80GB lists 3g.40gb as "39.25 GiB, 42 SM, 2 DEC" over "3 CE".
    three = lines[next(i for i, line in enumerate(lines) if "MIG 3g.40gb" in line):][:2]
    assert three[0].split()[6:10] == ["39.25", "No", "42", "2"] and three[1].split()[1] == "3"
    assert {r[2]: r[4] for r in rows}["3g.40gb"] == "0/2"  # both halves are taken


def test_lgipp_lists_each_profiles_placements(native: NativeEnv, a100) -> None:
    out = native.smi("mig", "-lgipp", devices=A100_LAYOUT)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    # "GPU  0 Profile ID  9 Placements: {0,4}:4", and "Placement :" for a single one (real -lgipp captures).
    assert "GPU  0 Profile ID  9 Placements: {0,4}:4" in lines
    assert "GPU  0 Profile ID  0 Placement : {0}:8" in lines
    assert len(lines) == len(MigBoard.of(a100.profile).profiles)


def test_lcip_stars_the_default_profile(native: NativeEnv) -> None:
    out = native.smi("mig", "-lcip", "-gi", "1", devices=A100_LAYOUT)
    assert out.returncode == 0 and {len(line) for line in out.stdout.splitlines()} == {88}
    rows = [r for r in table_rows(out.stdout) if "MIG" in r]
    # A real 3g.40gb GPU instance offers 1c.3g.40gb (0), 2c.3g.40gb (1) and 3g.40gb (2*), 14/28/42 SMs.
    assert [(r[3], r[4], r[6]) for r in rows] == [("1c.3g.40gb", "0", "14"), ("2c.3g.40gb", "1", "28"),
                                                  ("3g.40gb", "2*", "42")]
    assert [r[5] for r in rows] == ["0/3", "0/1", "0/1"]  # the spanning instance leaves no room


@pytest.mark.parametrize(("args", "line1", "line2"), [
    (("-cgi", "9,19", "-C"), "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Permissions",
     "Failed to create GPU instances: Insufficient Permissions"),
    (("-dgi", "-gi", "5"), "Unable to destroy GPU instance ID  5 from GPU  0: Insufficient Permissions",
     "Failed to destroy GPU instances: Insufficient Permissions"),
    (("-cci", "-gi", "1"), "Unable to create a compute instance on GPU  0 GPU instance ID  1 using profile 2: "
     "Insufficient Permissions", "Failed to create compute instances: Insufficient Permissions"),
    (("-dci", "-gi", "13", "-ci", "0"), "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID 13: "
     "Insufficient Permissions", "Failed to destroy compute instances: Insufficient Permissions"),
])
def test_changes_are_refused_as_without_the_capability(native: NativeEnv, args, line1: str, line2: str) -> None:
    # A driver's refusal: "Unable to create a GPU instance on GPU  0 using profile 14: <reason>" then
    # "Failed to create GPU instances: <reason>" (580.105.08), the reason NVML's NO_PERMISSION, status 4.
    out = native.smi("mig", *args, devices=A100_LAYOUT)
    assert (out.returncode, out.stdout.splitlines()) == (4, [line1, line2]), out.stdout


def test_an_unknown_profile_is_invalid(native: NativeEnv) -> None:
    # A profile the board lacks: "... using profile 7g.40gb: Invalid Argument" on a real A100 80GB.
    out = native.smi("mig", "-cgi", "7g.40gb", devices=A100_LAYOUT)
    assert out.returncode == 2
    assert out.stdout.splitlines()[0].endswith("using profile 7g.40gb: Invalid Argument")


def test_mig_reports_skip_gpus_without_mig_mode(native: NativeEnv) -> None:
    spec = A100_LAYOUT + ",h100"
    out = native.smi("mig", "-lgi", "-i", "1", devices=spec)
    assert (out.returncode, out.stdout) == (0, "No MIG-enabled devices found.\n")  # status 0 on 580 (a real H200)
    rows = table_rows(native.smi("mig", "-lgi", devices=spec).stdout)
    assert {r[0] for r in rows} == {"0"} and len(rows) == 3


def default_view_mig_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """Each MIG device's two lines of the default view (framebuffer, BAR1), split into cells."""
    lines = text.splitlines()
    body = lines[lines.index(next(line for line in lines if line.startswith("| MIG devices:"))):]
    return [(line.replace("|", " ").split(), body[i + 1].replace("|", " ").split())
            for i, line in enumerate(body) if re.match(r"^\|\s+\d+\s+\d+\s+\d+\s+\d+\s+\|", line)]


def test_default_view_shows_the_mig_devices_table(native: NativeEnv, a100) -> None:
    out = native.smi(devices=A100_LAYOUT + ",l4-24gb")
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()[1:]
    assert all(len(line) == 91 for line in lines if line.strip())
    gpu0 = lines[lines.index(next(line for line in lines if "NVIDIA A100-SXM4-80GB" in line)):][:3]
    # A MIG-mode A100 shows "On" for its ECC and "Enabled" under MIG M. (the R570 capture of
    # ztouchnetworks/k8s-dra-driver-gpu README.md); the L4 beside it keeps its error count.
    assert gpu0[0].split("|")[3].strip() == "On" and gpu0[2].split("|")[3].strip() == "Enabled"
    assert lines.index(next(line for line in lines if line.startswith("| MIG devices:"))) < \
        lines.index(next(line for line in lines if line.startswith("| Processes:")))
    rows = default_view_mig_rows(out.stdout)
    # GPU, GI, CI, MIG dev; used / total MiB; SM, Unc; CE ENC DEC OFA JPG; then BAR1 used / total. The R570
    # capture of the same A100 80GB layout: 40192/19968/9728 MiB, BAR1 65535/32767/16383 MiB, 42/28/14 SMs,
    # CE 3/2/1, DEC 2/1/0.
    lgi = {r[4] for r in table_rows(native.smi("mig", "-lgi", devices=A100_LAYOUT).stdout)}
    assert [r[0][1] for r in rows] == [str(m.gi_id) for m in a100.mig] and {r[0][1] for r in rows} == lgi
    assert [(r[0][0], r[0][2], r[0][3]) for r in rows] == [("0", "0", str(m.index)) for m in a100.mig]
    assert [r[0][6] for r in rows] == ["40192MiB", "19968MiB", "9728MiB"]
    assert [r[0][6] for r in rows] == [f"{m.profile.memory_mib}MiB" for m in a100.mig]
    assert [r[1][2] for r in rows] == ["65535MiB", "32767MiB", "16383MiB"]
    assert [r[0][7:] for r in rows] == [["42", "0", "3", "0", "2", "0", "0"], ["28", "0", "2", "0", "1", "0", "0"],
                                        ["14", "0", "1", "0", "0", "0", "0"]]


def test_default_view_of_a_board_without_mig_has_no_mig_table(native: NativeEnv) -> None:
    out = native.smi(devices="a100:2")
    assert out.returncode == 0 and "MIG devices" not in out.stdout
    assert "Disabled" in out.stdout


def test_query_reports_mig_mode_and_devices(native: NativeEnv, a100) -> None:
    out = native.smi("-q", devices=A100_LAYOUT)
    assert out.returncode == 0
    text = out.stdout
    assert re.search(r"    MIG Mode\n        Current\s+: Enabled\n        Pending\s+: Enabled\n    MIG Devices\n", text)
    assert re.findall(r"GPU Instance ID\s+: (\d+)", text) == [str(m.gi_id) for m in a100.mig]
    assert re.findall(r"Multiprocessor count\s+: (\d+)", text) == [str(m.profile.sm_count) for m in a100.mig]
    csv = native.smi("--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader", devices=A100_LAYOUT)
    assert csv.stdout == "Enabled, Enabled\n"
    plain = native.smi("-q", devices="a100:1")
    assert "MIG Devices" not in plain.stdout and re.search(r"Current\s+: Disabled", plain.stdout)


def test_query_xml_lists_mig_device_elements(native: NativeEnv, a100) -> None:
    out = native.smi("-q", "-x", devices=A100_LAYOUT)
    assert out.returncode == 0
    gpu = ET.fromstring(out.stdout).find("gpu")
    assert gpu.findtext("mig_mode/current_mig") == gpu.findtext("mig_mode/pending_mig") == "Enabled"
    migs = gpu.findall("mig_devices/mig_device")
    # The children of a 575.57.08 H100 <mig_device>: index, gpu_instance_id, compute_instance_id,
    # device_attributes/shared counts, fb_memory_usage.
    assert [(d.findtext("index"), d.findtext("gpu_instance_id"), d.findtext("compute_instance_id")) for d in migs] == \
        [(str(m.index), str(m.gi_id), "0") for m in a100.mig]
    assert [d.findtext("fb_memory_usage/total") for d in migs] == [f"{m.profile.memory_mib} MiB" for m in a100.mig]
    assert [d.findtext("device_attributes/shared/copy_engine_count") for d in migs] == ["3", "2", "1"]
    plain = ET.fromstring(native.smi("-q", "-x", devices="a100:1").stdout).find("gpu")
    assert plain.findtext("mig_devices").strip() == "None"


@pytest.mark.parametrize(("driver", "engines", "bar1"), [
    # 580.105.08 (RTX PRO 6000): BAR1 right-aligned like the framebuffer pair; 570.148.08 (A100 80GB,
    # ztouchnetworks/k8s-dra-driver-gpu README.md) two columns further right; 550.54.14 (A100-SXM4-80GB) the 570
    # rows under "CE ENC DEC OFA JPG    ".
    ("580.95.05", "| CE ENC  DEC  OFA  JPG |", "|               0MiB / 65535MiB    |"),
    ("570.148.08", "| CE ENC  DEC  OFA  JPG |", "|                 0MiB / 65535MiB  |"),
    ("550.54.14", "| CE ENC DEC OFA JPG    |", "|                 0MiB / 65535MiB  |"),
])
def test_mig_table_follows_the_drivers_branch(native: NativeEnv, driver: str, engines: str, bar1: str) -> None:
    out = native.smi(devices=A100_LAYOUT, FAKEGPU_DRIVER_VERSION=driver)
    assert out.returncode == 0 and f"Driver Version: {driver}" in out.stdout
    lines = out.stdout.splitlines()
    assert any(line.endswith(engines) and "BAR1-Usage" in line for line in lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("|  0    1   0   0  |"))
    assert lines[first + 1].startswith("|                  " + bar1)
