"""`fakegpu doctor`: each readiness check with pass/warn/fail and a one-line fix."""

from __future__ import annotations

import typer

from fakegpu.cli.output import emit_json
from fakegpu.doctor import FAIL, run_checks
from fakegpu.errors import EXIT_CHECK_FAILED, EXIT_OK
from fakegpu.text import table


def doctor(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Check the catalog, native build, Docker Engine, runtime registration and torch."""
    results = run_checks()
    code = EXIT_CHECK_FAILED if any(r.status == FAIL for r in results) else EXIT_OK
    if as_json:
        errors = [{"code": f"check-{r.name}", "message": r.detail} for r in results if r.status == FAIL]
        emit_json("doctor", [r.to_dict() for r in results], code, errors)
    else:
        typer.echo(table([(r.name, r.status.upper(), r.detail, r.fix) for r in results],
                         ["CHECK", "STATUS", "DETAIL", "FIX"]))
    raise typer.Exit(code)
