"""Cluster soak (issue 13): up / DDP job / down cycles on the machine's Docker Engine, and `down` after the
controller of a running job was SIGKILLed. After every down nothing of the cluster is left: no container,
network or volume with its label (nor the node containers' anonymous volumes), no state folder, no job process."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from fakegpu.cluster import models as m
from tests.cluster.conftest import LABEL, cleanup_by_label, cluster_home, cluster_name, labelled, node_image  # noqa: F401
from tests.conftest import run_cli
from tests.soak.conftest import count

pytestmark = [pytest.mark.soak, pytest.mark.docker]
FAKEGPU = Path(sys.executable).with_name("fakegpu")
NPROC, NODES = 2, 2
WORLD = NPROC * NODES

# Written for real GPUs and, on purpose, without destroy_process_group(): the run must still exit 0.
DDP_JOB = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    model = DDP(torch.nn.Linear(16, 4).to(device), device_ids=[local])
    model(torch.randn(8, 16, device=device)).pow(2).mean().backward()
    total = torch.ones(1, device=device)
    dist.all_reduce(total)
    assert int(total.item()) == world, total
    print(f"soak-ddp-ok rank {rank}/{world}", flush=True)


if __name__ == "__main__":
    main()
"""

# Each rank says it is up, then sleeps past any test; argv[1] is a token to find its processes by.
SLEEPER = """\
import os
import sys
import time

print(f"soak-sleeping rank {os.environ['RANK']} {sys.argv[1]}", flush=True)
time.sleep(900)
"""


def up(name: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("cluster", "up", name, "--label", LABEL, "--workdir", str(workdir), "--nodes", str(NODES),
                   "--devices", f"a100:{NPROC}")


def anonymous_volumes(client, name: str) -> set[str]:
    """Volumes mounted in the cluster's containers that are not host binds (removed with them, or leaked)."""
    out = set()
    for c in client.containers.list(all=True, filters={"label": f"{m.LABEL_CLUSTER}={name}"}):
        out |= {mt["Name"] for mt in c.attrs.get("Mounts", []) if mt.get("Type") == "volume"}
    return out


def leftovers(client, name: str, volumes: set[str]) -> dict[str, list[str]]:
    label = f"{m.LABEL_CLUSTER}={name}"
    existing = {v.name for v in client.volumes.list()}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters={"label": label})],
        "networks": [n.name for n in client.networks.list(filters={"label": label})],
        "volumes": sorted({v.name for v in client.volumes.list(filters={"label": label})} | (volumes & existing)),
    }


def host_processes(token: str) -> list[str]:
    """Processes anywhere on the host (container processes included) whose command line has token."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout.splitlines()
    return [p.strip() for p in out if token in p]


def down(name: str) -> subprocess.CompletedProcess[str]:
    return run_cli("cluster", "down", name, "--purge")  # --purge: the state folder (reports) goes too


def test_up_ddp_job_down_cycles_leave_nothing(docker_client, node_image, labelled, cluster_home, tmp_path,  # noqa: F811
                                               soak_record):
    cycles = count(2, 20)
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "ddp_no_destroy.py").write_text(DDP_JOB)
    name = cluster_name("soak-cycle")  # one name reused: a leak would also make the next `up` refuse
    markers = [f"soak-ddp-ok rank {r}/{WORLD}" for r in range(WORLD)]
    failures: list[str] = []
    leaked = {"containers": 0, "networks": 0, "volumes": 0, "state_dirs": 0}
    start = time.monotonic()
    for i in range(cycles):
        volumes: set[str] = set()
        try:
            result = up(name, workdir)
            if result.returncode != 0:
                failures.append(f"cycle {i}: up exited {result.returncode}: {result.stderr[-1500:]}")
                continue
            volumes = anonymous_volumes(docker_client, name)
            result = run_cli("cluster", "run", name, "--", "torchrun", "--nproc-per-node", str(NPROC),
                             "ddp_no_destroy.py")
            missing = [mk for mk in markers if result.stdout.count(mk) != 1]
            if result.returncode != 0 or missing:
                failures.append(f"cycle {i}: run exited {result.returncode}, markers missing {missing}:\n"
                                f"{result.stdout[-2500:]}\n{result.stderr[-1500:]}")
        finally:
            gone = down(name)
            if gone.returncode != 0:
                failures.append(f"cycle {i}: down exited {gone.returncode}: {gone.stderr[-1500:]}")
            left = leftovers(docker_client, name, volumes)
            for kind, objects in left.items():
                leaked[kind] += len(objects)
            if (cluster_home / name).exists():
                leaked["state_dirs"] += 1
            if any(left.values()) or (cluster_home / name).exists():
                failures.append(f"cycle {i}: left after down: {left}, state dir {(cluster_home / name).exists()}")
                cleanup_by_label(docker_client)  # the next cycle starts clean, so one leak is counted once
    seconds = time.monotonic() - start
    soak_record(cycles=cycles, nodes=NODES, nproc_per_node=NPROC, failures=len(failures),
                leaked_containers=leaked["containers"], leaked_networks=leaked["networks"],
                leaked_volumes=leaked["volumes"], leaked_state_dirs=leaked["state_dirs"],
                seconds=round(seconds, 1), seconds_per_cycle=round(seconds / cycles, 1))
    assert not failures, "\n\n".join(failures[:3])


def _reader(pipe, lines: queue.Queue) -> None:
    for line in pipe:
        lines.put(line)
    lines.put(None)


def _run_until_every_rank_sleeps(name: str, token: str, timeout_s: float = 150) -> tuple[subprocess.Popen, str]:
    """Start `fakegpu cluster run` (the controller) on the sleeper job; return once every rank has printed."""
    proc = subprocess.Popen([str(FAKEGPU), "cluster", "run", name, "--", "torchrun", "--nproc-per-node",
                             str(NPROC), "sleeper.py", token], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    seen, out, deadline = set(), [], time.monotonic() + timeout_s
    while len(seen) < WORLD and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        out.append(line)
        seen |= {int(r) for r in re.findall(rf"soak-sleeping rank (\d+) {token}", line)}
    return proc, "".join(out) if len(seen) < WORLD else ""


def test_down_after_the_controller_is_killed_mid_run_leaves_nothing(docker_client, node_image, labelled,  # noqa: F811
                                                                    cluster_home, tmp_path, soak_record):  # noqa: F811
    runs = count(1, 5)
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "sleeper.py").write_text(SLEEPER)
    name = cluster_name("soak-kill")
    failures: list[str] = []
    leaked = {"containers": 0, "networks": 0, "volumes": 0, "state_dirs": 0, "processes": 0}
    killed = 0
    start = time.monotonic()
    for i in range(runs):
        token = f"soak-{uuid.uuid4().hex[:12]}"
        volumes: set[str] = set()
        proc = None
        try:
            result = up(name, workdir)
            if result.returncode != 0:
                failures.append(f"run {i}: up exited {result.returncode}: {result.stderr[-1500:]}")
                continue
            volumes = anonymous_volumes(docker_client, name)
            proc, partial = _run_until_every_rank_sleeps(name, token)
            if partial or proc.poll() is not None:
                failures.append(f"run {i}: not every rank started (controller {proc.poll()}):\n{partial[-2500:]}")
                continue
            os.kill(proc.pid, 9)  # SIGKILL the controller: no handler, no cleanup of its own
            proc.wait(timeout=30)
            killed += 1
            time.sleep(1)
            survivors = host_processes(token)  # the job lives on in the nodes: exec'd processes are not ours
            if not survivors:
                failures.append(f"run {i}: the job ended with its controller; nothing left for down to do")
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            gone = down(name)
            if gone.returncode != 0:
                failures.append(f"run {i}: down exited {gone.returncode}: {gone.stderr[-1500:]}")
            left = leftovers(docker_client, name, volumes)
            procs = []
            for _ in range(50):  # container removal returns once the engine has killed them; ps may lag a little
                procs = host_processes(token)
                if not procs:
                    break
                time.sleep(0.2)
            state = (cluster_home / name).exists()
            for kind, objects in left.items():
                leaked[kind] += len(objects)
            leaked["state_dirs"] += state
            leaked["processes"] += len(procs)
            listed = run_cli("cluster", "list").stdout
            if any(left.values()) or state or procs or name in listed:
                failures.append(f"run {i}: left after down: {left}, state dir {state}, processes {procs}, "
                                f"listed {name in listed}")
                cleanup_by_label(docker_client)
    seconds = time.monotonic() - start
    soak_record(killed_controller_runs=killed, runs=runs, failures=len(failures),
                leaked_containers=leaked["containers"], leaked_networks=leaked["networks"],
                leaked_volumes=leaked["volumes"], leaked_state_dirs=leaked["state_dirs"],
                surviving_job_processes=leaked["processes"], seconds=round(seconds, 1))
    assert not failures, "\n\n".join(failures[:3])
    assert killed == runs
