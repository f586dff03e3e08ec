"""`fakegpu metrics`: the GPUs this process sees, published for Prometheus the way dcgm-exporter publishes them.

It is an NVML client, as dcgm-exporter is (DCGM reads NVML): every number comes from FakeGPU's libnvidia-ml and
the shared state behind it, so a dashboard, `nvidia-smi` and pynvml never disagree, and memory moves the moment
a process allocates. Metric names, units, help texts and labels are dcgm-exporter's default set
(etc/default-counters.csv in NVIDIA/dcgm-exporter; labels as its captures show them), so dashboards and alerts
written for real nodes work unchanged. A field NVML does not support on a device is left out for that device, as
dcgm-exporter leaves out blank fields.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakegpu.errors import FakeGPUError
from fakegpu.faults import board
from fakegpu.shared_state import state_dir

DEFAULT_PORT = 9400  # dcgm-exporter's
NVML_LIBRARY = "libnvidia-ml.so.1"


class MetricsError(FakeGPUError):
    """The exporter cannot start: no NVML to read, or the address is taken."""

    code = "metrics"


@dataclass(frozen=True)
class Field:
    """One dcgm-exporter field: how NVML answers it for a device handle."""

    name: str
    counter: bool
    help: str
    read: Callable[[Probe], float]


@dataclass(frozen=True)
class Probe:
    """What a field reads from: NVML, the GPU's handle, the handle whose framebuffer it reports (a MIG device's,
    else the GPU's), and the last Xid the run's fault board holds for the GPU."""

    nvml: Any
    handle: Any
    memory_handle: Any
    last_xid: int


@dataclass(frozen=True)
class Entity:
    """One series of labels: a GPU, or in MIG mode one of its GPU instances (dcgm-exporter reports a MIG-mode
    GPU only through its instances: the GPU's own fields repeated on each, the framebuffer per instance)."""

    index: int
    handle: Any
    memory_handle: Any
    labels: dict[str, str]


def _fields() -> tuple[Field, ...]:
    import pynvml as n

    mib = 1 << 20

    def memory(attr: str) -> Callable[[Probe], float]:
        def read(p: Probe) -> float:
            return getattr(p.nvml.nvmlDeviceGetMemoryInfo(p.memory_handle, version=p.nvml.nvmlMemory_v2), attr) // mib
        return read

    def ecc(error_type: int, counter_type: int) -> Callable[[Probe], float]:
        return lambda p: p.nvml.nvmlDeviceGetTotalEccErrors(p.handle, error_type, counter_type)

    def remapped(i: int) -> Callable[[Probe], float]:
        return lambda p: p.nvml.nvmlDeviceGetRemappedRows(p.handle)[i]

    return (
        Field("DCGM_FI_DEV_SM_CLOCK", False, "SM clock frequency (in MHz).",
              lambda p: p.nvml.nvmlDeviceGetClockInfo(p.handle, n.NVML_CLOCK_SM)),
        Field("DCGM_FI_DEV_MEM_CLOCK", False, "Memory clock frequency (in MHz).",
              lambda p: p.nvml.nvmlDeviceGetClockInfo(p.handle, n.NVML_CLOCK_MEM)),
        Field("DCGM_FI_DEV_GPU_TEMP", False, "GPU temperature (in C).",
              lambda p: p.nvml.nvmlDeviceGetTemperature(p.handle, n.NVML_TEMPERATURE_GPU)),
        Field("DCGM_FI_DEV_POWER_USAGE", False, "Power draw (in W).",
              lambda p: p.nvml.nvmlDeviceGetPowerUsage(p.handle) / 1000.0),
        Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", True, "Total energy consumption since boot (in mJ).",
              lambda p: p.nvml.nvmlDeviceGetTotalEnergyConsumption(p.handle)),
        Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", True, "Total number of PCIe retries.",
              lambda p: p.nvml.nvmlDeviceGetPcieReplayCounter(p.handle)),
        Field("DCGM_FI_DEV_GPU_UTIL", False, "GPU utilization (in %).",
              lambda p: p.nvml.nvmlDeviceGetUtilizationRates(p.handle).gpu),
        Field("DCGM_FI_DEV_MEM_COPY_UTIL", False, "Memory utilization (in %).",
              lambda p: p.nvml.nvmlDeviceGetUtilizationRates(p.handle).memory),
        Field("DCGM_FI_DEV_ENC_UTIL", False, "Encoder utilization (in %).",
              lambda p: p.nvml.nvmlDeviceGetEncoderUtilization(p.handle)[0]),
        Field("DCGM_FI_DEV_DEC_UTIL", False, "Decoder utilization (in %).",
              lambda p: p.nvml.nvmlDeviceGetDecoderUtilization(p.handle)[0]),
        # The run's fault board is the driver's Xid log here; 0 is "none", as DCGM reports it. A lost GPU still
        # reports it, while its NVML fields fail and are left out.
        Field("DCGM_FI_DEV_XID_ERRORS", False, "Value of the last XID error encountered.", lambda p: p.last_xid),
        Field("DCGM_FI_DEV_FB_FREE", False, "Framebuffer memory free (in MiB).", memory("free")),
        Field("DCGM_FI_DEV_FB_USED", False, "Framebuffer memory used (in MiB).", memory("used")),
        Field("DCGM_FI_DEV_FB_RESERVED", False, "Framebuffer memory reserved (in MiB).", memory("reserved")),
        Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", True, "Total number of single-bit volatile ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)),
        Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", True, "Total number of double-bit volatile ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)),
        Field("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", True, "Total number of single-bit persistent ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC)),
        Field("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", True, "Total number of double-bit persistent ECC errors.",
              ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC)),
        Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", True, "Number of remapped rows for correctable errors",
              remapped(0)),
        Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", True, "Number of remapped rows for uncorrectable errors",
              remapped(1)),
        Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", False, "Whether remapping of rows has failed", remapped(3)),
    )


def last_xids(folder: str) -> dict[int, int]:
    """{device index: its latest fired Xid} from the run's fault board."""
    latest: dict[int, tuple[int, int]] = {}
    for r in board.fired(board.read(folder)):
        if r.kind == board.KIND_XID and r.fire_ns >= latest.get(r.device, (-1, 0))[0]:
            latest[r.device] = (r.fire_ns, r.code)
    return {d: code for d, (_, code) in latest.items()}


def hostname(environ: dict[str, str] | None = None) -> str:
    """The Hostname label: NODE_NAME where a pod spec passes the node's name down (Kubernetes), else this host's."""
    env = os.environ if environ is None else environ
    return env.get("NODE_NAME") or socket.gethostname()


# dcgm-exporter's labels for the workload a GPU is assigned to, and the variables a pod spec passes them down in
# (the downward API: metadata.name, metadata.namespace; the container's name as the spec writes it).
WORKLOAD_LABELS = (("container", "CONTAINER_NAME"), ("namespace", "POD_NAMESPACE"), ("pod", "POD_NAME"))
# Kubernetes' longest object name (a DNS subdomain); a longer value names no pod, and would repeat on every series.
MAX_NAME = 253


def workload_labels(environ: dict[str, str] | None = None) -> dict[str, str]:
    """container/namespace/pod where known: the exporter runs beside the workload (in its container, or as a
    sidecar of its pod), whose GPUs are all the ones it sees, and the pod spec passes their names down. Outside a
    pod (no POD_NAME) nothing is known and no such label is made (dcgm-exporter makes them only with its Kubernetes
    mapping)."""
    env = os.environ if environ is None else environ
    if not env.get("POD_NAME"):  # CONTAINER_NAME alone is too common a name to mean a pod's container
        return {}
    return {label: env[var] for label, var in WORKLOAD_LABELS if env.get(var) and len(env[var]) <= MAX_NAME}


def load_nvml(lib_dir: str | None = None) -> Any:
    """pynvml, bound to FakeGPU's libnvidia-ml (the checkout's build or $FAKEGPU_NATIVE_DIR) and initialised.

    Inside a FakeGPU container the library is the one the runtime put on the loader's path, so its name is enough.
    A library of NVIDIA's own is never picked up by accident: without FakeGPU's, and outside a FakeGPU container
    or run, this refuses."""
    import pynvml

    from fakegpu.locations import native_lib_dir

    path = os.path.join(lib_dir or native_lib_dir(), NVML_LIBRARY)
    if not os.path.exists(path):
        if not os.environ.get("FAKEGPU_DEVICE_TABLE"):
            raise MetricsError(f"FakeGPU's NVML is not built ({path} is missing; `make native` builds it) and this "
                               "is not a FakeGPU container or run")
        path = NVML_LIBRARY
    with pynvml.libLoadLock:
        if pynvml.nvmlLib is None:
            try:
                pynvml.nvmlLib = ctypes.CDLL(path)
            except OSError as exc:
                raise MetricsError(f"cannot load {path}: {exc}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise MetricsError(f"NVML did not start: {exc}") from exc
    return pynvml


class DcgmCollector:
    """One NVML pass per scrape over every device and field, rendered in Prometheus' text format (0.0.4).

    The format is written here rather than through prometheus_client: its generic writer validates and escapes
    every label of every sample on every scrape, 30 of the 40 ms a 64-GPU scrape took with it, while these
    labels never change and are escaped once (bench/bench_metrics.py measures both)."""

    def __init__(self, nvml: Any, host: str | None = None) -> None:
        self.nvml = nvml
        self.fields = _fields()
        self.host = host or hostname()
        self.workload = workload_labels()
        self.driver = nvml.nvmlSystemGetDriverVersion()
        self.state_dir = state_dir()
        # Identity does not change while the library is loaded; only the readings are taken per scrape.
        self.entities: list[Entity] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                self.entities.extend(self._entities(i))
            except nvml.NVMLError:  # lost before we started: no handle to watch, as DCGM would not attach it
                continue
        self._label_text = [_label_text(e.labels) for e in self.entities]
        self._lock = threading.Lock()

    def _entities(self, index: int) -> list[Entity]:
        nvml = self.nvml
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu = {
            "gpu": str(index),
            "UUID": nvml.nvmlDeviceGetUUID(h),
            "pci_bus_id": nvml.nvmlDeviceGetPciInfo(h).busId,
            "device": f"nvidia{nvml.nvmlDeviceGetMinorNumber(h)}",
            "modelName": nvml.nvmlDeviceGetName(h),
        }
        host = {"Hostname": self.host, "DCGM_FI_DRIVER_VERSION": self.driver, **self.workload}
        try:
            mig = nvml.nvmlDeviceGetMigMode(h)[0] == nvml.NVML_DEVICE_MIG_ENABLE
        except nvml.NVMLError:  # a board without MIG
            mig = False
        if not mig:
            return [Entity(index, h, h, {**gpu, **host})]
        out = []
        for k in range(nvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except nvml.NVMLError:  # an empty slot
                continue
            # The instance's profile, as the GPU instance profile names it ("... MIG 2g.20gb" -> "2g.20gb").
            profile = nvml.nvmlDeviceGetName(m).rsplit(" MIG ", 1)[-1]
            instance = {"GPU_I_PROFILE": profile, "GPU_I_ID": str(nvml.nvmlDeviceGetGpuInstanceId(m))}
            out.append(Entity(index, h, m, {**gpu, **instance, **host}))
        return out

    def readings(self) -> list[tuple[Field, list[tuple[int, float]]]]:
        """Every field with the (device position, value) pairs NVML answers now."""
        error = self.nvml.NVMLError
        xids = last_xids(self.state_dir)
        probes = [Probe(self.nvml, e.handle, e.memory_handle, xids.get(e.index, 0)) for e in self.entities]
        out = []
        with self._lock:  # one NVML pass at a time: scrapes may overlap on the server's threads
            for field in self.fields:
                values = []
                for k, probe in enumerate(probes):
                    try:
                        values.append((k, float(field.read(probe))))
                    except error:
                        continue
                out.append((field, values))
        return out

    def scrape(self) -> bytes:
        """One scrape, as the endpoint serves it."""
        lines = []
        for field, values in self.readings():
            if not values:
                continue
            # dcgm-exporter's counters keep their names without the `_total` suffix OpenMetrics would add.
            lines.append(f"# HELP {field.name} {_escape_help(field.help)}")
            lines.append(f"# TYPE {field.name} {'counter' if field.counter else 'gauge'}")
            lines.extend(f"{field.name}{self._label_text[k]} {_number(v)}" for k, v in values)
        lines.append("")
        return "\n".join(lines).encode()


def _label_text(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    """Integers as integers (dcgm-exporter prints `139`, not `139.0`), the rest as Go prints floats."""
    if value.is_integer() and abs(value) < 1 << 53:
        return str(int(value))
    return repr(value)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve(collector: DcgmCollector, address: str = "0.0.0.0", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """Serve GET /metrics on address:port from a background thread; port 0 picks a free one (server_port says
    which). The caller stops it with shutdown()."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = collector.scrape()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # a scrape every few seconds is not news
            pass

    try:
        server = ThreadingHTTPServer((address, port), Handler)
    except OSError as exc:
        raise MetricsError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="fakegpu-metrics", daemon=True).start()
    return server
