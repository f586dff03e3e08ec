"""`fakegpu run [--devices SPEC] [--mode native|fakecuda] [--memory full|accounting] [--on-device-read POLICY]
[--fault KEY=VALUE,...] [--faults PLAN] [--telemetry-replay FILE] [--timeout DURATION]
[--timeline TRACE [--profile BOARD]] -- CMD ...`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import typer

from fakegpu.cli.output import fail
from fakegpu.devices import DEFAULT_DEVICES
from fakegpu.errors import FakeGPUError


def run(
    command: list[str] = typer.Argument(None, help="The command and its arguments (after --)."),
    devices: str | None = typer.Option(
        None, "--devices", "-d", help=f"Device spec, e.g. 'a100:2' (default: $FAKEGPU_DEVICES, else {DEFAULT_DEVICES})."
    ),
    mode: str = typer.Option(
        "native",
        "--mode",
        help="native: FakeGPU's CUDA libraries under the unmodified program (kernels are not executed, "
        "tensor values are not valid); fakecuda: PyTorch math on the CPU with a faked CUDA surface.",
    ),
    memory: str | None = typer.Option(
        None,
        "--memory",
        help="native mode's device memory: full (default, $FAKEGPU_MEMORY) keeps bytes written to the device; "
        "accounting reserves and counts only, device memory reads as zeros (tensor values are not kept), "
        "so loading a large model costs almost no host RAM.",
    ),
    report_dir: str | None = typer.Option(
        None,
        "--report-dir",
        help="native mode: each process writes fakegpu-native-<pid>.json there at exit "
        "(schema: fakegpu/reports/schemas/native-process.schema.json).",
    ),
    driver: str | None = typer.Option(
        None,
        "--driver",
        help="The driver version NVML, nvidia-smi and cuDriverGetVersion report (default 580.95.05, "
        "$FAKEGPU_DRIVER_VERSION); its branch decides the CUDA version, so a CUDA 13 build refuses a 550 driver "
        "as on a real host.",
    ),
    on_device_read: str | None = typer.Option(
        None,
        "--on-device-read",
        help="native mode, when the program reads on the host device memory a kernel may have written (values no "
        "GPU gives: kernels do not run): warn (default, $FAKEGPU_ON_DEVICE_READ) prints one warning at the first; "
        "error stops the program there with exit status 86; ignore only counts them in the process report.",
    ),
    fault: list[str] = typer.Option(
        None, "--fault", metavar="KEY=VALUE,...",
        help="Inject a fault into the run, e.g. xid=79,device=1,at=20s (Xid 79: GPU 1 falls off the bus 20 s "
        "after the start; device is an index or UUID; at defaults to 0), corrected_ecc=N (correctable ECC errors), "
        "memory_pressure=20GiB (memory taken outside the run), throttle=thermal,clock=50% (a straggler; for=30s "
        "ends it and memory pressure again) or nccl=hang,rank=1,after_collectives=100 (rank 1's 100th NCCL "
        "operation hangs until torch's watchdog; nccl=error: fails with ncclRemoteError). Repeatable."),
    faults: str | None = typer.Option(
        None, "--faults", metavar="PLAN",
        help="A fault plan (YAML or JSON: {faults: [{xid, corrected_ecc, memory_pressure, throttle or nccl, device "
        "or rank, at, after_allocations or after_collectives}, ...]}; default $FAKEGPU_FAULTS)."),
    telemetry_replay: str | None = typer.Option(
        None, "--telemetry-replay", metavar="FILE",
        help="Play utilization, power, temperature and SM clock from a recording instead of the load model: CSV "
        "with header time,device,metric,value (or JSON of such samples); metric an nvidia-smi query name "
        "(utilization.gpu, utilization.memory, power.draw, temperature.gpu, clocks.sm) or its DCGM_FI_DEV_ name; "
        "default $FAKEGPU_TELEMETRY_REPLAY."),
    timeout: str | None = typer.Option(
        None,
        "--timeout",
        help="End the command (its whole process tree: SIGTERM, then SIGKILL) if it runs longer than this many "
        "seconds (units s, m, h accepted: 90s, 10m), exit status 124, naming its last CUDA activity. The command "
        "then runs in a process group of its own.",
    ),
    timeline: Path | None = typer.Option(
        None, "--timeline", metavar="TRACE",
        help="native mode: write the GPU timeline the run would have on the board, as a PyTorch profiler (Kineto) "
        "trace (.json or .json.gz; one file per process, TRACE.rank<R>.json, when several use the GPU): GEMMs "
        "priced by the roofline, NCCL collectives by the topology model, copies by PCIe and memory bandwidth, other "
        "kernels estimated from their launch (flagged estimated); the host keeps its recorded timing. Prints the "
        "predicted step time (steps: between torch.cuda.synchronize() calls) and MFU. The record logs stay in "
        "--report-dir/timeline when given."),
    timeline_host: str = typer.Option(
        "cpu", "--timeline-host", help="--timeline: space the host's calls by the process's CPU time (cpu, default: "
        "what an unloaded host would take, leaving out time this machine ran other programs) or the wall clock "
        "(wall: sleeps and waits for other processes included)."),
    profile: str | None = typer.Option(
        None, "--profile", "-p", help="--timeline: the board to price the GPU work on (default: the run's first "
        "device)."),
) -> None:
    """Run CMD seeing fake GPUs; exits with CMD's status."""
    from fakegpu.faults import plan
    from fakegpu.launcher import run as launch

    folder: Path | None = None
    try:
        board = _timeline_board(timeline, profile, devices, mode, timeline_host)
        if timeline is not None:
            from fakegpu.perf.timeline_run import fresh_folder

            folder = fresh_folder(Path(report_dir) / "timeline") if report_dir else Path(
                tempfile.mkdtemp(prefix="fakegpu-tl-"))
        chosen = None
        if faults is not None or fault:
            chosen = [*(plan.load_file(faults) if faults is not None else ()), *(plan.parse_flag(f) for f in fault)]
        rc = launch(command or [], devices=devices, mode=mode, memory=memory, report_dir=report_dir, driver=driver,
                    on_device_read=on_device_read, timeout=timeout, faults=chosen, telemetry_replay=telemetry_replay,
                    timeline_dir=folder, price_sheet=_price_sheet(board, devices, mode))
        if timeline is not None and folder is not None:
            _write_timeline(folder, timeline, board, timeline_host)
    except FakeGPUError as exc:
        raise fail("run", exc, False) from exc
    finally:
        if folder is not None and not report_dir:
            shutil.rmtree(folder, ignore_errors=True)
    raise typer.Exit(rc)


def _timeline_board(timeline: Path | None, profile: str | None, devices: str | None, mode: str, host: str):
    """The board --timeline prices on, checked before the program runs (UsageError for a misuse)."""
    from fakegpu.errors import UsageError
    from fakegpu.profiles import load_catalog

    if timeline is None:
        if profile is not None:
            raise UsageError("--profile prices the --timeline; give --timeline TRACE with it")
        return None
    from fakegpu.perf.timeline import HOST_CLOCKS

    if host not in HOST_CLOCKS:
        raise UsageError(f"--timeline-host {host!r}: expected one of {', '.join(HOST_CLOCKS)}")
    if mode != "native":
        raise UsageError("--timeline needs native mode: fakecuda runs PyTorch's math on the CPU and records no GPU "
                         "work (use torch.profiler there)")
    if profile is not None:
        return load_catalog().get(profile)
    return _first_board(devices)


def _first_board(devices: str | None):
    """The board of the run's first device (--devices, else FAKEGPU_DEVICES, else the default)."""
    import os

    from fakegpu.devices import resolve_devices

    spec = devices if devices is not None else os.environ.get("FAKEGPU_DEVICES") or DEFAULT_DEVICES
    return resolve_devices(spec)[0].profile


def _price_sheet(board, devices: str | None, mode: str) -> str | None:
    """What native mode's CUPTI prices torch.profiler's kernels with: --timeline's board, else the first device's
    (FAKEGPU_PRICE_SHEET already set in the environment wins: the launcher keeps what it inherits)."""
    import os

    if mode != "native" or os.environ.get("FAKEGPU_PRICE_SHEET"):
        return None
    from fakegpu.perf.timeline_price import price_sheet

    if board is None:
        board = _first_board(devices)
    try:
        return price_sheet(board)
    except FakeGPUError:  # a workspace board without the rates: the run goes on, a profiler's kernels unpriced
        return None


def _write_timeline(folder: Path, out: Path, board, host: str) -> None:
    from fakegpu.perf.timeline_run import write_timelines
    from fakegpu.perf.units import seconds_text

    for w in write_timelines(folder, out, board, host):
        s = w.summary
        who = f"rank {w.rank}" if w.rank is not None else f"pid {w.pid}"
        mfu = f", MFU {100 * s['mfu']:.1f}% ({s['mfu_dtype']})" if s["mfu"] is not None else ""
        steps = f"{s['steps']} step(s)" if s["steps"] else "the whole run (no steps: fewer than two synchronizations)"
        typer.echo(f"timeline {w.path} ({who}, {board.id}): predicted step {seconds_text(s['step_us'] * 1e-6)} "
                   f"over {steps}; GPU busy {seconds_text(s['gpu_busy_us'] * 1e-6)}, {s['kernels']:.0f} kernels "
                   f"({s['estimated_kernels']:.0f} estimated){mfu}", err=True)
        for note in w.notes:
            typer.echo(f"timeline {w.path}: {note}", err=True)


def nvidia_smi(
    ctx: typer.Context,
    devices: str | None = typer.Option(
        None, "--devices", help=f"Device spec (default: the current run's devices, $FAKEGPU_DEVICES, else "
        f"{DEFAULT_DEVICES}). Every other argument goes to nvidia-smi."
    ),
) -> None:
    """FakeGPU's nvidia-smi, e.g. `fakegpu nvidia-smi -L`, `fakegpu nvidia-smi --devices h100:8 topo -m`."""
    from fakegpu.launcher import nvidia_smi as smi

    try:
        rc = smi(list(ctx.args), devices=devices)
    except FakeGPUError as exc:
        raise fail("nvidia-smi", exc, False) from exc
    raise typer.Exit(rc)
