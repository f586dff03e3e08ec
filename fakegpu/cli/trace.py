"""`fakegpu replay-trace`: where a PyTorch profiler trace's GPU time went, per rank and across ranks, and what the
same step would take on another board."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli import fabric_options as opts
from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError, UsageError, shorten
from fakegpu.text import table


def replay_trace(
    traces: list[Path] = typer.Argument(..., help="Trace files (.json or .json.gz), one per rank, or a directory "
                                        "of them."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="What-if: re-time the trace for this board "
                                       "(and the board of a generated fabric)."),
    from_profile: str | None = typer.Option(None, "--from-profile", help="The board the trace was recorded on "
                                            "(default: the trace's deviceProperties)."),
    fabric_file: Path | None = opts.FABRIC_FILE,
    nodes: int | None = opts.NODES,
    gpus_per_node: int | None = opts.GPUS_PER_NODE,
    fabric: str | None = opts.NETWORK,
    rail_optimized: bool | None = opts.RAIL_OPTIMIZED,
    nics_per_node: int | None = opts.NICS_PER_NODE,
    oversubscription: float | None = opts.OVERSUBSCRIPTION,
    from_fabric_file: Path | None = typer.Option(None, "--from-fabric-file", help="What-if: the fabric the trace "
                                                 "ran on, as --fabric-file (default: one node of the trace's board "
                                                 "per process group)."),
    dtype: str | None = typer.Option(None, "--dtype", help="What-if: the dtype of GEMM and attention kernels whose "
                                     "names do not say (default bf16); needs --profile or a fabric."),
    include_last_step: bool = typer.Option(False, "--include-last-step", help="Also analyse the last "
                                           "ProfilerStep (usually cut off by the profiler's stop)."),
    allow_missing_ranks: bool = typer.Option(False, "--allow-missing-ranks", help="Read files that hold only some "
                                             "of the job's ranks (a sample)."),
    round_us: bool = typer.Option(False, "--round-us", help="Read times as HolisticTraceAnalysis does: each "
                                  "event rounded inward to whole microseconds (to compare with it)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Replay a PyTorch profiler (Kineto) trace: compute, communication, overlap, idle, kernels, memory per rank;
    stragglers across ranks; with --profile, the predicted step time on another board; with a fabric
    (--fabric-file, or --nodes/--gpus-per-node/--fabric ...), its collectives re-priced by simulate-topology's
    model."""
    from fakegpu.perf.fabric_options import FabricOptions
    from fakegpu.perf.trace_fabric import fabric_pricer
    from fakegpu.perf.trace_links import bandwidth_ratio_pricer
    from fakegpu.perf.trace_replay import analyse
    from fakegpu.perf.trace_whatif import source_profile, what_if
    from fakegpu.profiles import load_catalog

    # --profile is the generated fabric's board too, so it is not one of the fabric's own options here
    fab = FabricOptions(fabric_file, nodes, gpus_per_node, None, fabric, rail_optimized, nics_per_node,
                        oversubscription)
    try:
        # Without a what-if nothing is re-timed, so a --dtype there would be dropped without a word
        if dtype is not None and profile is None and not fab.given() and from_fabric_file is None:
            raise UsageError(f"--dtype {shorten(dtype)} needs --profile (or a fabric: --fabric-file, or "
                             "--nodes/--gpus-per-node/--fabric): it is the dtype the what-if re-times GEMM and "
                             "attention kernels at, and without one nothing is re-timed")
        target = load_catalog().get(profile) if profile is not None else None
        report, windows = analyse(list(traces), include_last_step=include_last_step, round_us=round_us,
                                  allow_missing_ranks=allow_missing_ranks, from_profile=from_profile)
        pricer = bandwidth_ratio_pricer
        if fab.given() or from_fabric_file is not None:
            target, pricer = fabric_pricer(windows, fab, from_fabric_file, source_profile(windows, from_profile),
                                           target)
        if target is not None:
            report["what_if"] = what_if(windows, target, from_profile=from_profile, dtype=dtype or "bf16",
                                        pricer=pricer)
    except FakeGPUError as exc:
        raise fail("replay-trace", exc, as_json) from exc
    if as_json:
        emit_json("replay-trace", report)
        return
    _render(report)


def _us(value: float | None) -> str:
    from fakegpu.perf.units import seconds_text

    return "-" if value is None else seconds_text(value * 1e-6)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def _render(report: dict) -> None:
    ranks = report["ranks"]
    rows = [(r["rank"], r["window"]["steps"], _us(r["span_us"]), _us(r["step_us"]), _pct(r["compute_pct"]),
             _pct(r["non_compute_pct"]), _pct(r["communication_pct"]), _pct(r["exposed_communication_pct"]),
             _pct(r["overlap_pct"]), _pct(r["idle_pct"]), _bytes(r["memory"]["device"]["peak_allocated_bytes"]),
             _bytes(r["memory"]["host"]["peak_allocated_bytes"]))
            for r in ranks]
    typer.echo(table(rows, ["RANK", "STEPS", "SPAN", "STEP", "COMPUTE", "NON-COMPUTE", "COMM", "EXPOSED",
                            "OVERLAP", "IDLE", "GPU MEM PEAK",
                            "HOST MEM PEAK"]))
    classes = sorted({c for r in ranks for c in r["classes"]},
                     key=lambda c: (-round(sum(r["classes"].get(c, {}).get("total_us", 0.0) for r in ranks), 3), c))
    rows = [(c, *(_us(r["classes"][c]["total_us"]) if c in r["classes"] else "-" for r in ranks)) for c in classes]
    typer.echo("\n" + table(rows, ["KERNELS", *(f"RANK {r['rank']}" for r in ranks)]))
    _render_flops(report)
    x = report["across_ranks"]
    if len(ranks) > 1:
        typer.echo(f"\nslowest rank: {x['slowest_rank']} ({x['why']}); {x['matched_collectives']} collectives "
                   f"matched, skew mean {_us(x['skew_us']['mean'])}, max {_us(x['skew_us']['max'])}")
        typer.echo("wait for peers: " + ", ".join(f"rank {k} {_us(v)}" for k, v in x["wait_us"].items()))
    w = report["what_if"]
    if w:
        rows = [(r["rank"], _us(r["replayed_source_step_us"]), _us(r["predicted_step_us"]),
                 f"{r['speedup']:.2f}x" if r["speedup"] else "-", _pct(r["launch_bound_pct"]["source"]),
                 _pct(r["launch_bound_pct"]["target"]), _pct(r["mfu_pct"])) for r in w["ranks"]]
        typer.echo(f"\nwhat-if {w['source_profile']} -> {w['target_profile']}: predicted step "
                   f"{_us(w['predicted_step_us'])} (replayed on {w['source_profile']}: {_us(w['source_step_us'])})"
                   + (f", MFU {_pct(w['mfu']['mfu_pct'])}" if w["mfu"]["mfu_pct"] is not None else ""))
        typer.echo(table(rows, ["RANK", "STEP (SOURCE)", "STEP (TARGET)", "SPEEDUP", "LAUNCH-BOUND (SOURCE)",
                                "(TARGET)", "MFU (TARGET)"]))
        by_time = sorted(w["classes"].items(), key=lambda kv: (-round(kv[1]["recorded_us"], 3), kv[0]))
        basis = {cls: b["target"] for cls, b in w["basis"].items()}
        if w["fabric"] is not None:
            basis["nccl (transfer)"] = "topology model (collectives below)"
        rows = [(cls, _us(v["recorded_us"]), _us(v["predicted_us"]), basis.get(cls, "")) for cls, v in by_time]
        typer.echo("\n" + table(rows, ["KERNELS", "RECORDED", "PREDICTED", f"ON {w['target_profile'].upper()}"]))
        if w["fabric"] is not None:
            _render_collectives(w["fabric"], w["basis"]["nccl (transfer)"])
        for note in w["notes"]:
            typer.echo(f"note: {note}")
    for r in ranks:
        e = r["events"]
        ignored = ", ".join(f"{k} {v}" for k, v in e["ignored"].items())
        typer.echo(f"rank {r['rank']}: {e['total']:,} events, {sum(e['used'].values()):,} used, "
                   f"{sum(e['ignored'].values()):,} ignored{f' ({ignored})' if ignored else ''}, "
                   f"{sum(e['unusable'].values()):,} unusable")
    for note in report["notes"]:
        typer.echo(f"note: {note}")


def _flops(value: float) -> str:
    from fakegpu.perf.units import amount_text

    return f"{amount_text(value)}FLOP"


def _render_flops(report: dict) -> None:
    """Model FLOPs per step and MFU per rank, with where the FLOPs came from."""
    ranks = [r for r in report["ranks"] if r["flops"]["total"]]
    if not ranks:
        return
    rows = []
    for r in ranks:
        f = r["flops"]
        sources = ", ".join(f"{k} {v['ops']}" for k, v in f["sources"].items())
        peak = f"{f['peak_tflops']:.4g} TFLOP/s" if f["peak_tflops"] else "-"
        rows.append((r["rank"], _flops(f["per_step"]), f["dominant_dtype"] or "-", _us(f["step_us"]), peak,
                     _pct(f["mfu_pct"]), sources, f["not_counted"]["gemm_kernels"]))
    typer.echo("\n" + table(rows, ["RANK", "FLOPS/STEP", "DTYPE", "STEP", "PEAK", "MFU", "FROM (OPS)",
                                   "GEMMS UNCOUNTED"]))
    job = report["mfu"]
    if len(report["ranks"]) > 1 and job["mfu_pct"] is not None:
        typer.echo(f"job MFU {_pct(job['mfu_pct'])}: {_flops(job['flops_per_step'])} per step over the slowest "
                   f"rank's {_us(job['step_us'])}")


def _render_collectives(fab: dict, basis: dict) -> None:
    from fakegpu.perf.units import amount_text

    typer.echo(f"\ncollectives on {basis['target'].removeprefix('topology model: ')}, from "
               f"{basis['source'].removeprefix('topology model: ')}:")

    def model(m: dict) -> str:
        return f"{_us(m['time_us'])} {m['algorithm']}/{m['protocol']}"

    def size(b: int) -> str:
        text = amount_text(b)
        return text + ("B" if text[-1].isalpha() else " B")

    rows = [(c["collective"], size(c["bytes"]), c["group_ranks"] + ("*" if c["group_ranks_assumed"]
                                                                               else ""),
             c["count"], _us(c["recorded_us"] / c["count"]), model(c["source_model"]), model(c["target_model"]),
             f"{c['ratio']:.3g}", _us(c["predicted_us"] / c["count"])) for c in fab["collectives"]]
    typer.echo(table(rows, ["COLLECTIVE", "BYTES", "RANKS", "COUNT", "RECORDED", "MODEL (SOURCE)",
                            "MODEL (TARGET)", "RATIO", "PREDICTED"]))
