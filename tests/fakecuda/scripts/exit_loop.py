"""Run exit_worker.py N times under fakecuda and count the clean exits (issue 13's acceptance: 50 of 50).

    python tests/fakecuda/scripts/exit_loop.py [-n 50] [--python .venv/bin/python] [--spawn] KIND DESTROY

A run is clean when its exit status is 0 and every rank printed its line. By hand, not from pytest.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
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
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from fakegpu.launcher import python_hook_dir

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "LOCAL_"))}
    hook = python_hook_dir(tempfile.mkdtemp(prefix="exit-loop-"))
    env.update(FAKEGPU_RUNTIME="fakecuda", FAKEGPU_DEVICES="a100:2", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(hook), str(REPO), env.get("PYTHONPATH")])))
    want = [f"rank {r} {args.kind} 3" for r in range(WORLD)]
    clean = 0
    for i in range(1, args.n + 1):
        if args.spawn:
            cmd = [args.python, str(WORKER), args.kind, args.destroy, "spawn"]
        else:
            cmd = [args.python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD), "--master-addr",
                   "127.0.0.1", "--master-port", str(free_port()), str(WORKER), args.kind, args.destroy]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
        printed = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
        ok = proc.returncode == 0 and printed == want
        clean += ok
        signals = sorted({w for w in proc.stderr.split() if w.startswith("-") and w[1:].isdigit()})
        print(f"{i}: exit {proc.returncode}, {len(printed)} rank lines{'' if ok else ', ' + ' '.join(signals)}",
              flush=True)
    print(f"{clean} of {args.n} clean ({args.kind}, destroy={args.destroy}, {'spawn' if args.spawn else 'torchrun'})")
    return 0 if clean == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
