"""`fakegpu simulate-topology`: a collective's size sweep on a cluster fabric, printed as nccl-tests prints it."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import FakeGPUError
from fakegpu.text import table

COMMAND = "simulate-topology"


def simulate_topology(
    fabric_file: Path | None = typer.Option(None, "--fabric-file", "-f", help="A fabric in YAML or JSON "
                                            "(fakegpu/perf/fabric.schema.json); or describe one with the options "
                                            "below."),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes of a generated fabric (default 1)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per node of a generated fabric "
                                             "(default 8)."),
    profile: str | None = typer.Option(None, "--profile", "-p", help="Board of a generated fabric (h100, a100, ...)."),
    fabric: str | None = typer.Option(None, "--fabric", help="Scale-out network of a generated fabric: ib-ndr400, "
                                      "ib-hdr200, roce-400, ... (fakegpu/perf/fabrics.yaml)."),
    rail_optimized: bool | None = typer.Option(None, "--rail-optimized/--no-rail-optimized", help="NIC i of every "
                                               "node on rail i's leaf (default), or a node's NICs on one leaf."),
    nics_per_node: int | None = typer.Option(None, "--nics-per-node", help="NICs per node (default: one per GPU)."),
    oversubscription: float | None = typer.Option(None, "--oversubscription", help="Leaf downlinks per uplink "
                                                  "(1: non-blocking, the default; 2: 2:1)."),
    collective: str = typer.Option("all-reduce", "--collective", "-c", help="all-reduce, all-gather, "
                                   "reduce-scatter, broadcast, reduce, all-to-all or send-recv."),
    algorithm: str = typer.Option("auto", "--algorithm", "-a", help="auto (the fastest per size), ring, tree, "
                                  "nvls, hierarchical or p2p."),
    protocol: str = typer.Option("auto", "--protocol", help="auto, ll, ll128 or simple."),
    sizes: str = typer.Option("8B:8GiB", "--sizes", "-s", help="MIN:MAX swept by --step-factor, or one size."),
    step_factor: float = typer.Option(2.0, "--step-factor", help="Ratio between successive sizes."),
    dtype: str = typer.Option("float", "--dtype", "-d", help="Element type, as nccl-tests names it."),
    root: int = typer.Option(0, "--root", help="Root rank of broadcast and reduce."),
    model_dir: Path | None = typer.Option(None, "--model-dir", help="With a model (config.json): the communication "
                                          "of one training step on the fabric, from plan-training's inputs."),
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
    from fakegpu.errors import UsageError
    from fakegpu.perf.fabric_file import load as load_fabric_file
    from fakegpu.perf.simulate import Request, parse_sizes, simulate
    from fakegpu.perf.topology import Fabric, generated
    from fakegpu.perf.training_comm import Parallelism
    from fakegpu.profiles import load_catalog

    try:
        if fabric_file is not None:
            given = [o for o, v in (("--profile", profile), ("--fabric", fabric), ("--nics-per-node", nics_per_node),
                                    ("--nodes", nodes), ("--gpus-per-node", gpus_per_node),
                                    ("--rail-optimized", rail_optimized), ("--oversubscription", oversubscription))
                     if v is not None]
            if given:
                raise UsageError(f"{', '.join(given)}: the fabric file describes the fabric; give one or the other")
            spec = load_fabric_file(fabric_file)
        else:
            if profile is None:
                raise UsageError("name the board with --profile (or give --fabric-file)")
            spec = generated(1 if nodes is None else nodes, 8 if gpus_per_node is None else gpus_per_node,
                             load_catalog().get(profile), fabric,
                             rail_optimized=True if rail_optimized is None else rail_optimized,
                             nics_per_node=nics_per_node,
                             oversubscription=1.0 if oversubscription is None else oversubscription)
        built = Fabric(spec)
        req = Request(collective=collective, algorithm=None if algorithm == "auto" else algorithm,
                      protocol=None if protocol == "auto" else protocol, dtype=dtype,
                      sizes=parse_sizes(sizes, step_factor), root=root)
        training = None if model_dir is None else (model_dir, Parallelism(
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
    fab = report["fabric"]
    parts = [f"{g['count']} x {g['gpus']} {g['profile']} ({g['system']}"
             + (", NVLS" if g["nvls"] else "") + f", {g['nics']} NICs)" for g in fab["node_groups"]]
    net = fab["network"]
    where = "" if net is None else (f"; {net['fabric']} {net['gb_s_per_port']:g} GB/s per port, "
                                    f"{'rail-optimized' if net['rail_optimized'] else 'one leaf per node group'}, "
                                    f"{net['leaves']} leaves, oversubscription {net['oversubscription']:g}:1")
    if report["training_step"] is not None:
        typer.echo(f"training step on {report['ranks']} GPUs: " + " + ".join(parts) + where)
        _render_step(report["training_step"])
        return
    typer.echo(f"{report['collective']} on {report['ranks']} GPUs: " + " + ".join(parts) + where)
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
