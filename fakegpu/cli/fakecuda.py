"""`fakegpu demo`: a small training step on fake CUDA (PyTorch on the CPU behind a faithful CUDA surface)."""

from __future__ import annotations

import typer

from fakegpu.cli.output import emit_json, fail, table
from fakegpu.errors import FakeGPUError


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def demo(
    devices: str = typer.Option("a100", "--devices", help="Device spec, e.g. 'a100:2'."),
    steps: int = typer.Option(3, "--steps", min=1, max=100, help="Optimizer steps to run."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Run a forward/backward/optimizer step on fake `cuda` and show devices, loss and peak memory."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise fail("demo", FakeGPUError("fakecuda needs PyTorch: pip install 'fakegpu[torch]'"), as_json) from exc
    from fakegpu.fakecuda.demo import run_demo

    try:
        result = run_demo(devices, steps)
    except FakeGPUError as exc:
        raise fail("demo", exc, as_json) from exc
    if as_json:
        emit_json("demo", result.to_dict())
        return
    typer.echo(f"mode: {result.mode} (torch {result.torch_version}; math on the CPU, CUDA surface faked)")
    typer.echo(table([(d["index"], d["name"], d["compute_capability"], _mib(d["total_memory_bytes"]), d["uuid"])
                      for d in result.devices], ["GPU", "NAME", "CC", "TOTAL", "UUID"]))
    typer.echo("")
    typer.echo("loss per step: " + ", ".join(f"{v:.4f}" for v in result.losses))
    typer.echo(table([(m["index"], _mib(m["peak_allocated_bytes"]), _mib(m["peak_reserved_bytes"]),
                       _mib(m["process_used_bytes"])) for m in result.memory],
                     ["GPU", "PEAK ALLOCATED", "PEAK RESERVED", "PROCESS USED"]))
