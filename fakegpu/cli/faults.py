"""`fakegpu fault inject --xid N|--corrected-ecc N|--memory-pressure SIZE|--throttle REASON [--clock C]
--device GPU | --nccl hang|error --rank R [--at DURATION] [--for DURATION] [--pid PID | --container NAME]`
(fakegpu.faults.inject)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from fakegpu.cli.output import fail
from fakegpu.errors import FakeGPUError, UsageError

if TYPE_CHECKING:
    from fakegpu.faults.inject import ContainerLayout


def container_layout() -> ContainerLayout:
    """The runtime's own rules for its folders; its settings as the runtime reads them (the config file, and
    FAKEGPU_STATE_ROOT, which only matches when dockerd's environment has the same)."""
    from fakegpu_hook.contract import DEVICE_TABLE_NAME
    from fakegpu_hook.settings import SettingsError, load_settings
    from fakegpu_hook.statedir import CONTAINER_STATE

    from fakegpu.faults.inject import ContainerLayout

    try:
        return ContainerLayout(load_settings().state_root, CONTAINER_STATE, DEVICE_TABLE_NAME)
    except SettingsError as exc:
        raise FakeGPUError(str(exc)) from exc


app = typer.Typer(help="Faults in a running run: Xid events, lost GPUs.", no_args_is_help=True)


@app.command("inject")
def inject(
    xid: int | None = typer.Option(None, "--xid",
                                   help="The Xid (13, 31, 43, 48, 63, 64, 74, 79, 94, 95); 79 loses the GPU."),
    corrected_ecc: int | None = typer.Option(
        None, "--corrected-ecc", help="Instead of --xid: this many single-bit errors ECC corrected (no event; the "
        "corrected counters move)."),
    memory_pressure: str | None = typer.Option(
        None, "--memory-pressure", help="Instead of --xid: device memory something outside the run takes from then "
        "on, e.g. 20GiB (used and not free for the run's processes; in no process list)."),
    throttle: str | None = typer.Option(
        None, "--throttle", help="Instead of --xid: hold the GPU's clocks back from then on for a reason (thermal, "
        "hw_thermal, power, power_brake, sync_boost): a straggler."),
    nccl: str | None = typer.Option(
        None, "--nccl", help="Instead of --xid, with --rank: that rank's NCCL operations hang (until torch's watchdog "
        "times them out) or fail with ncclRemoteError (error) from then on."),
    clock: str | None = typer.Option(None, "--clock", help="With --throttle: the SM clock, 900MHz or 50% of the "
                                     "boost clock (default 50%)."),
    device: str | None = typer.Option(None, "--device", help="The GPU: its index in the run, or its UUID."),
    rank: int | None = typer.Option(None, "--rank", help="With --nccl: the global rank ($RANK) it hits."),
    at: str = typer.Option("0", "--at", help="Delay from now (seconds, or 5s, 1m)."),
    lasts: str | None = typer.Option(None, "--for", help="How long a memory pressure, throttle or NCCL fault lasts "
                                     "(seconds, or 30s, 2m; default: until the run ends)."),
    pid: int | None = typer.Option(None, "--pid", help="A process of the target run (default: this shell's run)."),
    container: str | None = typer.Option(None, "--container",
                                         help="A running FakeGPU container (name or id); --device in its numbering."),
) -> None:
    """Inject a fault into a run now, as if the driver had reported it: NVML delivers the Xid event to those who
    registered for it, and Xid 79 makes the GPU lost for NVML and nvidia-smi; --corrected-ecc N counts N
    correctable errors; --memory-pressure SIZE has something outside the run take that much device memory;
    --throttle REASON [--clock C] holds its clocks back (a straggler); --nccl hang|error --rank R makes a rank's
    NCCL operations hang or fail."""
    from fakegpu.faults.inject import inject as put
    from fakegpu.faults.inject import inject_container
    from fakegpu.faults.plan import parse_flag

    try:
        if pid is not None and container is not None:
            raise UsageError("give --pid or --container, not both")
        given = {k: v for k, v in (("xid", xid), ("corrected_ecc", corrected_ecc),
                                   ("memory_pressure", memory_pressure), ("throttle", throttle), ("nccl", nccl))
                 if v is not None}
        if len(given) != 1:
            raise UsageError("give one of --xid N (an Xid event), --corrected-ecc N (correctable errors), "
                             "--memory-pressure SIZE (memory taken outside the run), --throttle REASON (clocks "
                             "held back) or --nccl hang|error (a rank's NCCL operations)")
        if nccl is not None and (rank is None or device is not None):
            raise UsageError("--nccl hits a rank: give --rank R (the global rank, $RANK), not --device")
        if nccl is None and (device is None or rank is not None):
            raise UsageError("give --device GPU (its index in the run, or its UUID); only --nccl takes --rank")
        if clock is not None:
            given["clock"] = clock
        for key, value in given.items():
            if "," in str(value):
                raise UsageError(f"--{key.replace('_', '-')} {value!r}: one value, no commas")
        given["rank" if nccl is not None else "device"] = rank if nccl is not None else device
        if lasts is not None:
            given["for"] = lasts
        what = ",".join(f"{k}={v}" for k, v in given.items())
        fault = parse_flag(f"{what},at={at}", "fault inject")
        done = inject_container(fault, container, container_layout()) if container is not None else put(fault, pid=pid)
    except FakeGPUError as exc:
        raise fail("fault inject", exc, False) from exc
    target = f"container {done.container}" if done.container else f"the run in {done.state_dir}"
    where = "" if fault.nccl is not None else f" on GPU {done.record.device} ({done.uuid})"
    typer.echo(f"{fault.describe()}{where} of {target}" + (f", in {at}" if fault.at_s else ""))
