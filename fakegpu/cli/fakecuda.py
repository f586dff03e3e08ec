"""`fakegpu demo`: a small training step on fake CUDA (PyTorch on the CPU behind a faithful CUDA surface)."""

from __future__ import annotations

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.devices import DEFAULT_DEVICES
from fakegpu.errors import FakeGPUError
from fakegpu.text import table


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def demo(
    devices: str = typer.Option(DEFAULT_DEVICES, "--devices", help="Device spec, e.g. 'a100:2'."),
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


def _verdict_line(doc: dict) -> str:
    text = {"PASS_FIT": "fits", "FAIL_OOM": "out of memory", "RUNTIME_ERROR": "the command failed"}[doc["verdict"]]
    return f"verdict: {doc['verdict']} ({text}) on {doc['devices_spec']} [{doc['mode']}]"


def preflight(
    command: list[str] = typer.Argument(..., help="The command to run, after `--`, e.g. -- python train.py"),
    devices: str = typer.Option(DEFAULT_DEVICES, "--devices", help="Device spec, e.g. 'a100', 't4:2'."),
    mode: str = typer.Option("fakecuda", "--mode", help="fakecuda (PyTorch on the CPU), native (PyTorch's CUDA path "
                                                         "on the CUDA shims, no math) or both (native's verdict, "
                                                         "the two peaks side by side)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (the command's stdout goes to "
                                                       "stderr)."),
) -> None:
    """Run a training command on fake GPUs: peak memory per device, headroom, and whether it fits.

    Exit status: 0 PASS_FIT, 2 FAIL_OOM, 1 the command failed otherwise.
    """
    import sys

    from fakegpu.devices import resolve_devices
    from fakegpu.fakecuda.preflight import MODES, run_preflight
    from fakegpu.launcher import LaunchError

    if mode not in MODES:
        from fakegpu.profiles.documents import not_one_of

        error = FakeGPUError(f"--mode: {not_one_of(mode, MODES)}")
        error.exit_code = 2
        raise fail("preflight", error, as_json)
    try:
        resolve_devices(devices)
        doc = run_preflight(list(command), devices, stdout=sys.stderr if as_json else None, mode=mode)
    except (FakeGPUError, LaunchError) as exc:
        raise fail("preflight", exc, as_json) from exc
    if as_json:
        emit_json("preflight", doc, doc["exit_code"])
        raise typer.Exit(doc["exit_code"])
    typer.echo("")
    typer.echo(_verdict_line(doc))
    typer.echo(table([(d["index"], d["name"], _mib(d["peak_allocated_bytes"]), _mib(d["peak_reserved_bytes"]),
                       _mib(d["peak_used_bytes"]), _mib(d["capacity_bytes"]), _mib(d["headroom_bytes"]))
                      for d in doc["devices"]],
                     ["GPU", "NAME", "PEAK ALLOCATED", "PEAK RESERVED", "PEAK USED", "CAPACITY", "HEADROOM"]))
    if doc["oom"]["occurred"]:
        typer.echo(f"OOM on GPU {doc['oom']['device']}: {doc['oom']['message']}")
    for row in doc.get("comparison", []):
        typer.echo(f"GPU {row['index']}: peak allocated native {_mib(row['native_peak_allocated_bytes'])}, "
                   f"fakecuda {_mib(row['fakecuda_peak_allocated_bytes'])}; peak reserved native "
                   f"{_mib(row['native_peak_reserved_bytes'])}, fakecuda {_mib(row['fakecuda_peak_reserved_bytes'])}")
    for u in doc.get("uncertainty", []):
        typer.echo(f"uncertain: {u['op']} x{u['calls']} ({u['direction']}): {u['why']}")
    for note in doc["notes"]:
        typer.echo(f"note: {note}")
    raise typer.Exit(doc["exit_code"])
