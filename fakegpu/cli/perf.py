"""`fakegpu estimate-roofline`: how fast will it run, and what bounds it, on one board or several side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.cli.paths import CONFIG_ACCEPTED, given_path
from fakegpu.errors import FakeGPUError
from fakegpu.text import table


def estimate_roofline(
    profile: list[str] = typer.Option([], "--profile", "-p", help="Board to price on; repeat to compare boards."),
    flops: str | None = typer.Option(None, "--flops", help="One op's FLOPs (1.1e12, 2.5T)."),
    nbytes: str | None = typer.Option(None, "--bytes", help="One op's memory traffic, read plus written (4GiB)."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp64, fp32, tf32, fp16, bf16, fp8, int8, fp4; for "
                                     "--model-dir the compute dtype (default: config.json's torch_dtype)."),
    gemm: str | None = typer.Option(None, "--gemm", help="One GEMM, MxNxK (with --dtype, default bf16)."),
    ops_file: Path | None = typer.Option(None, "--ops", help="An op list, YAML or JSON "
                                         "(fakegpu/perf/ops.schema.json)."),
    model_dir: str | None = typer.Option(None, "--model-dir", metavar="PATH", help="A model folder (or its "
                                         "config.json)."),
    phase: str | None = typer.Option(None, "--phase", help="prefill, decode (default) or train-step."),
    batch: int | None = typer.Option(None, "--batch", help="Sequences per step (default 1)."),
    seq_len: int | None = typer.Option(None, "--seq-len", help="Tokens per sequence; for decode, the context the new "
                                       "token attends to (default 2048)."),
    attention: str | None = typer.Option(None, "--attention", help="SDPA kernel: flash, cudnn or efficient (default: "
                                         "what torch picks)."),
    launch: str = typer.Option("graph", "--launch", help="graph: kernels issued back to back (CUDA graphs); eager: "
                               "PyTorch's per-op dispatch from Python."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Roofline estimate: arithmetic intensity, bound, latency interval, achieved TFLOP/s and bandwidth, MFU.

    Give one of: --flops/--bytes/--dtype, --gemm MxNxK, --ops FILE, or --model-dir DIR with --phase.
    """
    from fakegpu.errors import UsageError
    from fakegpu.perf.request import Request, resolve
    from fakegpu.perf.roofline import estimate
    from fakegpu.profiles import load_catalog

    given = {name for name, value in (("--phase", phase), ("--batch", batch), ("--seq-len", seq_len),
                                      ("--attention", attention)) if value is not None}
    try:
        if not profile:
            raise UsageError("name at least one board with --profile (repeat it to compare boards)")
        boards = [load_catalog().get(p) for p in profile]
        req = Request(flops=flops, bytes=nbytes, gemm=gemm, dtype=dtype, ops_file=ops_file,
                      model_dir=given_path(model_dir, "--model-dir", CONFIG_ACCEPTED),
                      phase=phase or "decode", batch=1 if batch is None else batch,
                      seq_len=2048 if seq_len is None else seq_len, attention=attention, given=given)
        got = resolve(req)
        report = estimate(got.ops, boards, launch=launch, source=got.source, model=got.model, notes=got.notes)
    except FakeGPUError as exc:
        raise fail("estimate-roofline", exc, as_json) from exc
    if as_json:
        emit_json("estimate-roofline", report)
        return
    _render(report)


def _f(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 10 ** digits else f"{value:.{digits}g}"


def _render(report: dict) -> None:
    from fakegpu.perf.units import amount_text, seconds_text

    model = report["model"]
    if model:
        typer.echo(f"{model['model_type']}: {model['num_layers']} layers, {amount_text(model['parameters'])} "
                   f"parameters ({amount_text(model['weight_bytes'])}B of weights in {model['dtype']}); "
                   f"{model['phase']}, batch {model['batch']}, seq-len {model['seq_len']}")
    dtypes = {op["dtype"] for b in report["profiles"] for op in b["ops"] if op["flops"]}
    for i, board in enumerate(report["profiles"]):
        peaks = "; ".join(f"{d} {_f(p['dense_tflops'], 4)} TFLOP/s" + (
            f" ({_f(p['sparse_tflops'], 4)} sparse)" if p["sparse_tflops"] else "") + f", ridge {p['ridge_point']:.0f}"
            for d, p in board["peaks"].items() if d in dtypes)
        gap = "\n" if i or model else ""
        typer.echo(f"{gap}{board['name']} ({board['profile']}, {board['architecture']}): "
                   f"{board['bandwidth_gb_s']:.0f} GB/s, L2 {board['l2_cache_bytes'] >> 20} MiB; {peaks}")
        rows = [(r["name"], r["count"], amount_text(r["flops"]), amount_text(r["bytes"]),
                 _f(r["arithmetic_intensity"]), r["bound"] + (f" ({r['backend']})" if r.get("backend") else ""),
                 seconds_text(r["seconds"]["lower"]), seconds_text(r["seconds"]["expected"]),
                 seconds_text(r["seconds"]["upper"]), _f(r["achieved_tflops"]), _f(r["achieved_bandwidth_gb_s"]),
                 f"{r['mfu']:.2f}") for r in board["ops"]]
        t = board["total"]
        rows.append(("total", "", amount_text(t["flops"]), amount_text(t["bytes"]), _f(t["arithmetic_intensity"]),
                     t["bound"], seconds_text(t["seconds"]["lower"]), seconds_text(t["seconds"]["expected"]),
                     seconds_text(t["seconds"]["upper"]), _f(t["achieved_tflops"]), _f(t["achieved_bandwidth_gb_s"]),
                     f"{t['mfu']:.2f}"))
        typer.echo(table(rows, ["OP", "COUNT", "FLOPS", "BYTES", "FLOP/B", "BOUND", "LOWER", "EXPECTED", "UPPER",
                                "TFLOP/S", "GB/S", "MFU"]))
    if len(report["profiles"]) > 1:
        rows = [(b["profile"], b["total"]["bound"], seconds_text(b["total"]["seconds"]["lower"]),
                 seconds_text(b["total"]["seconds"]["expected"]), seconds_text(b["total"]["seconds"]["upper"]),
                 _f(b["total"]["achieved_tflops"]), _f(b["total"]["achieved_bandwidth_gb_s"]),
                 f"{b['total']['mfu']:.2f}") for b in report["profiles"]]
        typer.echo("\n" + table(rows, ["PROFILE", "BOUND", "LOWER", "EXPECTED", "UPPER", "TFLOP/S", "GB/S", "MFU"]))
    for note in report["notes"]:
        typer.echo(f"note: {note}")
