"""`fakegpu doctor`: each readiness check with pass/warn/fail and a one-line fix."""

from __future__ import annotations

from dataclasses import replace

import typer

from fakegpu.cli.output import emit_json
from fakegpu.doctor import FAIL, CheckResult, run_checks
from fakegpu.errors import EXIT_CHECK_FAILED, EXIT_OK
from fakegpu.text import table


def _with_inventory(result: CheckResult) -> CheckResult:
    """The runtime check, naming the inventory its containers select from; a site config the runtime would
    refuse fails every container start, so it fails the check."""
    from fakegpu.cli.container import describe_inventory

    usable, line = describe_inventory()
    if not usable:
        return CheckResult(result.name, FAIL, line, "fix the config, or `fakegpu runtime install --devices SPEC`")
    return replace(result, detail=f"{result.detail}; {line}")


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    program: str | None = typer.Option(
        None, "--program", metavar="PATH",
        help="Also check that FakeGPU can serve this program: no statically linked CUDA runtime in it (or in the "
             "libraries it loads from its own folders). A name is looked up on PATH."),
    image: str | None = typer.Option(None, "--image", metavar="IMAGE",
                                     help="With --program: the program is this image's (looked up on its PATH)."),
) -> None:
    """Check the catalog, native build, Docker Engine, runtime registration (and inventory) and torch; with
    --program (and --image), a program FakeGPU is to run."""
    from fakegpu.doctor import check_program

    if image is not None and program is None:
        typer.echo("fakegpu doctor: --image needs --program (the program in the image to check)", err=True)
        raise typer.Exit(2)
    if image is not None and not image.strip():
        typer.echo("fakegpu doctor: --image '' names no image; give the image the program is in, or leave "
                   "--image out to check the program on this host", err=True)
        raise typer.Exit(2)
    results = [_with_inventory(r) if r.name == "runtime" else r for r in run_checks()]
    if program is not None:
        results.append(check_program(program, image))
    code = EXIT_CHECK_FAILED if any(r.status == FAIL for r in results) else EXIT_OK
    if as_json:
        errors = [{"code": f"check-{r.name}", "message": r.detail} for r in results if r.status == FAIL]
        emit_json("doctor", [r.to_dict() for r in results], code, errors)
    else:
        typer.echo(table([(r.name, r.status.upper(), r.detail, r.fix) for r in results],
                         ["CHECK", "STATUS", "DETAIL", "FIX"]))
    raise typer.Exit(code)
