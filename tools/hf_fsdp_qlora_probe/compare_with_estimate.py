"""Print measured per-phase GPU memory (rank 0) next to `fakegpu plan-training`, and per-layer slopes.

Usage: python compare_with_estimate.py WORK_DIR

Reads WORK_DIR/runs/L<N>_offload_<true|false>/mem_rank{0,1}.json (train_with_probes.py) and
WORK_DIR/pred/L<N>_offload_<true|false>.json (plan-training --json). Standard library only, so any python runs it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

MiB = 2**20
EXTRAPOLATE_TO = 80  # Llama-2-70B's layer count

# Probe phase name -> row of the table. Several probes fold into one row (4 micro-steps, 2 optimizer steps):
# the row shows the largest peak among them.
PHASE_ROWS: list[tuple[str, str, str | None]] = [
    # (row, regex on the probe phase, plan-training phase or None when the estimator has no such phase)
    ("load", r"after_model_load$", "load"),
    ("sfttrainer_init(peft wrap)", r"after_sfttrainer_init", None),
    ("fsdp_setup", r"fsdp_wrap", "fsdp_setup"),
    ("forward", r"micro\d+_forward$", "forward"),
    ("backward", r"micro\d+_backward$", "backward"),
    ("between_microsteps", r"(micro\d+_pre|step\d+_begin)$", None),
    ("clip_grad(pre-optim)", r"pre_optimizer_step", None),
    ("optimizer_step", r"optimizer_step$", "optimizer_step"),
    ("evaluate", r"after_evaluate$", None),
    ("epoch_save(SHARDED_STATE_DICT)", r"after_epoch_checkpoint_save", None),
    ("final_save(FULL_STATE_DICT)", r"after_final_save", None),
]
SLOPE_ROWS = ("forward", "backward", "fsdp_setup", "load", "peak")


def layer_count(run_dir: Path) -> int:
    return int(run_dir.name[1:].split("_")[0])  # L<N>_offload_<x>


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def group_phases(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    rows: dict[str, dict[str, int]] = {}
    for rec in records:
        for row, pattern, _ in PHASE_ROWS:
            if re.match(pattern, rec["phase"]):
                agg = rows.setdefault(row, {"max_allocated": 0, "max_reserved": 0})
                agg["max_allocated"] = max(agg["max_allocated"], rec["max_allocated"])
                agg["max_reserved"] = max(agg["max_reserved"], rec["max_reserved"])
                agg["allocated_end"] = rec["allocated"]
                break
    return rows


def pct(pred: float | None, meas: float) -> str:
    return "" if pred is None or not meas else f"{(pred - meas) / meas * 100:+.0f}%"


def mib(value: float | None) -> str:
    return "" if value is None else f"{value / MiB:.0f}"


def run_table(name: str, meas: dict[str, Any], rank1: dict[str, Any] | None, pred: dict[str, Any]) -> list[str]:
    rows = group_phases(meas["records"])
    out = [
        f"\n### {name} (rank 0, MiB; error = (predicted - measured) / measured)\n",
        "| phase | meas max_alloc | meas max_resv | alloc at end | pred max_alloc | pred max_resv "
        "| alloc err | resv err |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row, _, pred_phase in PHASE_ROWS:
        if row not in rows:
            continue
        m = rows[row]
        p = pred["phases"].get(pred_phase) if pred_phase else None
        pa = p["max_memory_allocated"] if p else None
        pr = p["max_memory_reserved"] if p else None
        out.append(
            f"| {row} | {mib(m['max_allocated'])} | {mib(m['max_reserved'])} | {mib(m['allocated_end'])} | "
            f"{mib(pa)} | {mib(pr)} | {pct(pa, m['max_allocated'])} | {pct(pr, m['max_reserved'])} |"
        )
    rm, pk = meas["run_max"], pred["peak"]
    out.append(
        f"| **run max** | **{mib(rm['allocated'])}** ({rm['alloc_phase']}) | **{mib(rm['reserved'])}** "
        f"({rm['resv_phase']}) | | **{mib(pk['max_memory_allocated'])}** ({pk['phase']}) | "
        f"**{mib(pk['max_memory_reserved'])}** | {pct(pk['max_memory_allocated'], rm['allocated'])} | "
        f"{pct(pk['max_memory_reserved'], rm['reserved'])} |"
    )
    if rank1 is not None:
        same = (rank1["run_max"]["allocated"], rank1["run_max"]["reserved"]) == (rm["allocated"], rm["reserved"])
        out.append(
            f"\nrank 1 run max: allocated {mib(rank1['run_max']['allocated'])} MiB, reserved "
            f"{mib(rank1['run_max']['reserved'])} MiB ({'same as' if same else 'DIFFERS from'} rank 0)"
        )
    return out


def measured_value(meas: dict[str, Any], row: str, metric: str) -> float:
    if row == "peak":
        return meas["run_max"]["allocated" if metric == "max_allocated" else "reserved"]
    return group_phases(meas["records"])[row][metric]


def predicted_value(pred: dict[str, Any], row: str, metric: str) -> float:
    phase = pred["peak"] if row == "peak" else pred["phases"][row]
    return phase["max_memory_allocated" if metric == "max_allocated" else "max_memory_reserved"]


def line_through(n_lo: int, v_lo: float, n_hi: int, v_hi: float) -> tuple[float, float]:
    slope = (v_hi - v_lo) / (n_hi - n_lo)
    return slope, v_lo - n_lo * slope


def slope_table(runs: dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    counts = sorted({n for n, _ in runs})
    if len(counts) < 2:
        return []
    lo, hi = counts[0], counts[-1]
    out = [
        f"\n### Per-layer slope and constant (lines through N={lo} and N={hi}; constant = value at N=0; "
        f"@{EXTRAPOLATE_TO} = linear extrapolation, MiB)\n",
        f"| offload | phase | metric | meas slope | meas const | meas @{EXTRAPOLATE_TO} | pred slope | pred const | "
        f"pred @{EXTRAPOLATE_TO} | slope gap (meas - pred) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for offload in ("true", "false"):
        if (lo, offload) not in runs or (hi, offload) not in runs:
            continue
        (m_lo, p_lo), (m_hi, p_hi) = runs[(lo, offload)], runs[(hi, offload)]
        for row in SLOPE_ROWS:
            for metric in ("max_allocated", "max_reserved"):
                ms, mc = line_through(lo, measured_value(m_lo, row, metric), hi, measured_value(m_hi, row, metric))
                ps, pc = line_through(lo, predicted_value(p_lo, row, metric), hi, predicted_value(p_hi, row, metric))
                out.append(
                    f"| {offload} | {row} | {metric} | {ms / MiB:.1f} | {mc / MiB:.0f} | "
                    f"{(mc + EXTRAPOLATE_TO * ms) / MiB:.0f} | {ps / MiB:.1f} | {pc / MiB:.0f} | "
                    f"{(pc + EXTRAPOLATE_TO * ps) / MiB:.0f} | {(ms - ps) / MiB:+.1f} |"
                )
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    work = Path(argv[0])
    runs: dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    out: list[str] = []
    for offload in ("true", "false"):
        for run_dir in sorted((work / "runs").glob(f"L*_offload_{offload}"), key=layer_count):
            n = layer_count(run_dir)
            meas = load_json(run_dir / "mem_rank0.json")
            rank1_path = run_dir / "mem_rank1.json"
            rank1 = load_json(rank1_path) if rank1_path.exists() else None
            pred = load_json(work / "pred" / f"{run_dir.name}.json")["data"]
            runs[(n, offload)] = (meas, pred)
            out += run_table(f"L{n}, offload_params={offload}", meas, rank1, pred)
    if not runs:
        sys.exit(f"no runs under {work / 'runs'}")
    out += slope_table(runs)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
