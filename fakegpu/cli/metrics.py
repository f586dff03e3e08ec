"""`fakegpu metrics [--devices SPEC] [--address ADDR] [--port N] [--once]`: dcgm-exporter's metrics of the fake
GPUs (fakegpu.faults.exporter)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import typer

from fakegpu.cli.output import fail
from fakegpu.devices import DEFAULT_DEVICES
from fakegpu.errors import FakeGPUError


def metrics(
    devices: str | None = typer.Option(
        None, "--devices", help="Device spec (default: the current run's or container's devices, "
        f"$FAKEGPU_DEVICES, else {DEFAULT_DEVICES})."),
    address: str = typer.Option("0.0.0.0", "--address", help="Address to listen on (dcgm-exporter listens on all; "
                                "127.0.0.1 keeps it to this host)."),
    port: int = typer.Option(9400, "--port", min=0, max=65535, help="Port of /metrics (dcgm-exporter's 9400; "
                             "0 picks a free one and prints it)."),
    once: bool = typer.Option(False, "--once", help="Print one scrape to stdout and exit."),
) -> None:
    """Serve the fake GPUs' telemetry on /metrics with dcgm-exporter's metric names and labels, read through NVML
    as nvidia-smi reads it. Inside `fakegpu run` or a FakeGPU container it sees that run's processes, e.g.
    `fakegpu run -d a100:8 -- sh -c 'fakegpu metrics & exec python train.py'`."""
    from fakegpu.faults.exporter import DcgmCollector, load_nvml, serve

    try:
        spec = devices if devices is not None else (
            None if os.environ.get("FAKEGPU_DEVICE_TABLE") else os.environ.get("FAKEGPU_DEVICES"))
        if spec is not None:
            from fakegpu.devices import resolve_devices

            resolve_devices(spec)  # the one spec parser's error, rather than NVML's bare "uninitialized"
        if devices is not None:
            # NVML reads its devices from the environment; a table (inside a run) would win over the spec.
            os.environ["FAKEGPU_DEVICES"] = devices
            os.environ.pop("FAKEGPU_DEVICE_TABLE", None)
        collector = DcgmCollector(load_nvml())
        if once:
            sys.stdout.write(collector.scrape().decode())
            return
        server = serve(collector, address, port)
        print(f"fakegpu metrics: {len(collector.entities)} GPU(s) or GPU instance(s) on http://{address}:{server.server_port}/metrics",
              flush=True)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        server.shutdown()
    except FakeGPUError as exc:
        raise fail("metrics", exc, False) from exc
