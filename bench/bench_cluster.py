"""`fakegpu cluster up` time for 2, 4 and 8 nodes x 8 fake GPUs on this Docker Engine (issue 7's target: at most
15 s for 4 nodes; the per-node cost should stay flat). Library calls (no CLI start-up), median of --rounds.
Needs the fakegpu/pytorch image (`make images`). Usage: bench_cluster.py [--rounds N] [--nodes 2,4,8]"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid

from fakegpu.cluster.controller import Controller
from fakegpu.cluster.models import ClusterSpec

LABEL = {"org.fakegpu.bench": uuid.uuid4().hex[:8]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", default="2,4,8")
    ap.add_argument("--image", default="fakegpu/pytorch:latest")
    args = ap.parse_args()
    os.environ.setdefault("FAKEGPU_CLUSTER_HOME", tempfile.mkdtemp(prefix="fakegpu-bench-"))
    ctl = Controller()
    print(f"{'nodes':>5}  {'up median s':>11}  {'min s':>6}  {'per node s':>10}  {'down s':>6}  load")
    for n in [int(x) for x in args.nodes.split(",")]:
        ups, downs = [], []
        for r in range(args.rounds):
            name = f"bench-{LABEL['org.fakegpu.bench']}-{n}-{r}"
            spec = ClusterSpec(name=name, nodes=n, devices="a100:8", image=args.image, labels=LABEL)
            t0 = time.perf_counter()
            try:
                ctl.up(spec)
                ups.append(time.perf_counter() - t0)
            finally:
                t1 = time.perf_counter()
                ctl.down(name, purge=True)
                downs.append(time.perf_counter() - t1)
        up = statistics.median(ups)
        print(f"{n:>5}  {up:>11.2f}  {min(ups):>6.2f}  {up / n:>10.2f}  {statistics.median(downs):>6.2f}  "
              f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
