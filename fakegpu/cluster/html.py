"""The merged cluster report as one self-contained HTML page: inline SVG plots (memory over time per rank,
per-device peaks as bars against capacity), no scripts, styles or fonts fetched from anywhere."""

from __future__ import annotations

import time
from html import escape

MiB = 1 << 20
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
_VERDICT_COLOR = {"fits": "#2ca02c", "tight": "#ff7f0e", "oom": "#d62728"}


def _timeline_svg(doc: dict, width: int = 720, height: int = 260) -> str:
    series = []
    for n in doc["nodes"]:
        for p in n["processes"]:
            for d in p["devices"]:
                if d["timeline"]:
                    series.append((f"rank {p['rank']} ({n['node']} cuda:{d['index']})", d["timeline"]))
    if not series:
        return "<p>No memory samples (processes shorter than the sampling interval, or an older fakegpu).</p>"
    t_max = max(rows[-1][0] for _, rows in series) or 1.0
    y_max = max(s[1] for _, rows in series for s in rows) or 1
    left, bottom = 60, 30
    w, h = width - left - 10, height - bottom - 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="allocated memory over time per rank">',
             f'<line x1="{left}" y1="{10 + h}" x2="{left + w}" y2="{10 + h}" stroke="#333"/>',
             f'<line x1="{left}" y1="10" x2="{left}" y2="{10 + h}" stroke="#333"/>',
             f'<text x="{left - 5}" y="16" text-anchor="end" font-size="10">{y_max / MiB:.1f} MiB</text>',
             f'<text x="{left - 5}" y="{10 + h}" text-anchor="end" font-size="10">0</text>',
             f'<text x="{left + w}" y="{height - 8}" text-anchor="end" font-size="10">{t_max:.1f} s</text>']
    for i, (label, rows) in enumerate(series):
        points = " ".join(f"{left + w * t / t_max:.1f},{10 + h - h * a / y_max:.1f}" for t, a, _ in rows)
        color = _COLORS[i % len(_COLORS)]
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}">'
                     f"<title>{escape(label)}</title></polyline>")
    parts.append("</svg>")
    legend = " ".join(f'<span style="color:{_COLORS[i % len(_COLORS)]}">&#9632; {escape(label)}</span>'
                      for i, (label, _) in enumerate(series))
    return "".join(parts) + f"<p>{legend}</p>"


def _bars_svg(doc: dict, width: int = 720) -> str:
    rows = [(f"{n['node']} cuda:{d['index']}", d) for n in doc["nodes"] for d in n["devices"]]
    if not rows:
        return "<p>No device was used.</p>"
    bar_h, left = 18, 130
    height = bar_h * len(rows) + 20
    w = width - left - 150
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="peak memory per device against capacity">']
    for i, (label, d) in enumerate(rows):
        y = 5 + i * bar_h
        share = min(1.0, d["peak_used_bytes"] / d["capacity_bytes"]) if d["capacity_bytes"] else 0.0
        color = _VERDICT_COLOR[d["verdict"]]
        parts.append(f'<text x="{left - 5}" y="{y + 12}" text-anchor="end" font-size="11">{escape(label)}</text>'
                     f'<rect x="{left}" y="{y}" width="{w}" height="{bar_h - 4}" fill="#eee" stroke="#999"/>'
                     f'<rect x="{left}" y="{y}" width="{max(1.0, w * share):.1f}" height="{bar_h - 4}" '
                     f'fill="{color}"><title>{d["peak_used_bytes"] // MiB} of {d["capacity_bytes"] // MiB} MiB'
                     f"</title></rect>"
                     f'<text x="{left + w + 5}" y="{y + 12}" font-size="11">{d["peak_used_bytes"] // MiB} / '
                     f'{d["capacity_bytes"] // MiB} MiB ({share:.2%})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rank(p: dict) -> str:
    restart = p.get("restart_count")
    return f"{p['rank']}" + (f" (restart {restart})" if restart else "")


def _table(doc: dict) -> str:
    head = ("<tr><th>node</th><th>status</th><th>rank</th><th>device</th><th>peak allocated</th>"
            "<th>peak reserved</th><th>peak used</th><th>capacity</th><th>verdict</th><th>collectives</th></tr>")
    body = []
    for n in doc["nodes"]:
        if not n["processes"]:
            body.append(f"<tr><td>{n['node']}</td><td>{escape(n['status'])}</td>"
                        f"<td colspan=8>no process reports {escape(n['reason'])}</td></tr>")
        for p in n["processes"]:
            coll = ", ".join(f"{op}: {s['calls']}" for op, s in p["collectives"].items()) or "-"
            for d in p["devices"]:
                body.append(
                    f"<tr><td>{n['node']}</td><td>{escape(n['status'])}</td><td>{_rank(p)}</td>"
                    f"<td>cuda:{d['index']} {escape(d['name'])}</td><td>{d['peak_allocated_bytes'] // MiB} MiB</td>"
                    f"<td>{d['peak_reserved_bytes'] // MiB} MiB</td><td>{d['peak_used_bytes'] // MiB} MiB</td>"
                    f"<td>{d['capacity_bytes'] // MiB} MiB</td><td>{d['verdict']}</td><td>{escape(coll)}</td></tr>")
    return f"<table>{head}{''.join(body)}</table>"


_SOURCE_LABEL = {"fault": "fakegpu cluster fault", "torchelastic": "torchelastic log", "job": "job output"}


def _timeline_rows(doc: dict) -> list[tuple[float, str, str, str, str]]:
    """(time, source, node, what, detail) of every injected fault and recognised log event, in time order."""
    rows = []
    for f in doc.get("faults", []):
        what = f["action"] + ("" if f["gpu"] is None else f" GPU {f['gpu']}") + (
            f" rank {f['rank']}" if f.get("rank") is not None else "")
        rows.append((f["time"], "fault", f["node"], what, f"{f['outcome']}: {f['detail']}"))
    for e in doc.get("elastic", {}).get("events", []):
        rows.append((e["time"], e["source"], e["node"], e["kind"], e["detail"]))
    return sorted(rows, key=lambda r: r[0])


def _recoveries(doc: dict) -> str:
    items = []
    for r in doc.get("elastic", {}).get("recoveries", []):
        if r["rendezvous_s"] is None:
            back = "<b>not recovered</b>: the log shows no new rendezvous of every node after it"
        else:
            back = f"every node's agent completed a rendezvous {r['rendezvous_s']:.1f} s later"
            if r["first_output_s"] is not None:
                back += f", and the new workers of every node printed progress {r['first_output_s']:.1f} s later"
            back += (f"; <b>time lost {r['time_lost_s']:.1f} s</b>" if r["recovered"]
                     else "; <b>not recovered</b>: a new worker group failed")
        restarts = ", ".join(f"{escape(n)} {c}" for n, c in r["restarts"].items())
        items.append(f"<li>{escape(r['action'])} {escape(r['node'])}: {back} (worker group restarts: {restarts})"
                     "</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _faults_table(doc: dict) -> str:
    rows = _timeline_rows(doc)
    if not rows:
        return "<p>No faults were injected (<code>fakegpu cluster fault</code>) and no restarts were logged.</p>"
    job = doc["job"]
    head = "<tr><th>time (UTC)</th><th>into the job</th><th>source</th><th>node</th><th>what</th>" \
           "<th>detail</th></tr>"
    body = []
    for when, source, node, what, detail in rows:
        into = "-" if job is None else f"{when - job['started']:+.1f} s"
        body.append(f"<tr><td>{time.strftime('%H:%M:%S', time.gmtime(when))}.{int(when % 1 * 1000):03d}</td>"
                    f"<td>{into}</td><td>{_SOURCE_LABEL.get(source, escape(source))}</td><td>{escape(node)}</td>"
                    f"<td>{escape(what)}</td><td>{escape(detail)}</td></tr>")
    sources = doc.get("elastic", {}).get("sources", {})
    note = ("<p>Rows from the torchelastic log are the agents' own log lines and rows from job output the workers' "
            "own lines, as <code>cluster run</code> received them; nothing is inferred. "
            + " ".join(f"{escape(k)}: {escape(v)}." for k, v in sources.items())
            + " Restarts and rendezvous are logged at INFO (LOGLEVEL=INFO, set by <code>cluster run</code> for "
            "torchrun unless the node or the command sets LOGLEVEL).</p>")
    return f"<table>{head}{''.join(body)}</table>{_recoveries(doc)}{note}"


def render(doc: dict) -> str:
    job = doc["job"]
    job_line = "no job run yet" if job is None else (
        f"job <code>{escape(' '.join(job['command']))}</code> exited {job['exit_code']} "
        f"after {job['ended'] - job['started']:.1f} s")
    coll = "".join(f"<li>{escape(op)}: {s['calls']} calls, {s['bytes'] // MiB} MiB</li>"
                   for op, s in doc["collectives"].items()) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fakegpu cluster {escape(doc['cluster'])}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}} th{{background:#f4f4f4}}</style></head><body>
<h1>Cluster {escape(doc['cluster'])}: {escape(doc['verdict'])}</h1>
<p>{doc['nnodes']} nodes &times; {escape(doc['devices_spec'])} ({escape(doc['mode'])}, image
{escape(doc['image'])}), {doc['rank_count']} ranks; {job_line}.</p>
<h2>Allocated memory over time, per rank</h2>{_timeline_svg(doc)}
<h2>Peak memory per device against capacity</h2>{_bars_svg(doc)}
<h2>Ranks</h2>{_table(doc)}
<h2>Collectives (all ranks)</h2><ul>{coll}</ul>
<h2>Fault timeline</h2>{_faults_table(doc)}
</body></html>
"""
