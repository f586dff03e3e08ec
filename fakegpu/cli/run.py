"""`fakegpu run [--devices SPEC] [--mode native|fakecuda] -- CMD ...`: run a command with fake GPUs."""

from __future__ import annotations

import typer

from fakegpu.cli.output import fail
from fakegpu.errors import FakeGPUError


def run(
    command: list[str] = typer.Argument(None, help="The command and its arguments (after --)."),
    devices: str | None = typer.Option(
        None, "--devices", "-d", help="Device spec, e.g. 'a100:2' (default: $FAKEGPU_DEVICES, else a100:1)."
    ),
    mode: str = typer.Option(
        "native",
        "--mode",
        help="native: FakeGPU's CUDA libraries under the unmodified program (kernels are not executed, "
        "tensor values are not valid); fakecuda: PyTorch math on the CPU with a faked CUDA surface.",
    ),
) -> None:
    """Run CMD seeing fake GPUs; exits with CMD's status."""
    from fakegpu.launcher import run as launch

    try:
        rc = launch(command or [], devices=devices, mode=mode)
    except FakeGPUError as exc:
        raise fail("run", exc, False) from exc
    raise typer.Exit(rc)
