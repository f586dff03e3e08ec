"""`fakegpu fault inject`: a fault now (or soon) on a running run's board, found from one of its processes.

A run is its state folder; a process of it carries the folder and the devices in its environment, so `--pid`
reads /proc/PID/environ (the caller must be allowed to: same user, or root) and the caller's own environment
serves inside the run.

A FakeGPU container is a run too: the runtime gives it <state_root>/<container id>/ on the host
(fakegpu_hook.statedir), whose state/ is the container's /run/fakegpu (the shims' state folder there) and whose
devices.tbl is the container's device table, so `--container` writes that board with the container's numbering
(its GPU 0 may be the host's GPU 2). The state folder is writable by the container's processes, and the host
writes it as root: board.append refuses a planted link there.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.errors import FakeGPUError, UsageError, shorten
from fakegpu.faults import board
from fakegpu.faults.plan import Fault, InvalidFaultPlan, records


class ContainerNotUsable(UsageError):
    """A --container that is unknown, not running, or not started with FakeGPU's runtime."""

    code = "container_not_usable"


@dataclass(frozen=True)
class Injected:
    state_dir: str
    record: board.Record
    uuid: str  # "" for a fault on a rank
    container: str | None = None  # the container's name, for --container


def process_environment(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except FileNotFoundError as exc:
        raise InvalidFaultPlan(f"--pid {pid}: no such process") from exc
    except PermissionError as exc:
        raise InvalidFaultPlan(f"--pid {pid}: not allowed to read its environment (another user's process)") from exc
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def run_devices(env: Mapping[str, str]) -> list[str]:
    """The UUIDs of the run's GPUs, in NVML's order: its device table's, else its spec's."""
    if env.get("FAKEGPU_DEVICE_TABLE"):
        from fakegpu.devices.table import table_uuids

        try:
            return table_uuids(env["FAKEGPU_DEVICE_TABLE"])
        except OSError as exc:
            raise InvalidFaultPlan(f"the run's device table {env['FAKEGPU_DEVICE_TABLE']}: {exc.strerror}") from exc
    from fakegpu.devices import DEFAULT_DEVICES, resolve_devices

    return [d.uuid for d in resolve_devices(env.get("FAKEGPU_DEVICES") or DEFAULT_DEVICES, env.get("FAKEGPU_SEED"))]


def inject(fault: Fault, pid: int | None = None, environ: Mapping[str, str] | None = None) -> Injected:
    """Put `fault` on the board of the run that process `pid` (default: this one) belongs to; its `at_s` counts
    from now."""
    env = process_environment(pid) if pid is not None else dict(os.environ if environ is None else environ)
    state = env.get("FAKEGPU_STATE_DIR")
    if not state:
        who = f"process {pid}" if pid is not None else "this shell"
        raise InvalidFaultPlan(f"{who} is not in a FakeGPU run (no FAKEGPU_STATE_DIR); run it under `fakegpu run`, "
                               "or name a process of the run with --pid, or a container with --container")
    return _put(fault, state, run_devices(env))


def _put(fault: Fault, state: str, uuids: Sequence[str], container: str | None = None) -> Injected:
    (record,) = records([fault], uuids, time.time_ns())
    try:
        board.append(state, [record])
    except (board.BoardFull, board.UnsafeBoard) as exc:
        raise InvalidFaultPlan(str(exc)) from exc
    except OSError as exc:
        raise InvalidFaultPlan(f"cannot write the run's fault board in {state}: {exc.strerror or exc}") from exc
    return Injected(state, record, "" if record.for_rank else uuids[record.device], container)


@dataclass(frozen=True)
class ContainerLayout:
    """Where the runtime keeps a container's folders on the host: <state_root>/<id>/ with the device table and
    the shared state folder in it. The CLI fills it from fakegpu_hook (statedir.py, contract.py), whose rules
    they are; library code does not import the container integration."""

    state_root: str
    state_name: str  # the folder that is the container's /run/fakegpu
    table_name: str


@dataclass(frozen=True)
class ContainerRun:
    """A FakeGPU container's run as the host sees it."""

    name: str
    id: str
    state_dir: str  # the host folder that is the container's /run/fakegpu
    device_table: str


def _folder(path: str, what: str) -> os.stat_result:
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise ContainerNotUsable(what) from exc
    except PermissionError as exc:
        # The state root is the runtime's (root's, 0700): other users cannot see into it.
        raise ContainerNotUsable(f"{path}: permission denied; a container's faults are injected as the "
                                 "runtime's user (root)") from exc
    if not stat.S_ISDIR(st.st_mode):  # a link too: lstat sees the link, not its target
        raise ContainerNotUsable(f"{path} is not a folder; refused")
    return st


def container_run(layout: ContainerLayout, container_id: str, name: str) -> ContainerRun:
    """The container's folders under the runtime's state root; ContainerNotUsable when the runtime gave it none
    (started without --runtime=fakegpu, or asking for no GPUs). Only the folder state/ is the container's to
    write: the ones above it are the host's (0700), checked not to be links all the same, and the result must
    stay under the state root."""
    if not container_id or "/" in container_id or container_id in (".", ".."):
        raise ContainerNotUsable(f"container {shorten(name)}: {shorten(container_id)} is not a container id")
    root = layout.state_root
    not_ours = (f"container {name} is not a FakeGPU container: the runtime's state root {root} has no "
                f"folder for it (start it with --runtime=fakegpu and FAKEGPU_DEVICES or NVIDIA_VISIBLE_DEVICES)")
    _folder(root, not_ours)
    host_dir = os.path.join(root, container_id)
    if _folder(host_dir, not_ours).st_uid != os.geteuid():
        raise ContainerNotUsable(f"{host_dir} belongs to another user than the runtime's; refused")
    state = os.path.join(host_dir, layout.state_name)
    _folder(state, not_ours)
    table = os.path.join(host_dir, layout.table_name)
    try:
        is_table = stat.S_ISREG(os.lstat(table).st_mode)
    except FileNotFoundError:
        is_table = False
    if not is_table:
        raise ContainerNotUsable(not_ours)
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(state)]) != real_root:
        raise ContainerNotUsable(f"{state} leads out of the state root {root}; refused")
    return ContainerRun(name, container_id, state, table)


def docker_client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException as exc:
        raise FakeGPUError(f"the Docker Engine is not reachable: {exc}") from exc
    return client


def find_container(client: Any, name_or_id: str, layout: ContainerLayout) -> ContainerRun:
    """The running FakeGPU container named (or whose id, or id prefix, is) `name_or_id`."""
    import docker

    try:
        found = client.containers.get(name_or_id)
    except docker.errors.NotFound as exc:
        from fakegpu.profiles.matching import did_you_mean

        names = [c.name for c in client.containers.list(all=True)]
        raise ContainerNotUsable(f"no container {shorten(name_or_id)}"
                                 + did_you_mean(name_or_id, names, quote=False, paren=False)) from exc
    except docker.errors.APIError as exc:
        raise ContainerNotUsable(f"container {shorten(name_or_id)}: {exc.explanation or exc}") from exc
    if found.status != "running":
        raise ContainerNotUsable(f"container {found.name} is {found.status}, not running: its GPUs exist only "
                                 f"while it runs (docker start {found.name})")
    return container_run(layout, found.id, found.name)


def inject_container(fault: Fault, name_or_id: str, layout: ContainerLayout, client: Any = None) -> Injected:
    """Put `fault` on the board of a running FakeGPU container, its GPU named in the container's numbering."""
    run = find_container(client if client is not None else docker_client(), name_or_id, layout)
    uuids = run_devices({"FAKEGPU_DEVICE_TABLE": run.device_table})
    return _put(fault, run.state_dir, uuids, run.name)
