"""`fakegpu metrics`: dcgm-exporter's names and labels, values that agree with nvidia-smi and move with the
processes on the devices, parsed by prometheus_client's own parser (a reader nobody here wrote)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.native.conftest import REPO, NativeEnv

pytestmark = pytest.mark.native

GIB = 1 << 30
SCRAPE = ("from fakegpu.faults.exporter import DcgmCollector, load_nvml\n"
          "print(DcgmCollector(load_nvml()).scrape().decode())")
# The labels dcgm-exporter puts on every device sample (real captures), container/pod ones aside.
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}


def scrape(native: NativeEnv, devices: str) -> dict[str, dict[str, tuple[dict[str, str], float]]]:
    """{metric: {gpu index: (labels, value)}} of one scrape."""
    out = native.python(SCRAPE, devices=devices)
    assert out.returncode == 0, out.stderr
    samples: dict[str, dict[str, tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(out.stdout):
        for s in family.samples:
            samples.setdefault(s.name, {})[s.labels["gpu"]] = (s.labels, s.value)
    return samples


def smi_rows(native: NativeEnv, devices: str, fields: str) -> list[list[str]]:
    out = native.smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits", devices=devices)
    assert out.returncode == 0, out.stdout
    return [[v.strip() for v in line.split(",")] for line in out.stdout.strip().splitlines()]


def test_every_device_has_dcgm_names_and_labels_agreeing_with_nvidia_smi(native: NativeEnv) -> None:
    devices = "a100:2,l4"
    samples = scrape(native, devices)
    rows = smi_rows(native, devices, "index,uuid,name,pci.bus_id,memory.total,clocks.sm,clocks.mem,temperature.gpu")
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS"):
        assert sorted(samples[name]) == ["0", "1", "2"], name
    for index, uuid, model, bus, total, sm, mem, temp in rows:
        labels, used = samples["DCGM_FI_DEV_FB_USED"][index]
        assert set(labels) == DCGM_LABELS
        assert (labels["UUID"], labels["modelName"], labels["device"]) == (uuid, model, f"nvidia{index}")
        assert labels["pci_bus_id"].lower() == bus.lower()
        # dcgm-exporter's three framebuffer fields partition the board, as on a real T4 capture.
        parts = used + samples["DCGM_FI_DEV_FB_FREE"][index][1] + samples["DCGM_FI_DEV_FB_RESERVED"][index][1]
        assert int(total) - 2 <= parts <= int(total)
        assert samples["DCGM_FI_DEV_SM_CLOCK"][index][1] == float(sm)
        assert samples["DCGM_FI_DEV_MEM_CLOCK"][index][1] == float(mem)
        assert samples["DCGM_FI_DEV_GPU_TEMP"][index][1] == float(temp)
    assert samples["DCGM_FI_DEV_FB_USED"]["0"][0]["modelName"] == "NVIDIA A100-SXM4-80GB"


def test_a_pod_s_names_passed_down_label_its_gpus_as_dcgm_exporter_s_kubernetes_mapping_does(native: NativeEnv) -> None:
    out = native.python(SCRAPE, devices="a100:2", POD_NAME="trainer-0", POD_NAMESPACE="ml", CONTAINER_NAME="worker",
                        NODE_NAME="gpu-node-3")
    assert out.returncode == 0, out.stderr
    samples = [s for f in text_string_to_metric_families(out.stdout) for s in f.samples]
    assert samples and all(s.labels.keys() == DCGM_LABELS | {"container", "namespace", "pod"} for s in samples)
    assert {(s.labels["pod"], s.labels["namespace"], s.labels["container"], s.labels["Hostname"])
            for s in samples} == {("trainer-0", "ml", "worker", "gpu-node-3")}
    alone = native.python(SCRAPE, devices="a100", CONTAINER_NAME="sandbox")  # a variable that says no pod
    assert alone.returncode == 0 and "sandbox" not in alone.stdout and 'pod="' not in alone.stdout
    # 100 KiB (near the most one variable may hold) is no Kubernetes name (at most 253 characters), and would
    # repeat on every series: left out
    big = native.python(SCRAPE, devices="a100", POD_NAME="p", POD_NAMESPACE="n" * (100 << 10))
    assert big.returncode == 0 and 'pod="p"' in big.stdout and "namespace=" not in big.stdout


def test_counters_keep_dcgm_names_and_type(native: NativeEnv) -> None:
    out = native.python(SCRAPE, devices="h100")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in out.stdout
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in out.stdout
    assert "_total{" not in out.stdout.replace("_TOTAL{", "")  # no OpenMetrics suffix a dashboard would miss


def test_framebuffer_follows_a_process_allocating(native: NativeEnv) -> None:
    devices = "a100:2"
    before = scrape(native, devices)
    native.register(os.getpid(), 1, 3 * GIB, "python")
    after = scrape(native, devices)
    for metric, sign in (("DCGM_FI_DEV_FB_USED", 1), ("DCGM_FI_DEV_FB_FREE", -1)):
        assert after[metric]["1"][1] - before[metric]["1"][1] == sign * 3072, metric
        assert after[metric]["0"][1] == before[metric]["0"][1], metric
    used = smi_rows(native, devices, "memory.used")
    assert [float(r[0]) for r in used] == [after["DCGM_FI_DEV_FB_USED"][g][1] for g in ("0", "1")]


def start_exporter(native: NativeEnv, *args: str) -> tuple[subprocess.Popen[str], int]:
    exe = Path(sys.executable).with_name("fakegpu")
    proc = subprocess.Popen([str(exe), "metrics", "--address", "127.0.0.1", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=native.env("a100:2"))
    line = proc.stdout.readline()
    assert "/metrics" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def test_endpoint_serves_metrics_refuses_other_paths_and_stops_on_sigterm(native: NativeEnv) -> None:
    proc, port = start_exporter(native)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = r.read().decode()
        assert 'DCGM_FI_DEV_FB_USED{gpu="1"' in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert err.value.code == 404
        # A second exporter on the same port says so and exits non-zero.
        exe = Path(sys.executable).with_name("fakegpu")
        clash = subprocess.run([str(exe), "metrics", "--address", "127.0.0.1", "--port", str(port)],
                               capture_output=True, text=True, env=native.env("a100:2"), timeout=60)
        assert clash.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}" in clash.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_bad_input_is_refused_clearly(native: NativeEnv) -> None:
    exe = Path(sys.executable).with_name("fakegpu")
    bad = subprocess.run([str(exe), "metrics", "--devices", "a100x:2", "--once"], capture_output=True, text=True,
                         env=native.env(), timeout=60)
    assert bad.returncode == 2
    assert "unknown profile 'a100x'" in bad.stderr and "Did you mean: a100" in bad.stderr
    unbuilt = subprocess.run([str(exe), "metrics", "--once"], capture_output=True, text=True, timeout=60,
                             env=native.env("a100", FAKEGPU_NATIVE_DIR=str(REPO / "no-such-build")))
    assert unbuilt.returncode == 1
    assert "FakeGPU's NVML is not built" in unbuilt.stderr


MIG_PROBE = """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
out = {}
for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
    try:
        m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
    except n.NVMLError:
        continue
    out[str(n.nvmlDeviceGetGpuInstanceId(m))] = n.nvmlDeviceGetMemoryInfo(m).total >> 20
print(json.dumps(out))
"""


def test_a_mig_gpu_is_reported_through_its_gpu_instances_as_dcgm_exporter_does(native: NativeEnv) -> None:
    import json

    devices = "a100:mig=3g.40gb+2g.20gb+1g.10gb,l4"
    out = native.python(SCRAPE, devices=devices)
    assert out.returncode == 0, out.stderr
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(out.stdout):
        for s in family.samples:
            series.setdefault(s.name, []).append((s.labels, s.value))
    totals = json.loads(native.python(MIG_PROBE, devices=devices).stdout)
    fb = {}
    for labels, value in series["DCGM_FI_DEV_FB_FREE"]:
        if labels["gpu"] == "0":
            assert labels["modelName"] == "NVIDIA A100-SXM4-80GB"  # the GPU's, with the instance in its own labels
            fb[labels["GPU_I_ID"]] = (labels["GPU_I_PROFILE"], value)
    assert sorted(p for p, _ in fb.values()) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert set(fb) == set(totals)
    used = {la["GPU_I_ID"]: v for la, v in series["DCGM_FI_DEV_FB_USED"] if la["gpu"] == "0"}
    reserved = {la["GPU_I_ID"]: v for la, v in series["DCGM_FI_DEV_FB_RESERVED"] if la["gpu"] == "0"}
    for gi, (_, free) in fb.items():
        assert totals[gi] - 2 <= free + used[gi] + reserved[gi] <= totals[gi], gi
    # Every field of the GPU comes per instance (none bare); what a MIG-mode GPU refuses is left out.
    for name, samples in series.items():
        assert all("GPU_I_ID" in la for la, _ in samples if la["gpu"] == "0"), name
    clocks = {v for la, v in series["DCGM_FI_DEV_SM_CLOCK"] if la["gpu"] == "0"}
    assert len(clocks) == 1 and len([1 for la, _ in series["DCGM_FI_DEV_SM_CLOCK"] if la["gpu"] == "0"]) == 3
    assert [la["gpu"] for la, _ in series["DCGM_FI_DEV_ENC_UTIL"]] == ["1"]
    assert all("GPU_I_ID" not in la for la, _ in series["DCGM_FI_DEV_FB_USED"] if la["gpu"] == "1")
