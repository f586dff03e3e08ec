"""How many ranks a rehearsal fits on this host, and what each added rank costs (issue 22).

A DDP job of a small MLP (bench/scale_rank.py: 5 steps, then every rank checks the replicas agree) on 1, 4, 16,
32 and 64 ranks, laid out two ways with the node image (fakegpu/pytorch, `make images`):
  cluster   `fakegpu cluster` nodes of up to 8 ranks each (8 x 8 for 64), torchrun in every node container;
  torchrun  one container running one torchrun with all the ranks (the single-host case).
Per run it prints each rank's proportional set size (PSS: its share of the host's memory, shared pages divided
among the processes that map them; read while every rank is alive), the time to the first finished step, the
step time, the sum of every rank's, torchrun agent's and zygote's PSS, and how far the host's MemAvailable fell
(which counts whatever else the host did meanwhile, Docker's own work included).

By default the workers share torch's pages (FAKEGPU_SHARE_TORCH=1: fakegpu/fakecuda/zygote.py); --no-share-torch
measures plain torchrun workers.

Usage: bench_scale.py [--ranks 1,4,16,32,64] [--layout cluster,torchrun] [--mode fakecuda|native]
                      [--steps 5] [--image fakegpu/pytorch:latest] [--no-share-torch] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

RANK_SCRIPT = Path(__file__).with_name("scale_rank.py")
PER_NODE = 8  # ranks per cluster node: an 8-GPU node
LABEL = f"org.fakegpu.bench=scale-{uuid.uuid4().hex[:8]}"


def _available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class MemoryWatch:
    """The largest fall of MemAvailable below its value at the start, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.start = _available_kib()
        self.lowest = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.lowest = min(self.lowest, _available_kib())

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def drop_gib(self) -> float:
        return (self.start - self.lowest) / 2**20


def _rows(lines: list[str]) -> list[dict]:
    """Every `SCALE {...}` record in the output: ranks share one stream, so two may meet on one line."""
    rows, decoder = [], json.JSONDecoder()
    for line in lines:
        at = line.find("SCALE {")
        while at >= 0:
            row, end = decoder.raw_decode(line, at + len("SCALE "))
            rows.append(row)
            at = line.find("SCALE {", end)
    return rows


def _env(mode: str, steps: int, share: bool) -> dict[str, str]:
    env = {"SCALE_STEPS": str(steps), "OMP_NUM_THREADS": "1", "FAKEGPU_SHARE_TORCH": "1" if share else "0"}
    if mode == "native":
        # device memory kept ("full"): in accounting mode the writes are dropped, and DDP's start-up check of the
        # ranks' parameter shapes, which reads an all-gathered tensor back, fails
        env.update(FAKEGPU_RUNTIME="native")
    return env


def run_torchrun(ranks: int, image: str, mode: str, steps: int, share: bool, workdir: Path) -> tuple[list[dict], float]:
    """One container, one torchrun of `ranks` processes; its output lines and the wall time."""
    name = f"fakegpu-bench-scale-{uuid.uuid4().hex[:8]}"
    env = {**_env(mode, steps, share), "FAKEGPU_DEVICES": f"a100:{min(ranks, 64)}"}
    cmd = ["docker", "run", "--rm", "--name", name, "--label", LABEL, "--shm-size", "1g", "-v",
           f"{workdir}:/workspace:ro", "-w", "/workspace", *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
           image, "torchrun", "--standalone", "--nproc-per-node", str(ranks), "/workspace/scale_rank.py"]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"torchrun of {ranks} ranks failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return _rows(out.stdout.splitlines()), wall


def run_cluster(ranks: int, image: str, mode: str, steps: int, share: bool, workdir: Path) -> tuple[list[dict], float]:
    """`fakegpu cluster` of ceil(ranks / 8) nodes, torchrun on each; the job's output lines and its wall time."""
    from fakegpu.cluster.controller import Controller
    from fakegpu.cluster.models import ClusterSpec

    nodes = max(1, -(-ranks // PER_NODE))
    per_node = ranks // nodes
    ctl = Controller()
    name = f"scale-{uuid.uuid4().hex[:8]}"
    spec = ClusterSpec(name=name, nodes=nodes, devices=f"a100:{per_node}", image=image, mode=mode,
                       workdir=str(workdir), labels=dict([LABEL.split("=", 1)]))
    lines: list[str] = []
    env_args = " ".join(f"{k}={v}" for k, v in _env(mode, steps, share).items())
    try:
        ctl.up(spec)
        t0 = time.perf_counter()
        result = ctl.run(name, ["sh", "-c", f"{env_args} torchrun /workspace/scale_rank.py"], emit=lines.append)
        wall = time.perf_counter() - t0
    finally:
        ctl.down(name, purge=True)
    if result.exit_code != 0:
        raise RuntimeError(f"cluster job of {ranks} ranks failed ({result.exit_code}):\n" + "\n".join(lines[-40:]))
    return _rows(lines), wall


def summarize(layout: str, ranks: int, rows: list[dict], wall: float, drop_gib: float) -> dict:
    if len(rows) != ranks:
        raise RuntimeError(f"{layout} {ranks}: {len(rows)} of {ranks} ranks reported")
    pss = [r["pss_mib"] for r in rows]
    agents = [r[k]["pss_mib"] for r in rows for k in ("agent", "zygote") if k in r]
    return {
        "layout": layout, "ranks": ranks,
        "shape": f"{max(1, -(-ranks // PER_NODE))}x{ranks // max(1, -(-ranks // PER_NODE))}"
        if layout == "cluster" else f"1x{ranks}",
        "pss_median_mib": statistics.median(pss), "pss_max_mib": max(pss),
        "anon_median_mib": statistics.median(r["pss_anon_mib"] for r in rows),
        "total_gib": (sum(pss) + sum(agents)) / 1024, "agents_mib": sum(agents),  # agents and zygotes
        "first_step_s": max(r["first_step_s"] for r in rows),
        "step_s": statistics.median(r["step_s"] for r in rows),
        "wall_s": wall, "host_drop_gib": drop_gib,
        "agree": None if any(r["agree"] is None for r in rows) else all(r["agree"] for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,4,16,32,64")
    ap.add_argument("--layout", default="cluster,torchrun")
    ap.add_argument("--mode", default="fakecuda", choices=("fakecuda", "native"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--image", default="fakegpu/pytorch:latest")
    ap.add_argument("--no-share-torch", dest="share", action="store_false",
                    help="each worker imports torch itself (FAKEGPU_SHARE_TORCH=0), as without FakeGPU's zygote")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    os.environ.setdefault("FAKEGPU_CLUSTER_HOME", tempfile.mkdtemp(prefix="fakegpu-bench-scale-"))
    workdir = Path(tempfile.mkdtemp(prefix="fakegpu-bench-scale-work-"))
    shutil.copy(RANK_SCRIPT, workdir / RANK_SCRIPT.name)
    workdir.chmod(0o755)
    runners = {"cluster": run_cluster, "torchrun": run_torchrun}
    print(f"mode {args.mode}, image {args.image}, FAKEGPU_SHARE_TORCH={int(args.share)}, host {os.cpu_count()} CPUs, "
          f"{_available_kib() / 2**20:.1f} GiB available at start")
    print(f"{'layout':8}  {'ranks':>5}  {'shape':>5}  {'PSS/rank MiB':>12}  {'max':>5}  {'anon':>5}  "
          f"{'total GiB':>9}  {'host drop':>9}  {'1st step s':>10}  {'step s':>7}  {'wall s':>6}  agree")
    results = []
    try:
        for layout in args.layout.split(","):
            for ranks in (int(r) for r in args.ranks.split(",")):
                with MemoryWatch() as watch:
                    rows, wall = runners[layout](ranks, args.image, args.mode, args.steps, args.share, workdir)
                s = summarize(layout, ranks, rows, wall, watch.drop_gib)
                results.append(s)
                print(f"{layout:8}  {ranks:>5}  {s['shape']:>5}  {s['pss_median_mib']:>12.0f}  "
                      f"{s['pss_max_mib']:>5.0f}  {s['anon_median_mib']:>5.0f}  {s['total_gib']:>9.2f}  "
                      f"{s['host_drop_gib']:>9.2f}  {s['first_step_s']:>10.1f}  {s['step_s']:>7.3f}  "
                      f"{s['wall_s']:>6.0f}  {'-' if s['agree'] is None else s['agree']}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        subprocess.run(f"docker ps -aq --filter label={LABEL} | xargs -r docker rm -f", shell=True,
                       capture_output=True)
    if len(results) > 1:
        by = {}
        for s in results:
            by.setdefault(s["layout"], []).append(s)
        for layout, rows in by.items():
            if len(rows) > 1:
                a, b = rows[0], rows[-1]
                per = (b["total_gib"] - a["total_gib"]) * 1024 / (b["ranks"] - a["ranks"])
                print(f"{layout}: each added rank costs {per:.0f} MiB of PSS ({a['ranks']} -> {b['ranks']} ranks)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
