"""`fakegpu bandwidth`: a collective sweep measured on this host or a cluster, beside the modeled target."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import EXIT_FAILURE, FakeGPUError
from fakegpu.text import table

COMMAND = "bandwidth"
DEFAULT_PROFILE = "h100"


def bandwidth(
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="Run on this running `fakegpu cluster` (one "
                                       "torchrun per node, every node's ranks)."),
    nproc: int | None = typer.Option(None, "--nproc", "-n", help="Or run NPROC ranks on this host (torchrun "
                                     "--standalone under `fakegpu run`)."),
    mode: str = typer.Option("native", "--mode", help="This host: native (FakeGPU's NCCL carries the bytes) or "
                             "fakecuda (gloo does)."),
    devices: str | None = typer.Option(None, "--devices", "-d", help="This host: the device spec (default: "
                                       "NPROC of the --profile board, h100 when none is named)."),
    transport: str = typer.Option("auto", "--transport", help="This host, native mode: FakeGPU's NCCL over shm "
                                  "or socket (TCP, as between hosts); auto picks as NCCL would."),
    worker: str = typer.Option("inline", "--worker", help="A cluster: inline (this host's sweep code travels in "
                               "the command, any node image with torch runs it) or module (the node image's own "
                               "fakegpu.perf.bandwidth_worker)."),
    op: list[str] = typer.Option(["all-reduce"], "--op", "-o", help="all-reduce, all-gather, reduce-scatter, "
                                 "broadcast or all-to-all; repeatable or comma-separated."),
    sizes: str = typer.Option("8B:64MiB", "--sizes", "-s", help="MIN:MAX swept by --step-factor, or one size."),
    step_factor: float = typer.Option(2.0, "--step-factor", help="Ratio between successive sizes."),
    iters: int = typer.Option(20, "--iters", help="Timed calls per size."),
    warmup: int = typer.Option(5, "--warmup", help="Untimed calls per size before them."),
    dtype: str = typer.Option("float", "--dtype", help="Element type, as nccl-tests names it."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="The modeled target's board (default: the "
                                       "run's devices)."),
    fabric: str | None = typer.Option(None, "--fabric", help="The modeled target's network across nodes "
                                      "(default ib-ndr400): ib-ndr400, ib-hdr200, roce-400, ..."),
    fabric_file: Path | None = typer.Option(None, "--fabric-file", help="Or the target as a fabric file with as "
                                            "many GPUs as the run has ranks."),
    timeout: str | None = typer.Option(None, "--timeout", help="This host: end the sweep past this long (90s, "
                                       "10m)."),
    env: list[str] = typer.Option([], "--env", "-e", help="KEY=VALUE for every rank (NCCL_SOCKET_IFNAME, "
                                  "FAKEGPU_NCCL_TIMEOUT_S, ...); repeatable."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Stream the ranks' output to stderr."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Measure a collective size sweep through torch.distributed and print it as nccl-tests does, next to the
    topology model's time, algbw and busbw for the target fabric.

    The measured figures are this host's CPU, shared-memory and TCP speed carrying the ranks' bytes, not a GPU's;
    the modeled ones are the prediction for the target."""
    from fakegpu.errors import UsageError
    from fakegpu.launcher import parse_timeout
    from fakegpu.perf import bandwidth as bw
    from fakegpu.perf import bandwidth_launch as launch
    from fakegpu.perf.simulate import parse_sizes

    echo = (lambda line: print(line, file=sys.stderr)) if verbose else None
    try:
        if (cluster is None) == (nproc is None):
            raise UsageError("give --cluster NAME or --nproc N (where the ranks run)")
        extra_env = launch.parse_env(env)
        sweep = bw.Sweep(ops=[o.strip() for item in op for o in item.split(",") if o.strip()],
                         sizes=parse_sizes(sizes, step_factor), iters=iters, warmup=warmup, dtype=dtype)
        if cluster is not None:
            local_only = [name for name, given in (("--devices", devices), ("--timeout", timeout),
                                                   ("--transport", transport != "auto"),
                                                   ("--mode", mode != "native")) if given]
            if local_only:
                raise UsageError(f"{', '.join(local_only)}: for runs on this host; a cluster has its own")
            info = launch.describe_cluster(cluster)
            target = bw.Target(profile if profile is not None else (None if fabric_file else _board(info.devices)),
                               fabric, fabric_file)
            plan = bw.plan(sweep, info.shape, target)
            _progress(as_json, f"{', '.join(sweep.ops)} on cluster {cluster}: {info.shape.nodes} node(s) x "
                      f"{info.shape.ranks_per_node} rank(s), {info.mode} mode")
            outcome = launch.run_cluster(plan, sweep, info, worker, echo, extra_env=extra_env)
        else:
            if timeout is not None:
                parse_timeout(timeout)  # refused here, not by the `fakegpu run` the sweep starts
            if devices is None:
                devices = f"{profile if profile is not None else DEFAULT_PROFILE}:{nproc}"
            target = bw.Target(profile if profile is not None else (None if fabric_file else _board(devices)), fabric,
                               fabric_file)
            plan = bw.plan(sweep, bw.Shape(1, nproc or 0), target)
            _progress(as_json, f"{', '.join(sweep.ops)} on {nproc} rank(s) of this host, {mode} mode")
            outcome = launch.run_local(plan, sweep, nproc or 0, mode, devices, transport, timeout, echo, extra_env)
        report = bw.report(plan, sweep, outcome.result, outcome.run, outcome.rank_local_calls)
    except FakeGPUError as exc:
        raise fail(COMMAND, exc, as_json) from exc
    wrong = sum(r["check"] != "ok" for o in report["ops"] for r in o["rows"])
    problem = None
    if not report["all_checks_passed"]:
        problem = (f"{wrong} size(s) gave wrong results" if wrong else "") + \
                  (", " if wrong and report["rank_local_calls"] else "") + \
                  (f"{report['rank_local_calls']} NCCL call(s) were rank-local" if report["rank_local_calls"] else "")
    if as_json:
        errors = [{"code": "check-failed", "message": problem}] if problem else []
        emit_json(COMMAND, report, EXIT_FAILURE if problem else 0, errors)
    else:
        render(report)
    if problem:
        if not as_json:
            print(f"fakegpu {COMMAND}: {problem}: data did not move between ranks as it should", file=sys.stderr)
        raise typer.Exit(EXIT_FAILURE)


def _board(devices: str) -> str:
    from fakegpu.devices.spec import parse_spec

    return parse_spec(devices)[0][0].id


def _progress(as_json: bool, text: str) -> None:
    if not as_json:
        print(f"fakegpu {COMMAND}: running {text} ...", file=sys.stderr)


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}x" if value >= 100 else f"{value:.3g}x"


def render(report: dict) -> None:
    """The nccl-tests-style table per op: the host's figures, the check, the model's figures and the ratio."""
    run, fab = report["run"], report["target"]
    where = (f"cluster {run['cluster']} ({run['nodes']} node(s) x {run['ranks_per_node']})" if run["kind"] == "cluster"
             else f"this host ({run['ranks_per_node']} ranks)")
    target = " + ".join(f"{g['count']} x {g['gpus']} {g['profile']} ({g['system']})" for g in fab["node_groups"])
    if fab["network"] is not None:
        target += f"; {fab['network']['fabric']}"
    typer.echo(f"measured on {where}, {run['mode']} mode, {report['dtype']}, {report['iters']} iters after "
               f"{report['warmup']} warmup; modeled on {target}")
    typer.echo("HOST columns: this machine's CPUs, shared memory and TCP moving the bytes, NOT a GPU's speed. "
               "MODEL columns: the topology model's prediction for the target. RATIO: host time / model time. "
               "GB/s throughout.")
    for op in report["ops"]:
        typer.echo(f"\n{op['op']} on {report['ranks']} ranks (busbw = algbw x {op['busbw_factor']:.3g})")
        rows = [(r["size"], r["count"], r["type"], f"{r['measured']['time_us']:.1f}",
                 f"{r['measured']['algbw_gb_s']:.3f}", f"{r['measured']['busbw_gb_s']:.3f}",
                 r["check"] if r["check"] == "ok" else f"WRONG({r['wrong_ranks']})",
                 f"{r['model']['time_us']:.2f}", f"{r['model']['algbw_gb_s']:.2f}", f"{r['model']['busbw_gb_s']:.2f}",
                 f"{r['model']['algorithm']}/{r['model']['protocol']}",
                 _ratio(r["time_ratio"])) for r in op["rows"]]
        typer.echo(table(rows, ["SIZE(B)", "COUNT", "TYPE", "HOST TIME(us)", "HOST ALGBW", "HOST BUSBW", "CHECK",
                                "MODEL TIME(us)", "MODEL ALGBW", "MODEL BUSBW", "ALGO/PROTO", "RATIO"]))
        typer.echo(f"peak busbw: host {op['peak_measured_busbw_gb_s']:.3f}, model {op['peak_model_busbw_gb_s']:.1f}")
    typer.echo("")
    for note in report["notes"]:
        typer.echo(f"note: {note}")
