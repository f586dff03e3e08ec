"""Run exit_worker.py N times under fakecuda and count the clean exits (issue 13's acceptance: 50 of 50).

    python tests/fakecuda/scripts/exit_loop.py [-n 50] [--python .venv/bin/python] [--spawn] KIND DESTROY
    python tests/fakecuda/scripts/exit_loop.py [-n 50] --cluster NODES KIND DESTROY

A run is clean when its exit status is 0 and every rank printed its line. On the host the ranks are torchrun's
(or spawn's) children; with --cluster, one cluster of NODES nodes (2 ranks each, fakegpu/pytorch image) is brought
up once, every run is `fakegpu cluster run ... torchrun`, and the cluster is taken down (--purge) at the end.
By hand, not from pytest.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).with_name("exit_worker.py")
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["ddp", "fsdp1", "fsdp2"])
    ap.add_argument("destroy", choices=["0", "1"])
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--spawn", action="store_true")
    ap.add_argument("--cluster", type=int, metavar="NODES", help="run in a cluster of NODES nodes instead")
    args = ap.parse_args()
    if args.cluster:
        return in_cluster(args)
    scratch = Path(tempfile.mkdtemp(prefix="exit-loop-"))
    try:
        return on_host(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def on_host(args: argparse.Namespace, scratch: Path) -> int:
    sys.path.insert(0, str(REPO))
    from fakegpu.launcher import python_hook_dir

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "LOCAL_"))}
    hook = python_hook_dir(str(scratch))
    env.update(FAKEGPU_RUNTIME="fakecuda", FAKEGPU_DEVICES="a100:2", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), str(REPO), env.get("PYTHONPATH")])))
    want = expected(args.kind, WORLD)
    clean = 0
    for i in range(1, args.n + 1):
        if args.spawn:
            cmd = [args.python, str(WORKER), args.kind, args.destroy, "spawn"]
        else:
            cmd = [args.python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD), "--master-addr",
                   "127.0.0.1", "--master-port", str(free_port()), str(WORKER), args.kind, args.destroy]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
        clean += judge(i, proc, want)
    print(f"{clean} of {args.n} clean ({args.kind}, destroy={args.destroy}, {'spawn' if args.spawn else 'torchrun'})")
    return 0 if clean == args.n else 1


def expected(kind: str, world: int) -> list[str]:
    """Every rank's line: the all_reduce sums rank + 1 over the world."""
    return sorted(f"rank {r} {kind} {world * (world + 1) // 2}" for r in range(world))


def judge(i: int, proc: subprocess.CompletedProcess[str], want: list[str]) -> bool:
    # the cluster prefixes each line with its node ("[node-1] rank 3 ddp 10")
    printed = sorted(m.group(1) for line in proc.stdout.splitlines()
                     if (m := re.match(r"^(?:\[[\w.-]+\] )?(rank \d+ \S+ \S+)$", line)))
    ok = proc.returncode == 0 and printed == want
    signals = sorted({w for w in proc.stderr.split() if w.startswith("-") and w[1:].isdigit()})
    print(f"{i}: exit {proc.returncode}, {len(printed)} rank lines{'' if ok else ', ' + ' '.join(signals)}",
          flush=True)
    if not ok:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n", flush=True)
    return ok


def in_cluster(args: argparse.Namespace) -> int:
    fakegpu = [str(Path(args.python).with_name("fakegpu"))]
    nproc = WORLD
    world = args.cluster * nproc
    workdir = Path(tempfile.mkdtemp(prefix="exit-loop-cluster-"))
    (workdir / "exit_worker.py").write_text(WORKER.read_text())
    name = f"exit-loop-{uuid.uuid4().hex[:8]}"
    up = subprocess.run([*fakegpu, "cluster", "up", name, "--nodes", str(args.cluster), "--devices",
                         f"a100:{nproc}", "--mode", "fakecuda", "--workdir", str(workdir)],
                        capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        print(up.stdout, up.stderr, sep="\n")
        subprocess.run([*fakegpu, "cluster", "down", name, "--purge"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
        return 2
    want = expected(args.kind, world)
    clean = 0
    try:
        for i in range(1, args.n + 1):
            proc = subprocess.run([*fakegpu, "cluster", "run", name, "--", "torchrun", "--nproc-per-node",
                                   str(nproc), "exit_worker.py", args.kind, args.destroy],
                                  capture_output=True, text=True, timeout=600)
            clean += judge(i, proc, want)
    finally:
        down = subprocess.run([*fakegpu, "cluster", "down", name, "--purge"], capture_output=True, text=True)
        print(f"down exited {down.returncode}")
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{clean} of {args.n} clean ({args.kind}, destroy={args.destroy}, cluster of {args.cluster} nodes x "
          f"{nproc} ranks)")
    return 0 if clean == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
