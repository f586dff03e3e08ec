"""`fakegpu devices SPEC`: resolve a device spec the way containers and shims will see it."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.devices import effective_seed, resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.errors import FakeGPUError
from fakegpu.text import human_bytes, table


def devices(
    spec: str = typer.Argument(..., help="Device spec, e.g. 'a100:4', 'a100:2,h100', 't4'."),
    seed: str | None = typer.Option(None, "--seed", help="Identity seed (default: $FAKEGPU_SEED, else 0)."),
    table_path: Path | None = typer.Option(None, "--table", help="Also write the compiled device table here."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Resolve a device spec into ordered devices with stable UUIDs and PCI addresses."""
    seed = effective_seed(seed)
    try:
        resolved = resolve_devices(spec, seed=seed)
        if table_path is not None:
            write_table(table_path, resolved, spec, seed)
    except FakeGPUError as exc:
        raise fail("devices", exc, as_json) from exc
    except OSError as exc:
        err = FakeGPUError(f"cannot write the device table {table_path}: {exc.strerror}")
        raise fail("devices", err, as_json) from exc
    if as_json:
        emit_json("devices", [d.to_dict() for d in resolved])
        return
    rows = [
        (d.index, d.profile.name, d.uuid, d.pci_bus_id, human_bytes(d.profile.memory_total_bytes),
         d.profile.data["compute_capability"])
        for d in resolved
    ]
    typer.echo(table(rows, ["GPU", "NAME", "UUID", "BUS-ID", "MEMORY", "CC"]))
