"""`fakegpu simulate-topology`: a collective's size sweep on a cluster fabric, printed as nccl-tests prints it."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli import fabric_options as opts
from fakegpu.cli.output import emit_json, fail
from fakegpu.cli.paths import CONFIG_ACCEPTED, given_path
from fakegpu.errors import FakeGPUError
from fakegpu.text import table

COMMAND = "simulate-topology"


def simulate_topology(
    fabric_file: Path | None = opts.FABRIC_FILE,
    nodes: int | None = opts.NODES,
    gpus_per_node: int | None = opts.GPUS_PER_NODE,
    profile: str | None = typer.Option(None, "--profile", "-p", help="Board of a generated fabric (h100, a100, ...)."),
    fabric: str | None = opts.NETWORK,
    rail_optimized: bool | None = opts.RAIL_OPTIMIZED,
    nics_per_node: int | None = opts.NICS_PER_NODE,
    oversubscription: float | None = opts.OVERSUBSCRIPTION,
    collective: str = typer.Option("all-reduce", "--collective", "-c", help="all-reduce, all-gather, "
                                   "reduce-scatter, broadcast, reduce, all-to-all or send-recv."),
    algorithm: str = typer.Option("auto", "--algorithm", "-a", help="auto (the fastest per size), ring, tree, "
                                  "nvls, hierarchical or p2p."),
    protocol: str = typer.Option("auto", "--protocol", help="auto, ll, ll128 or simple."),
    sizes: str = typer.Option("8B:8GiB", "--sizes", "-s", help="MIN:MAX swept by --step-factor, or one size."),
    step_factor: float = typer.Option(2.0, "--step-factor", help="Ratio between successive sizes."),
    dtype: str = typer.Option("float", "--dtype", "-d", help="Element type, as nccl-tests names it."),
    root: int = typer.Option(0, "--root", help="Root rank of broadcast and reduce."),
    model_dir: str | None = typer.Option(None, "--model-dir", metavar="PATH", help="With a model (config.json): the "
                                         "communication of one training step on the fabric, from plan-training's "
                                         "inputs."),
    tensor_parallel: int = typer.Option(1, "--tensor-parallel", help="Training step: tensor-parallel size."),
    pipeline_parallel: int = typer.Option(1, "--pipeline-parallel", help="Training step: pipeline stages."),
    zero: int = typer.Option(0, "--zero", help="Training step: DeepSpeed ZeRO stage 0-3."),
    fsdp: str = typer.Option("none", "--fsdp", help="Training step: full, hybrid, grad-op or none."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Training step: sequences per micro-batch."),
    seq_len: int = typer.Option(2048, "--seq-len", help="Training step: tokens per sequence."),
    micro_batches: int = typer.Option(1, "--micro-batches", help="Training step: micro-batches per optimizer step "
                                      "(gradient accumulation, or the pipeline's)."),
    precision: str = typer.Option("bf16-mixed", "--precision", help="Training step: bf16-mixed, fp16-mixed, bf16 "
                                  "or fp32."),
    bucket_mb: float = typer.Option(25.0, "--bucket-mb", help="Training step: DDP/ZeRO gradient bucket in MiB."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Simulate a collective on a cluster fabric: time, algbw and busbw per size, and the critical links.

    With --model-dir: the communication of one training step (DDP, ZeRO, FSDP, tensor and pipeline parallel).
    """
    from fakegpu.perf.fabric_options import FabricOptions
    from fakegpu.perf.simulate import Request, parse_sizes, simulate
    from fakegpu.perf.training_comm import Parallelism

    try:
        model = given_path(model_dir, "--model-dir", CONFIG_ACCEPTED)
        built = FabricOptions(fabric_file, nodes, gpus_per_node, profile, fabric, rail_optimized, nics_per_node,
                              oversubscription).build()
        req = Request(collective=collective, algorithm=None if algorithm == "auto" else algorithm,
                      protocol=None if protocol == "auto" else protocol, dtype=dtype,
                      sizes=parse_sizes(sizes, step_factor), root=root)
        training = None if model is None else (model, Parallelism(
            tensor=tensor_parallel, pipeline=pipeline_parallel, zero=zero, fsdp=fsdp, micro_batch=micro_batch,
            seq_len=seq_len, micro_batches=micro_batches, precision=precision, bucket_mb=bucket_mb))
        report = simulate(built, req, training)
    except FakeGPUError as exc:
        raise fail(COMMAND, exc, as_json) from exc
    if as_json:
        emit_json(COMMAND, report)
        return
    _render(report)


def _render(report: dict) -> None:
    from fakegpu.perf.fabric_options import fabric_text

    where = fabric_text(report["fabric"])
    if report["training_step"] is not None:
        typer.echo(f"training step on {report['ranks']} GPUs: {where}")
        _render_step(report["training_step"])
        return
    typer.echo(f"{report['collective']} on {report['ranks']} GPUs: {where}")
    rows = [(r["size"], r["count"], r["type"], f"{r['time_us']:.2f}", f"{r['algbw_gb_s']:.2f}",
             f"{r['busbw_gb_s']:.2f}", f"{r['algorithm']}/{r['protocol']}") for r in report["rows"]]
    typer.echo(table(rows, ["SIZE(B)", "COUNT", "TYPE", "TIME(us)", "ALGBW(GB/s)", "BUSBW(GB/s)", "ALGO/PROTO"]))
    crit = report["critical_links"]
    if crit:
        tied = crit[0].get("tied_links", 1)
        typer.echo(f"critical links ({report['critical_algorithm']} at the largest size; {tied} link(s) at the top "
                   f"load):")
        typer.echo(table([(c["link"], c["class"], f"{c['utilisation']:.2f}", f"{c['load_bytes_per_byte']:.3g}",
                           f"{c['effective_gb_s']:.0f} of {c['line_rate_gb_s']:.0f}") for c in crit],
                         ["LINK", "CLASS", "BUSY", "BYTES/B", "GB/S"]))
    typer.echo(f"peak busbw {report['peak_busbw_gb_s']:.1f} GB/s")
    for note in report["notes"]:
        typer.echo(f"note: {note}")


def _render_step(step: dict) -> None:
    from fakegpu.perf.units import amount_text, seconds_text

    m, p = step["model"], step["parallelism"]
    typer.echo(f"{m['model_type']}: {amount_text(m['parameters'])} parameters, {m['num_layers']} layers; tensor "
               f"{p['tensor']} x pipeline {p['pipeline']} x data {p['data']}, "
               + (f"ZeRO-{p['zero']}" if p["zero"] else f"FSDP {p['fsdp']}" if p["fsdp"] != "none" else "DDP")
               + f", micro-batch {p['micro_batch']} x {p['seq_len']} tokens, {p['micro_batches']} micro-batch(es), "
               f"{p['precision']}")
    rows = [(o["parallelism"], o["collective"], o["name"], f"{o['groups']} x {o['group_size']}",
             amount_text(o["bytes"]) + "B", o["count"], f"{o['algorithm']}/{o['protocol']}",
             seconds_text(o["time_us"] * 1e-6), f"{o['busbw_gb_s']:.1f}", seconds_text(o["seconds"]))
            for o in step["ops"]]
    typer.echo(table(rows, ["PARALLEL", "COLLECTIVE", "WHAT", "GROUPS", "BYTES", "PER STEP", "ALGO/PROTO", "EACH",
                            "BUSBW", "TOTAL"]))
    by = ", ".join(f"{k} {seconds_text(v)}" for k, v in step["seconds_by_parallelism"].items())
    typer.echo(f"communication per step: {seconds_text(step['seconds'])}" + (f" ({by})" if by else ""))
    for note in step["notes"]:
        typer.echo(f"note: {note}")
