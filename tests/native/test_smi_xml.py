"""nvidia-smi -q -x: the XML report against a real board's element tree, NVML's values and the text -q report.

The tree is a fact file (tests/data/smi/qx-h100-elements.txt): the tag paths of a real H100 capture on driver
580, each distinct path once in document order. Values are checked against pynvml on the same devices and
against the text report, which reads the same NVML calls.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import pytest

from .conftest import MIB, NATIVE_CUDA_VERSION, NATIVE_DRIVER_VERSION, REPO, NativeEnv

pytestmark = pytest.mark.native

FACTS = REPO / "tests" / "data" / "smi" / "qx-h100-elements.txt"
H100 = "h100:2"
PROLOG = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">']
PROCESS_INFO = ["gpu_instance_id", "compute_instance_id", "pid", "type", "process_name", "used_memory"]


def fact_paths() -> list[str]:
    lines = FACTS.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def _walk(element: ET.Element, parent: str, out: list[str]) -> None:
    path = f"{parent}/{element.tag}"
    if path not in out:
        out.append(path)
    for child in element:
        _walk(child, path, out)


def gpu_paths(gpu: ET.Element) -> list[str]:
    out: list[str] = []
    _walk(gpu, "nvidia_smi_log", out)
    return out


def tree_paths(root: ET.Element) -> list[str]:
    """The fact file's convention: the root, its children up to the first <gpu>, then that GPU's subtree."""
    out = [root.tag]
    for child in root:
        if child.tag == "gpu":
            return out + gpu_paths(child)
        out.append(f"{root.tag}/{child.tag}")
    return out


def xml_report(native: NativeEnv, *args: str, devices: str = H100, **env: str) -> tuple[str, ET.Element]:
    out = native.smi("-q", "-x", *args, devices=devices, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout, ET.fromstring(out.stdout)


def text_report(native: NativeEnv, index: int, devices: str = H100) -> dict[str, str]:
    """-q -i INDEX as {"Section/Key": value}: sections nest by four spaces, as the report prints them."""
    out = native.smi("-q", "-i", str(index), devices=devices)
    assert out.returncode == 0, out.stdout
    fields: dict[str, str] = {}
    stack: list[str] = []
    for line in out.stdout.splitlines():
        if not line.startswith("    "):
            continue  # the header and the GPU line
        depth = (len(line) - len(line.lstrip())) // 4 - 1
        del stack[depth:]
        if ":" in line:
            key, _, value = line.partition(":")
            fields["/".join([*stack, key.strip()])] = value.strip()
        else:
            stack.append(line.strip())
    return fields


NVML_VALUES = """
import json, pynvml
pynvml.nvmlInit()
gpus = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)  # reserved apart from used, as -q
    gpus.append(dict(name=pynvml.nvmlDeviceGetName(h), uuid=pynvml.nvmlDeviceGetUUID(h),
                     bus_id=pynvml.nvmlDeviceGetPciInfo(h).busId, minor=pynvml.nvmlDeviceGetMinorNumber(h),
                     total=m.total, reserved=m.reserved, used=m.used, free=m.free))
print(json.dumps(dict(driver=pynvml.nvmlSystemGetDriverVersion(), cuda=pynvml.nvmlSystemGetCudaDriverVersion(),
                      gpus=gpus)))
"""


def nvml_values(native: NativeEnv, devices: str = H100) -> dict:
    out = native.python(NVML_VALUES, devices=devices)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_parses_with_the_real_prolog(native: NativeEnv) -> None:
    text, root = xml_report(native)
    assert text.splitlines()[:2] == PROLOG
    assert root.tag == "nvidia_smi_log"
    assert text.endswith("</nvidia_smi_log>\n")
    assert [gpu.get("id") for gpu in root.iter("gpu")] == [gpu.findtext("pci/pci_bus_id") for gpu in root.iter("gpu")]


def test_dtd_follows_the_driver_branch(native: NativeEnv) -> None:
    text, _ = xml_report(native, FAKEGPU_DRIVER_VERSION="570.148.08", FAKEGPU_CUDA_VERSION="12.8")
    assert text.splitlines()[1] == '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">'


def test_element_tree_matches_the_real_h100(native: NativeEnv) -> None:
    _, root = xml_report(native)
    facts = fact_paths()
    assert len(facts) == 265
    assert tree_paths(root) == facts  # nothing left out, nothing added, same order
    assert [child.tag for child in root] == ["timestamp", "driver_version", "cuda_version", "attached_gpus",
                                             "gpu", "gpu"]
    first, second = root.findall("gpu")
    assert gpu_paths(second) == gpu_paths(first)


def test_values_agree_with_nvml(native: NativeEnv) -> None:
    nvml = nvml_values(native)
    _, root = xml_report(native)
    assert root.findtext("driver_version") == nvml["driver"] == NATIVE_DRIVER_VERSION
    cuda = int(NATIVE_CUDA_VERSION)
    assert root.findtext("cuda_version") == f"{nvml['cuda'] // 1000}.{nvml['cuda'] % 1000 // 10}" == \
        f"{cuda // 1000}.{cuda % 1000 // 10}"
    assert root.findtext("attached_gpus") == "2"
    gpus = root.findall("gpu")
    assert len(gpus) == len(nvml["gpus"]) == 2
    for gpu, want in zip(gpus, nvml["gpus"], strict=True):
        assert gpu.findtext("product_name") == want["name"] == "NVIDIA H100 80GB HBM3"
        assert gpu.findtext("product_architecture") == "Hopper"
        assert gpu.findtext("uuid") == want["uuid"]
        assert gpu.get("id") == gpu.findtext("pci/pci_bus_id") == want["bus_id"]
        assert gpu.findtext("minor_number") == str(want["minor"])
        fb = {key: gpu.findtext(f"fb_memory_usage/{key}") for key in ("total", "reserved", "used", "free")}
        assert fb == {key: f"{want[key] // MIB} MiB" for key in ("total", "reserved", "used", "free")}
    assert [gpu.findtext("minor_number") for gpu in gpus] == ["0", "1"]


# Elements the text -q report also prints, read through the same NVML calls: text path -> XML path.
SHARED_WITH_TEXT = {
    "Product Name": "product_name",
    "Product Brand": "product_brand",
    "Persistence Mode": "persistence_mode",
    "MIG Mode/Current": "mig_mode/current_mig",
    "Accounting Mode": "accounting_mode",
    "Serial Number": "serial",
    "GPU UUID": "uuid",
    "Minor Number": "minor_number",
    "VBIOS Version": "vbios_version",
    "Board ID": "board_id",
    "Inforom Version/Image Version": "inforom_version/img_version",
    "Inforom Version/ECC Object": "inforom_version/ecc_object",
    "PCI/Bus Id": "pci/pci_bus_id",
    "PCI/GPU Link Info/PCIe Generation/Max": "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    "PCI/GPU Link Info/Link Width/Current": "pci/pci_gpu_link_info/link_widths/current_link_width",
    "Fan Speed": "fan_speed",
    "Performance State": "performance_state",
    "FB Memory Usage/Total": "fb_memory_usage/total",
    "FB Memory Usage/Reserved": "fb_memory_usage/reserved",
    "FB Memory Usage/Used": "fb_memory_usage/used",
    "FB Memory Usage/Free": "fb_memory_usage/free",
    "BAR1 Memory Usage/Total": "bar1_memory_usage/total",
    "BAR1 Memory Usage/Free": "bar1_memory_usage/free",
    "Compute Mode": "compute_mode",
    "Utilization/GPU": "utilization/gpu_util",
    "ECC Mode/Current": "ecc_mode/current_ecc",
    "Temperature/GPU Current Temp": "temperature/gpu_temp",
    "GPU Power Readings/Instantaneous Power Draw": "gpu_power_readings/instant_power_draw",
    "GPU Power Readings/Current Power Limit": "gpu_power_readings/current_power_limit",
    "GPU Power Readings/Min Power Limit": "gpu_power_readings/min_power_limit",
    "GPU Power Readings/Max Power Limit": "gpu_power_readings/max_power_limit",
    "Clocks/SM": "clocks/sm_clock",
    "Max Clocks/Graphics": "max_clocks/graphics_clock",
    "Max Clocks/Memory": "max_clocks/mem_clock",
}


@pytest.mark.parametrize("spec", [H100, "a100:1,l4-24gb,rtx4090"])
def test_values_agree_with_the_text_report(native: NativeEnv, spec: str) -> None:
    _, root = xml_report(native, devices=spec)
    for index, gpu in enumerate(root.findall("gpu")):
        text = text_report(native, index, devices=spec)
        assert {key: text[key] for key in SHARED_WITH_TEXT} == \
            {key: gpu.findtext(path) for key, path in SHARED_WITH_TEXT.items()}, index


THRESHOLDS = """
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    t = {name: pynvml.nvmlDeviceGetTemperatureThreshold(h, k) for name, k in (("shutdown", 0), ("slowdown", 1),
                                                                             ("gpu_max", 3))}
    t["gpu"] = pynvml.nvmlDeviceGetTemperature(h, 0)
    out.append(t)
print(json.dumps(out))
"""


def test_temperatures_are_margins_below_tlimit_from_ada_on(native: NativeEnv) -> None:
    """Hopper reports margins below T.Limit (a real H200 on 580: T.Limit 50 C at 37 C, shutdown -8, slowdown -2,
    max operating 0); an A100 reports its thresholds as they are (the A100 570.148.08 -q -x capture)."""
    spec = "h100,a100"
    out = native.python(THRESHOLDS, devices=spec)
    assert out.returncode == 0, out.stderr
    h100, a100 = json.loads(out.stdout)
    _, root = xml_report(native, devices=spec)
    hopper, ampere = (gpu.find("temperature") for gpu in root.findall("gpu"))
    assert [e.tag for e in hopper] == ["gpu_temp", "gpu_temp_tlimit", "gpu_temp_max_tlimit_threshold",
                                       "gpu_temp_slow_tlimit_threshold", "gpu_temp_max_gpu_tlimit_threshold",
                                       "gpu_target_temperature", "memory_temp", "gpu_temp_max_mem_tlimit_threshold"]
    limit = h100["gpu_max"]
    assert hopper.findtext("gpu_temp_tlimit") == f"{limit - h100['gpu']} C"
    assert hopper.findtext("gpu_temp_max_tlimit_threshold") == f"{limit - h100['shutdown']} C"
    assert hopper.findtext("gpu_temp_slow_tlimit_threshold") == f"{limit - h100['slowdown']} C"
    assert hopper.findtext("gpu_temp_max_gpu_tlimit_threshold") == "0 C"
    assert [e.tag for e in ampere] == ["gpu_temp", "gpu_temp_tlimit", "gpu_temp_max_threshold",
                                       "gpu_temp_slow_threshold", "gpu_temp_max_gpu_threshold",
                                       "gpu_target_temperature", "memory_temp", "gpu_temp_max_mem_threshold"]
    assert ampere.findtext("gpu_temp_tlimit") == "N/A"
    assert ampere.findtext("gpu_temp_max_threshold") == f"{a100['shutdown']} C"
    assert ampere.findtext("gpu_temp_max_gpu_threshold") == f"{a100['gpu_max']} C"
    text = text_report(native, 1, devices=spec)
    assert text["Temperature/GPU Shutdown Temp"] == f"{a100['shutdown']} C"


def test_select_one_gpu(native: NativeEnv) -> None:
    nvml = nvml_values(native)
    _, root = xml_report(native, "-i", "1")
    gpus = root.findall("gpu")
    assert [gpu.get("id") for gpu in gpus] == [nvml["gpus"][1]["bus_id"]]
    assert gpus[0].findtext("uuid") == nvml["gpus"][1]["uuid"]
    assert root.findtext("attached_gpus") == "2"  # what is attached, not what was selected
    _, by_uuid = xml_report(native, f"--id={nvml['gpus'][0]['uuid']}")
    assert [gpu.get("id") for gpu in by_uuid.findall("gpu")] == [nvml["gpus"][0]["bus_id"]]


def test_process_name_is_escaped(native: NativeEnv) -> None:
    name = "train&eval <v2> \"a\" 'b'"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        native.register(sleeper.pid, 1, 2048 * MIB, name)
        text, root = xml_report(native)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "train&amp;eval &lt;v2&gt; &quot;a&quot; &apos;b&apos;" in text
    idle, busy = root.findall("gpu")
    assert list(idle.find("processes")) == []
    (info,) = busy.find("processes")
    assert info.tag == "process_info" and [child.tag for child in info] == PROCESS_INFO
    assert info.findtext("pid") == str(sleeper.pid)
    assert info.findtext("type") == "C"
    assert info.findtext("process_name") == name
    assert info.findtext("used_memory") == "2048 MiB"
    # With the process, the tree is the fact file's plus the process_info layout, and nothing else.
    assert tree_paths(root) == fact_paths()
    busy_paths = gpu_paths(busy)
    at = busy_paths.index("nvidia_smi_log/gpu/processes") + 1
    assert busy_paths[at:at + 7] == ["nvidia_smi_log/gpu/processes/process_info",
                                     *(f"nvidia_smi_log/gpu/processes/process_info/{tag}" for tag in PROCESS_INFO)]
    assert busy_paths[:at] + busy_paths[at + 7:] == fact_paths()[5:]


@pytest.mark.parametrize("args", [("-q", "-x"), ("-x", "-q"), ("--query", "--xml-format"), ("-x", "-q", "-i0")])
def test_xml_goes_with_query(native: NativeEnv, args: tuple[str, ...]) -> None:
    out = native.smi(*args, devices=H100)
    assert out.returncode == 0, out.stdout
    ET.fromstring(out.stdout)


@pytest.mark.parametrize("args", [("-x",), ("-x", "-L"), ("-x", "-i", "0"), ("topo", "-m", "-x")])
def test_xml_alone_is_invalid(native: NativeEnv, args: tuple[str, ...]) -> None:
    out = native.smi(*args, devices=H100)
    assert out.returncode == 2
    assert "Invalid combination of input arguments" in out.stdout
