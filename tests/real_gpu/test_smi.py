"""nvidia-smi under the fake against a real H200's: every call of tools/gpu_capture/capture.sh, made the same way under
`fakegpu run --devices h200`, compared with tests/data/gpu/h200/smi (text and exit status).

What may differ is left out of the comparison, each for its reason (the VOLATILE tables below): the moment
(timestamps), that board and the VM it ran in (bus id, UUID, serial, PDI, VBIOS, InfoROM, part numbers, module
slot, pass-through, an emulated display), and the readings of a board at work (temperatures, power, current
clocks, PCIe throughput, BAR1 mappings, NVML's sample buffers: the telemetry model's, compared elsewhere). The
driver is the capture's (FAKEGPU_DRIVER_VERSION=580.159.04), so the layouts are that driver's.
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.real_gpu.conftest import TOOLS, TORCH211_PYTHON, real, real_smi, real_smi_status, under_fake

pytestmark = pytest.mark.native

DRIVER = real("nvml.json")["SystemDriverVersion"]
ENV = {"FAKEGPU_DRIVER_VERSION": DRIVER}

# The fields of the capture's whole-list query, in its order (capture.sh sorted them in the capture's locale).
QUERY_ALL = ",".join(re.sub(r" \[.*\]$", "", h) for h in real_smi("query_all").splitlines()[0].split(", "))
DISPLAY_TYPES = ("MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
                 "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "FBC_STATS", "ROW_REMAPPER",
                 "RESET_STATUS", "GSP_FIRMWARE_VERSION")

# capture.sh's nvidia-smi calls, by the name of their capture file.
CALLS: dict[str, list[str]] = {
    "default": [], "L": ["-L"], "q": ["-q"], "qx": ["-q", "-x"], "help": ["-h"],
    "help_query_gpu": ["--help-query-gpu"], "help_query_apps": ["--help-query-compute-apps"],
    "topo": ["topo", "-m"], "nvlink_s": ["nvlink", "-s"],
    **{f"qd_{d}": ["-q", "-d", d] for d in DISPLAY_TYPES},
    "query_all": [f"--query-gpu={QUERY_ALL}", "--format=csv"],
    "query_all_raw": [f"--query-gpu={QUERY_ALL}", "--format=csv,noheader,nounits"],
    "query_common": ["--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,memory.free,"
                     "utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pstate,"
                     "mig.mode.current", "--format=csv"],
    "query_apps": ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv"],
    "dmon": ["dmon", "-c", "2"], "pmon": ["pmon", "-c", "1"],
    "mig_lgip": ["mig", "-lgip"], "mig_lgipp": ["mig", "-lgipp"], "mig_lgi": ["mig", "-lgi"],
    "mig_lcip": ["mig", "-lcip"],
    "err_index": ["-i", "7"], "err_index_q": ["-i", "7", "-q"],
    "err_uuid": ["-i", "GPU-00000000-0000-0000-0000-000000000000"],
    "err_field": ["--query-gpu=memory.bogus", "--format=csv"], "err_format": ["--query-gpu=name", "--format=xml"],
    "err_flag": ["--no-such-flag"], "err_dflag": ["-q", "-d", "NOSUCH"], "err_lgi_perm": ["mig", "-cgi", "19"],
}

# Runs every call in one `fakegpu run`, as capture.sh runs them in one session: {name: [status, stdout + stderr]}.
RUNNER = """
import json, subprocess, sys
out = {}
for name, args in json.loads(sys.argv[1]).items():
    p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
    out[name] = [p.returncode, p.stdout + p.stderr]
print(json.dumps(out))
"""

# Texts that must come out the same, byte for byte.
EXACT = ("mig_lgip", "mig_lgipp", "mig_lgi", "mig_lcip", "err_index", "err_index_q", "err_uuid", "err_field",
         "err_format", "err_flag", "err_dflag", "err_lgi_perm", "qd_RESET_STATUS", "query_apps")

# -q keys ("Section/Key", shell patterns) whose values may differ, and why.
VOLATILE_TEXT = {
    "Timestamp": "the moment",
    "Serial Number": "that board's", "GPU UUID": "that board's", "GPU PDI": "that board's",
    "VBIOS Version": "that board's", "Board Part Number": "that SKU's", "GPU Part Number": "that SKU's",
    "Inforom Version/Image Version": "that board's InfoROM", "Inforom Version/ECC Object": "that board's InfoROM",
    "Board ID": "the VM's slot shapes it", "PCI/Bus": "the VM's slot", "PCI/Device": "the VM's slot",
    "PCI/Bus Id": "the VM's slot", "Platform Info/Module Id": "the SXM slot the VM was given",
    "PCI/Sub System Id": "that SKU's (the catalog has the other H200 SXM subsystem, 18BE)",
    "Display Attached": "a VM's emulated display", "GPU Virtualization Mode/Virtualization Mode": "pass-through",
    "PCI/Tx Throughput": "a reading", "PCI/Rx Throughput": "a reading",
    "BAR1 Memory Usage/Used": "what the driver and earlier steps mapped", "BAR1 Memory Usage/Free": "the same",
    "Temperature/GPU Current Temp": "a reading", "Temperature/GPU T.Limit Temp": "T.Limit less a reading",
    "Temperature/Memory Current Temp": "HBM temperature is not modelled",
    "GPU Power Readings/*Power Draw": "a reading", "GPU Memory Power Readings/Average Power Draw": "not modelled",
    "Clocks/Graphics": "the load model's", "Clocks/SM": "the load model's", "Clocks/Video": "the load model's",
    "* Samples/*": "NVML's sample buffers are not modelled",
}

# -q -x element paths whose text may differ, and why (the same facts as above, by their element names).
VOLATILE_XML = {
    "timestamp": "the moment", "gpu@id": "the VM's slot",
    "gpu/serial": "that board's", "gpu/uuid": "that board's", "gpu/pdi": "that board's",
    "gpu/vbios_version": "that board's", "gpu/board_part_number": "that SKU's", "gpu/gpu_part_number": "that SKU's",
    "gpu/inforom_version/img_version": "that board's", "gpu/inforom_version/ecc_object": "that board's",
    "gpu/board_id": "the VM's slot", "gpu/pci/pci_bus": "the VM's slot", "gpu/pci/pci_device": "the VM's slot",
    "gpu/pci/pci_bus_id": "the VM's slot", "gpu/platformInfo/module_id": "the SXM slot the VM was given",
    "gpu/pci/pci_sub_system_id": "that SKU's", "gpu/display_attached": "a VM's emulated display",
    "gpu/gpu_virtualization_mode/virtualization_mode": "pass-through",
    "gpu/pci/tx_util": "a reading", "gpu/pci/rx_util": "a reading",
    "gpu/bar1_memory_usage/used": "BAR1 mappings", "gpu/bar1_memory_usage/free": "BAR1 mappings",
    "gpu/temperature/gpu_temp": "a reading", "gpu/temperature/gpu_temp_tlimit": "T.Limit less a reading",
    "gpu/temperature/memory_temp": "HBM temperature is not modelled",
    "gpu/gpu_power_readings/*_power_draw": "a reading",
    "gpu/gpu_memory_power_readings/average_power_draw": "memory power is not modelled",
    "gpu/clocks/graphics_clock": "the load model's", "gpu/clocks/sm_clock": "the load model's",
    "gpu/clocks/video_clock": "the load model's",
}

# --query-gpu fields whose values may differ, and why.
VOLATILE_FIELDS = {
    "timestamp": "the moment", "uuid": "that board's", "serial": "that board's", "vbios_version": "that board's",
    "inforom.img": "that board's", "inforom.ecc": "that board's", "pci.bus_id": "the VM's slot",
    "pci.bus": "the VM's slot", "pci.device": "the VM's slot", "pci.sub_device_id": "that SKU's",
    "platform.module_id": "the SXM slot the VM was given", "display_attached": "a VM's emulated display",
    "temperature.gpu": "a reading", "temperature.gpu.tlimit": "T.Limit less a reading",
    "temperature.memory": "HBM temperature is not modelled", "power.draw*": "a reading",
    "clocks.current.graphics": "the load model's", "clocks.current.sm": "the load model's",
    "clocks.current.video": "the load model's",
}


def volatile(key: str, table: dict[str, str]) -> bool:
    return any(re.fullmatch(re.escape(p).replace(r"\*", ".*"), key) for p in table)


@pytest.fixture(scope="module")
def fake(native_libs) -> dict[str, tuple[int, str]]:
    proc = under_fake([sys.executable, "-c", RUNNER, json.dumps(CALLS)], env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: (rc, text) for name, (rc, text) in json.loads(proc.stdout).items()}


def test_exit_statuses_are_driver_580s(fake):
    wrong = {n: (real_smi_status(n), fake[n][0]) for n in CALLS if real_smi_status(n) != fake[n][0]}
    assert not wrong, wrong


@pytest.mark.parametrize("name", EXACT)
def test_messages_and_mig_lists_are_the_same(fake, name):
    assert fake[name][1] == real_smi(name)


def report_lines(text: str) -> list[tuple[str, str | None]]:
    """A -q report as ("Section/Key", value) in order (value None for a section title), a line's path being the
    lines it is indented under (four spaces a level); the GPU line, with its bus id, is left out."""
    out: list[tuple[str, str | None]] = []
    stack: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("=") or line.startswith("GPU 0"):
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, value = line.strip().partition(" : ")
        stack = [*stack[:max(depth - 1, 0)], key.rstrip()]
        out.append(("/".join(stack), value if sep else None))
    return out


def differences(real_text: str, fake_text: str) -> list[str]:
    r, f = report_lines(real_text), report_lines(fake_text)
    if [p for p, _ in r] != [p for p, _ in f]:
        import difflib
        return list(difflib.unified_diff([p for p, _ in r], [p for p, _ in f], "real", "fake", lineterm=""))
    return [f"{p}: real {a!r}, fake {b!r}" for (p, a), (_, b) in zip(r, f, strict=True)
            if a != b and not volatile(p, VOLATILE_TEXT)]


@pytest.mark.parametrize("name", ["q", *(f"qd_{d}" for d in DISPLAY_TYPES if d != "RESET_STATUS")])
def test_query_report_has_the_real_sections_keys_and_values(fake, name):
    """-q and each -q -d: the same sections and keys in the same order and nesting (key column 55 on 580), the
    same values but for the volatile ones."""
    real_text, fake_text = real_smi(name), fake[name][1]
    assert not differences(real_text, fake_text), "\n".join(differences(real_text, fake_text))
    widths = {line.index(" : ") for line in fake_text.splitlines() if " : " in line}
    assert widths == {line.index(" : ") for line in real_text.splitlines() if " : " in line}


def xml_leaves(text: str) -> list[tuple[str, str]]:
    """Every element of -q -x as (path under the root, its text), in document order, repeats kept."""
    root = ET.fromstring(text)
    out: list[tuple[str, str]] = []

    def walk(e: ET.Element, path: str) -> None:
        out.append((path, (e.text or "").strip()))
        for c in e:
            walk(c, f"{path}/{c.tag}" if path else c.tag)

    for child in root:
        walk(child, child.tag)
        if child.tag == "gpu":
            out.append(("gpu@id", child.get("id", "")))
    return out


def test_xml_report_has_the_real_tree_and_values(fake):
    assert fake["qx"][1].splitlines()[:2] == real_smi("qx").splitlines()[:2]  # prolog, DTD v13
    r, f = xml_leaves(real_smi("qx")), xml_leaves(fake["qx"][1])
    assert [p for p, _ in f] == [p for p, _ in r]
    wrong = [f"{p}: real {a!r}, fake {b!r}" for (p, a), (_, b) in zip(r, f, strict=True)
             if a != b and not volatile(p, VOLATILE_XML)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", ["query_all", "query_all_raw"])
def test_every_field_the_driver_lists_is_answered_alike(fake, name):
    """The 188 fields of 580's --help-query-gpu in one query: the same header (units, canonical names) and the
    same values and formats ([N/A], [Requested functionality has been deprecated], plain N/A for the fabric)."""
    real_lines, fake_lines = real_smi(name).splitlines(), fake[name][1].splitlines()
    fields = QUERY_ALL.split(",")
    if name == "query_all":
        assert fake_lines[0] == real_lines[0]
        real_lines, fake_lines = real_lines[1:], fake_lines[1:]
    values = dict(zip(fields, zip(real_lines[0].split(", "), fake_lines[0].split(", "), strict=True), strict=True))
    wrong = {f: v for f, v in values.items() if v[0] != v[1] and not volatile(f, VOLATILE_FIELDS)}
    assert not wrong, wrong


def test_field_lists_are_the_drivers(fake):
    def names(text: str) -> list[str]:
        return sorted({m for m in re.findall(r'^"([a-z_.]+)"', text, re.M)})

    assert names(fake["help_query_gpu"][1]) == sorted(real_smi("query_gpu_fields").split())
    assert names(fake["help_query_apps"][1]) == sorted(real_smi("query_compute_apps_fields").split())


def test_query_headers_name_the_canonical_field(fake):
    """Asked clocks.sm, the column is headed clocks.current.sm [MHz]; memory follows the real board's rounding."""
    real_lines, fake_lines = real_smi("query_common").splitlines(), fake["query_common"][1].splitlines()
    assert fake_lines[0] == real_lines[0]
    keep = dict.fromkeys(["index", "name", "driver_version", "memory.total [MiB]", "memory.used [MiB]",
                          "memory.free [MiB]", "utilization.gpu [%]", "power.limit [W]", "clocks.max.sm [MHz]",
                          "pstate", "mig.mode.current"])
    header = real_lines[0].split(", ")
    pick = [i for i, h in enumerate(header) if h in keep]
    assert [fake_lines[1].split(", ")[i] for i in pick] == [real_lines[1].split(", ")[i] for i in pick]


def normalised_default(text: str) -> list[str]:
    """The default view with the timestamp, the VM's bus id and the readings (temperature, power) blanked."""
    lines = text.splitlines()[1:]
    lines = [re.sub(r"\d{8}:\w\w:\w\w\.\d", "BUS", line) for line in lines]
    return [re.sub(r"\| N/A\s+\d+C\s+P0\s+\d+W", "| N/A TEMP P0 POWER", line) for line in lines]


def test_default_view_is_the_real_layout(fake):
    assert normalised_default(fake["default"][1]) == normalised_default(real_smi("default"))
    assert fake["default"][1].splitlines()[12] == ""  # the line between the tables is empty on 580


def test_topo_header_is_underlined_even_into_a_file(fake):
    real_lines, fake_lines = real_smi("topo").splitlines(), fake["topo"][1].splitlines()
    assert fake_lines[0] == real_lines[0] == "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    # the CPU affinity is the VM's 16 vCPUs there, this machine's here
    assert fake_lines[1].split("\t")[:2] + fake_lines[1].split("\t")[3:] == \
        real_lines[1].split("\t")[:2] + real_lines[1].split("\t")[3:]
    assert fake_lines[2:] == real_lines[2:]


@pytest.mark.parametrize("name", ["dmon", "pmon"])
def test_monitors_have_the_real_columns(fake, name):
    real_lines, fake_lines = real_smi(name).splitlines(), fake[name][1].splitlines()
    assert fake_lines[:2] == real_lines[:2]
    assert [len(line) for line in fake_lines] == [len(line) for line in real_lines]
    if name == "pmon":  # no process: the same line of dashes
        assert fake_lines[2:] == real_lines[2:]


def test_list_names_the_board(fake):
    assert re.sub(r"GPU-[0-9a-f-]+", "UUID", fake["L"][1]) == re.sub(r"GPU-[0-9a-f-]+", "UUID", real_smi("L"))


@pytest.mark.torch
def test_a_process_holding_memory_is_listed_as_the_real_one(native_libs, torch211, tmp_path):
    """`python3 torch_memory.py OUT` holding 10 GiB: real nvidia-smi names it "python3" (argv[0], not the command
    line) in the table, -q and --query-compute-apps, and -q -d MEMORY,PIDS,UTILIZATION and -q -x have the real
    layout with a process in them (process entries keep a 42-column key on 580)."""
    env = {"PATH": f"{TORCH211_PYTHON.parent}:{os.environ['PATH']}", **ENV}
    proc = under_fake(["python3", str(TOOLS / "torch_memory.py"), str(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    apps = (tmp_path / "smi_holding_apps.out").read_text().splitlines()
    real_apps = real_smi("holding_apps").splitlines()
    assert apps[0] == real_apps[0]
    assert apps[1].split(", ")[1] == real_apps[1].split(", ")[1] == "python3"
    row = re.compile(r"^\|\s+0\s+N/A\s+N/A\s+\d+\s+C\s+(\S.*?)\s+\d+MiB \|$")
    names = [m[1] for line in (tmp_path / "smi_holding_default.out").read_text().splitlines() if (m := row.match(line))]
    real_names = [m[1] for line in real_smi("holding_default").splitlines() if (m := row.match(line))]
    assert names == real_names == ["python3"]
    # Memory and utilization are the fake's context and load models' (compared elsewhere); the layout is not.
    q = report_lines((tmp_path / "smi_holding_q.out").read_text())
    real_q = report_lines(real_smi("holding_q"))
    assert [p for p, _ in q] == [p for p, _ in real_q]
    assert dict(q)["Processes/Process ID/Name"] == "python3"
    qx = [p for p, _ in xml_leaves((tmp_path / "smi_holding_qx.out").read_text())]
    assert qx == [p for p, _ in xml_leaves(real_smi("holding_qx"))]

