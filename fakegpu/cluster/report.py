"""The merged cluster report: every process report (fakecuda-process) and activity document
(fakecuda-activity) of every node, plus the last run's outcome, the fault timeline and what torchelastic's agents
logged (fakegpu.cluster.elastic), as one document checked against fakegpu.reports' cluster-report schema. Reads
only the host's state folder, so it works after `cluster down`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fakegpu import reports
from fakegpu.cluster import elastic
from fakegpu.cluster import models as m
from fakegpu.cluster.faults import timeline
from fakegpu.fakecuda.report import ACTIVITY_SCHEMA, PROCESS_SCHEMA

SCHEMA = reports.schema_id("cluster-report")
TIGHT = 0.95  # a device whose peak use passes this share of its capacity is "tight"


def _verdict(used: int, capacity: int, oom: bool) -> str:
    if oom or used > capacity:
        return "oom"
    return "tight" if used > TIGHT * capacity else "fits"


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # a process killed while writing leaves a .tmp or nothing; it is counted as missing


def _processes(folder: Path) -> list[dict[str, Any]]:
    """One entry per process: its report joined with its activity document by pid."""
    reports, activity = {}, {}
    for path in sorted(folder.glob("*.json")):
        doc = _load(path)
        if doc and doc.get("schema") == PROCESS_SCHEMA:
            reports[doc["pid"]] = doc
        elif doc and doc.get("schema") == ACTIVITY_SCHEMA:
            activity[doc["pid"]] = doc
    out = []
    for pid, rep in sorted(reports.items()):
        act = activity.get(pid, {})
        timeline = {t["index"]: t["samples"] for t in act.get("timeline", [])}
        devices = []
        for d in rep["devices"]:
            if d["peak_used_bytes"] == 0:
                continue  # never touched by this process (each rank uses its own device)
            devices.append({
                "index": d["index"], "name": d["name"], "uuid": d["uuid"], "capacity_bytes": d["capacity_bytes"],
                "peak_allocated_bytes": d["peak_allocated_bytes"], "peak_reserved_bytes": d["peak_reserved_bytes"],
                "peak_used_bytes": d["peak_used_bytes"],
                "verdict": _verdict(d["peak_used_bytes"], d["capacity_bytes"],
                                    rep["oom"]["occurred"] and rep["oom"]["device"] == d["index"]),
                "timeline": timeline.get(d["index"], []),
            })
        out.append({
            "pid": pid, "name": rep["name"], "rank": act.get("rank"), "local_rank": act.get("local_rank"),
            "world_size": act.get("world_size"), "restart_count": act.get("restart_count"),
            "uncaught_exception": rep["uncaught_exception"],
            "oom": rep["oom"]["occurred"], "devices": devices, "collectives": act.get("collectives", {}),
            "has_activity": bool(act),
        })
    return out


def _device_totals(processes: list[dict]) -> list[dict]:
    """Per device of a node: the sum of its processes' peaks (an upper bound when several share a device)."""
    by_index: dict[int, dict] = {}
    for p in processes:
        for d in p["devices"]:
            row = by_index.setdefault(d["index"], {
                "index": d["index"], "name": d["name"], "uuid": d["uuid"], "capacity_bytes": d["capacity_bytes"],
                "peak_allocated_bytes": 0, "peak_reserved_bytes": 0, "peak_used_bytes": 0, "ranks": [],
                "oom": False})
            for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_used_bytes"):
                row[key] += d[key]
            row["ranks"].append(p["rank"])
            row["oom"] = row["oom"] or d["verdict"] == "oom"
    rows = []
    for row in sorted(by_index.values(), key=lambda r: r["index"]):
        row["verdict"] = _verdict(row["peak_used_bytes"], row["capacity_bytes"], row.pop("oom"))
        rows.append(row)
    return rows


def _sum_collectives(items: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {}
    for stats in items:
        for op, s in stats.items():
            t = total.setdefault(op, {"calls": 0, "bytes": 0})
            t["calls"] += s["calls"]
            t["bytes"] += s["bytes"]
    return dict(sorted(total.items()))


def merge(state_dir: Path) -> dict[str, Any]:
    meta = _load(state_dir / "cluster.json")
    if meta is None:
        raise m.ClusterNotFound(f"no cluster state in {state_dir} (was `fakegpu cluster up` run for it?)")
    run = _load(state_dir / "run.json")
    outcomes = {o["node"]: o for o in (run or {}).get("nodes", [])}
    events = (run or {}).get("elastic_events", [])
    nodes, missing = [], []
    for rank in range(meta["nodes"]):
        host = f"node-{rank}"
        procs = [p for p in _processes(state_dir / "reports" / host) if p["name"] != "torchrun"]
        # torchrun's agent imports torch too (so it writes a report) but owns no device: keep ranks only
        procs = [p for p in procs if p["rank"] is not None or p["devices"]]
        outcome = outcomes.get(host, {"status": "no-run", "exit_code": None, "reason": ""})
        if run and not procs:
            missing.append(host)
        nodes.append({
            "node": host, "node_rank": rank, "status": outcome["status"], "exit_code": outcome["exit_code"],
            "reason": outcome["reason"], "devices": _device_totals(procs), "processes": procs,
            "collectives": _sum_collectives([p["collectives"] for p in procs]),
            "restarts": elastic.restarts(events, host),
        })
    # a rank restarted by torchelastic has a report per start: count ranks, not processes
    ranks = {p["rank"] for n in nodes for p in n["processes"] if p["rank"] is not None}
    all_devices = [d for n in nodes for d in n["devices"]]
    if run is None:
        verdict = "no-run"
    elif any(n["status"] == "failed" for n in nodes) or run["exit_code"] != 0:
        verdict = "failed"
    elif any(d["verdict"] == "oom" for d in all_devices):
        verdict = "oom"
    else:
        verdict = "tight" if any(d["verdict"] == "tight" for d in all_devices) else "fits"
    job = None if run is None else {k: run[k] for k in ("command", "started", "ended", "exit_code")}
    faults = timeline(state_dir)
    return {
        "schema": SCHEMA, "cluster": meta["name"], "run_id": meta["run_id"],
        "mode": meta["mode"], "image": meta["image"], "devices_spec": meta["devices"], "nnodes": meta["nodes"],
        "generated": time.time(),
        "job": job, "verdict": verdict, "rank_count": len(ranks), "nodes_without_reports": missing,
        "collectives": _sum_collectives([n["collectives"] for n in nodes]), "nodes": nodes,
        "faults": faults,
        "elastic": {"sources": elastic.SOURCE, "events": events,
                    "recoveries": elastic.recoveries(faults, events, [n["node"] for n in nodes], job)},
    }


def build(name: str) -> dict[str, Any]:
    doc = merge(m.state_root() / m.check_name(name))
    reports.validate(doc)
    return doc


def summary(doc: dict) -> str:
    from fakegpu.text import human_bytes, table

    rows = []
    for n in doc["nodes"]:
        for p in sorted(n["processes"], key=lambda p: (p["rank"] is None, p["rank"])):
            for d in p["devices"]:
                rank = p["rank"] if not p.get("restart_count") else f"{p['rank']} (restart {p['restart_count']})"
                rows.append((n["node"], n["status"], rank, f"cuda:{d['index']}",
                             human_bytes(d["peak_allocated_bytes"]), human_bytes(d["peak_reserved_bytes"]),
                             human_bytes(d["capacity_bytes"]), d["verdict"]))
        if not n["processes"]:
            rows.append((n["node"], n["status"], "-", "-", "-", "-", "-", "no reports"))
    calls = ", ".join(f"{op} {s['calls']} calls/{human_bytes(s['bytes'])}" for op, s in doc["collectives"].items())
    head = (f"cluster {doc['cluster']}: {doc['nnodes']} nodes x {doc['devices_spec']} ({doc['mode']}), "
            f"{doc['rank_count']} ranks, verdict {doc['verdict']}")
    body = table(rows, ["node", "status", "rank", "device", "peak alloc", "peak reserved", "capacity", "verdict"])
    faults = ", ".join(f"{f['action']} {f['node']}" + (f" gpu {f['gpu']}" if f["gpu"] is not None else "")
                       + (f" rank {f['rank']}" if f.get("rank") is not None else "")
                       + ("" if f["outcome"] == "ok" else " (failed)") for f in doc.get("faults", []))
    text = f"{head}\n{body}\ncollectives: {calls or 'none'}\nfaults: {faults or 'none'}"
    if any(n.get("restarts") for n in doc["nodes"]):
        text += "\nrestarts (torchelastic's log): " + ", ".join(f"{n['node']} {n['restarts']}" for n in doc["nodes"])
    for r in doc.get("elastic", {}).get("recoveries", []):
        text += f"\nafter {r['action']} {r['node']}: {_recovery_text(r)}"
    return text


def _recovery_text(r: dict) -> str:
    if r["rendezvous_s"] is None:
        return "not recovered: the log shows no new rendezvous of every node"
    text = f"every node rendezvoused again after {r['rendezvous_s']:.1f} s"
    if r["first_output_s"] is not None:
        text += f", printed progress after {r['first_output_s']:.1f} s"
    if not r["recovered"]:
        return f"not recovered: {text}, but a new worker group failed"
    return text + f"; time lost {r['time_lost_s']:.1f} s"
