"""`fakegpu fault inject`: a fault now (or soon) on a running run's board, found from one of its processes.

A run is its state folder; a process of it carries the folder and the devices in its environment, so `--pid`
reads /proc/PID/environ (the caller must be allowed to: same user, or root) and the caller's own environment
serves inside the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from fakegpu.faults import board
from fakegpu.faults.plan import Fault, InvalidFaultPlan, records


@dataclass(frozen=True)
class Injected:
    state_dir: str
    record: board.Record
    uuid: str


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
                               "or name a process of the run with --pid")
    uuids = run_devices(env)
    (record,) = records([fault], uuids, time.time_ns())
    try:
        board.append(state, [record])
    except board.BoardFull as exc:
        raise InvalidFaultPlan(str(exc)) from exc
    except OSError as exc:
        raise InvalidFaultPlan(f"cannot write the run's fault board in {state}: {exc.strerror or exc}") from exc
    return Injected(state, record, uuids[record.device])
