"""HolisticTraceAnalysis (PyPI `holistictraceanalysis`, Meta's) on a folder of traces, as a peer to replay-trace:
prints {rank: {idle_pct, compute_pct, non_compute_pct, overlap_pct}} from its get_temporal_breakdown and
get_comm_comp_overlap. Run in a process of its own (HTA configures logging and pulls in pandas and plotly):

    python -m tests.perf.hta_peer DIR [--include-last-step]
"""

from __future__ import annotations

import json
import logging
import math
import sys
import warnings


def main(folder: str, include_last_step: bool) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=folder, include_last_profiler_step=include_last_step)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    out: dict[int, dict[str, float | None]] = {}
    for row in temporal.to_dict("records"):
        span = row["kernel_time(us)"]
        out[int(row["rank"])] = {"span_us": float(span), "idle_pct": 100 * row["idle_time(us)"] / span,
                                 "compute_pct": 100 * row["compute_time(us)"] / span,
                                 "non_compute_pct": 100 * row["non_compute_time(us)"] / span}
    for row in overlap.to_dict("records"):
        pct = row["comp_comm_overlap_pctg"]  # HTA rounds it to 2 decimals
        out[int(row["rank"])]["overlap_pct"] = None if pct is None or math.isnan(pct) else float(pct)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], "--include-last-step" in sys.argv[2:])
