"""Fault plans: which faults a run gets, on which GPU, when; read from YAML or JSON (a file, or the text of
$FAKEGPU_FAULTS) or from `--fault xid=79,device=1,at=20s`, checked against plan.schema.json, and turned into
the records of the run's fault board (board.py) with each GPU named by its index in the run.

A fault is an Xid event (`xid`), correctable ECC errors (`corrected_ecc: N`: single-bit errors the memory
corrected, which raise no Xid and no event and only move the corrected counters, as on a real board) or memory
pressure (`memory_pressure: 20GiB`: device memory taken by something outside the run, such as another container's
process, from then on: used and not free for anyone in the run, and in no process list the run can see) or a
throttle (`throttle: thermal` with `clock: 900MHz` or `clock: 50%`: the GPU's clocks held back for a reason from
then on, so it is a straggler: NVML's clock-event reasons, clocks and violation counters say so, and its work takes
boost/clock times as long, in fakecuda's wall time and in the busy time telemetry follows) or an NCCL fault on a
rank (`nccl: hang`: its operation never completes, so torch's watchdog times it out and takes the process down, as
with a rank stuck in a collective; `nccl: error`: its operations fail with ncclRemoteError from then on), fired at
a time or at the rank's Nth NCCL operation (`after_collectives: N`). Any fault may instead wait for a training
step (`after_steps: N`: a process of the run, or an NCCL fault's rank, finishing its Nth optimizer step, which
fakecuda sees and native mode does not).

What an Xid does is decided here, once: the readers in C only see the record's flags.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu.errors import UsageError, clip, shorten
from fakegpu.faults.board import (
    FLAG_AFTER_ALLOCATIONS,
    FLAG_AFTER_COLLECTIVES,
    FLAG_AFTER_STEPS,
    FLAG_CLOCK_PERCENT,
    FLAG_LOST,
    FLAG_RANK,
    KIND_CORRECTED_ECC,
    KIND_MEMORY_PRESSURE,
    KIND_NCCL,
    KIND_THROTTLE,
    KIND_XID,
    MIB,
    NCCL_HANG,
    NCCL_REMOTE_ERROR,
    NEVER,
    Record,
)

SCHEMA_PATH = Path(__file__).with_name("plan.schema.json")

# The Xids a plan may inject, with the driver's meaning (NVIDIA's Xid catalog) and whether the GPU is lost.
XIDS: dict[int, tuple[str, bool]] = {
    13: ("Graphics Engine Exception", False),
    31: ("GPU memory page fault", False),
    43: ("GPU stopped processing", False),
    48: ("Double Bit ECC Error", False),
    63: ("ECC page retirement or row remapping recording event", False),
    64: ("ECC page retirement or row remapper recording failure", False),
    74: ("NVLink Error", False),
    79: ("GPU has fallen off the bus", True),
    94: ("Contained ECC error", False),
    95: ("Uncontained ECC error", False),
}
FAULT_KEYS = ("kind", "xid", "corrected_ecc", "memory_pressure", "throttle", "nccl", "clock", "device", "rank",
              "at", "after_allocations", "after_collectives", "after_steps", "for")
# The keys a --fault flag's digits are a number for.
NUMBER_KEYS = ("xid", "corrected_ecc", "memory_pressure", "clock", "device", "rank", "after_allocations",
               "after_collectives", "after_steps")
# What may end again (`for`): memory pressure, throttles and an NCCL fault (a link that heals: the operations that
# start within it meet it; a process it hung or broke stays so, a restarted one is fine); an Xid happened, and a
# lost GPU stays lost.
LASTING = ("memory_pressure", "throttle", "nccl")
MAX_LASTS_S = ((1 << 32) - 1) / 1000  # the board holds the length in ms in 32 bits: about 49 days
KINDS = ("xid", "corrected_ecc", "memory_pressure", "throttle", "nccl")  # each also the key that gives the fault
# What an NCCL fault does to its rank's operations, as the board codes it, and how it reads.
NCCL_FAULTS: dict[str, tuple[int, str]] = {
    "hang": (NCCL_HANG, "NCCL operations that hang until the watchdog's timeout"),
    "error": (NCCL_REMOTE_ERROR, "NCCL operations failing with ncclRemoteError"),
}
# A throttle's reason: NVML's clock-event reason bits (nvmlClocksEventReason*), as the driver sets them.
THROTTLES: dict[str, tuple[int, str]] = {
    "thermal": (0x20, "SW thermal slowdown"),
    "hw_thermal": (0x08 | 0x40, "HW slowdown: HW thermal slowdown"),
    "power": (0x04, "SW power cap"),
    "power_brake": (0x08 | 0x80, "HW slowdown: HW power brake slowdown"),
    "sync_boost": (0x10, "sync boost"),
}
DEFAULT_CLOCK = (50, True)  # a throttle without `clock`: half the boost clock


class InvalidFaultPlan(UsageError):
    """A plan that does not parse, breaks the schema, or names a GPU the run does not have."""

    code = "invalid_fault_plan"


@dataclass(frozen=True)
class Fault:
    xid: int | None  # None for the other kinds below
    device: int | str | None  # None for an NCCL fault, which is a rank's
    at_s: float = 0.0
    after_allocations: int | None = None  # instead of at_s
    corrected_ecc: int | None = None  # instead of xid: how many single-bit errors were corrected
    memory_pressure: int | None = None  # instead of xid: bytes held outside the run (whole MiB)
    throttle: str | None = None  # instead of xid: a THROTTLES reason
    clock: tuple[int, bool] = DEFAULT_CLOCK  # a throttle's SM clock: (MHz, False) or (percent of boost, True)
    lasts_s: float = 0.0  # how long a memory pressure, throttle or NCCL fault lasts once fired; 0: until the run ends
    nccl: str | None = None  # instead of xid: an NCCL_FAULTS key
    rank: int | None = None  # an NCCL fault's target: the global rank ($RANK) whose operations it hits
    after_collectives: int | None = None  # instead of at_s: the rank's Nth NCCL operation fires it
    after_steps: int | None = None  # instead of at_s: a process's (the rank's) Nth optimizer step fires it

    @property
    def lost(self) -> bool:
        return self.xid is not None and XIDS[self.xid][1]

    def describe(self) -> str:
        """Xid 79 (GPU has fallen off the bus), 3 corrected ECC errors, or 20480 MiB held outside the run."""
        if self.nccl is not None:
            when = (f" from its NCCL operation {self.after_collectives}" if self.after_collectives else
                    f" from its training step {self.after_steps}" if self.after_steps else "")
            return (f"{NCCL_FAULTS[self.nccl][1]} on rank {self.rank}{when}"
                    + (f" for {self.lasts_s:g} s" if self.lasts_s else ""))
        if self.memory_pressure is not None:
            return (f"{self.memory_pressure // MIB} MiB held outside the run"
                    + (f" for {self.lasts_s:g} s" if self.lasts_s else ""))
        if self.throttle is not None:
            value, percent = self.clock
            return (f"{THROTTLES[self.throttle][1]} to {value}{'% of the boost clock' if percent else ' MHz'}"
                    + (f" for {self.lasts_s:g} s" if self.lasts_s else ""))
        if self.xid is None:
            return f"{self.corrected_ecc} corrected ECC error{'s' if self.corrected_ecc != 1 else ''}"
        return f"Xid {self.xid} ({XIDS[self.xid][0]})"


def parse_duration(value: str | float, what: str) -> float:
    """Seconds of a duration: a number, optionally with unit s, m or h (30, 1.5, 90s, 10m, 2h); >= 0."""
    from fakegpu.durations import seconds

    found = seconds(value)
    if found is None:
        raise InvalidFaultPlan(f"{what} {shorten(str(value))} is not a duration; expected seconds, optionally with "
                               "unit s, m or h (20, 1.5, 90s, 10m)")
    return found


@cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _where(path: Sequence[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the plan"


def _shown(value: Any) -> str:
    return shorten(value) if isinstance(value, str) else shorten(repr(value))[1:-1]


def _problem(error: Any) -> str:
    """One schema violation as a sentence, with the close match for a misspelt key."""
    from fakegpu.profiles.matching import did_you_mean

    where = _where(list(error.absolute_path))
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        hints = [f"{k!r}{did_you_mean(k, allowed)}" for k in extra]
        return f"{where}: unknown key {', '.join(hints)}; accepted: {', '.join(allowed)}"
    if error.validator == "enum":
        accepted = [str(v) for v in error.validator_value]
        hint = did_you_mean(error.instance, accepted) if isinstance(error.instance, str) else ""
        return f"{where}: {_shown(error.instance)} is not accepted{hint}; expected one of: {', '.join(accepted)}"
    if error.validator == "required":
        return f"{where}: {clip(error.message)}"
    if error.validator == "maxItems":
        return f"{where}: {len(error.instance)} faults; a run's board holds at most {error.validator_value}"
    if error.validator == "not":
        return f"{where}: give one trigger: at, after_allocations, after_collectives or after_steps"
    if error.validator == "oneOf" and "xid" in error.schema.get("oneOf", [{}])[0].get("required", []):
        given = [k for k in KINDS if isinstance(error.instance, dict) and k in error.instance]
        return (f"{where}: give one of {', '.join(KINDS)}, not {' and '.join(given)}" if given else
                f"{where}: say what goes wrong: xid (an Xid event), corrected_ecc (how many correctable errors), "
                "memory_pressure (how much memory something outside the run takes, e.g. 20GiB), throttle (a "
                f"clock-event reason: {', '.join(THROTTLES)}) or nccl (a rank's NCCL operations: "
                f"{' or '.join(NCCL_FAULTS)})")
    if error.validator == "oneOf" and where.endswith(".memory_pressure"):
        return f"{where}: {_shown(error.instance)} is not a size; expected e.g. 20GiB, 512MiB or a number of bytes"
    if error.validator == "oneOf" and where.endswith(".device"):
        return f"{where}: {_shown(error.instance)} is not a GPU; expected its index (0, 1) or UUID (GPU-...)"
    if error.validator == "oneOf" and where.endswith((".at", ".for")):
        return f"{where}: {_shown(error.instance)} is not a duration; expected seconds or 20s, 1.5m, 2h"
    return f"{where}: {clip(error.message)}"


def check(doc: Any, source: str) -> list[Fault]:
    """The faults of a plan document, or InvalidFaultPlan naming every problem."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    problems = [_problem(e) for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]
    if problems:
        raise InvalidFaultPlan(f"{source}: " + "; ".join(problems))
    pressures: dict[int, int] = {}
    clocks: dict[int, tuple[int, bool]] = {}
    for i, f in enumerate(doc["faults"]):
        given = next(k for k in KINDS if k in f)
        problems += _target_problems(i, f, given)
        if f.get("kind", given) != given:
            problems.append(f"faults[{i}].kind: {f['kind']!r} does not go with {given}; drop kind or give "
                            f"{f['kind']}")
        if given == "memory_pressure":
            try:
                pressures[i] = _pressure_bytes(f["memory_pressure"])
            except ValueError as exc:
                problems.append(f"faults[{i}].memory_pressure: {exc}")
        if "for" in f and given not in LASTING:
            problems.append(f"faults[{i}].for: only {', '.join(LASTING[:-1])} and {LASTING[-1]} faults end again; "
                            "an Xid has happened")
        elif "for" in f and not 0.001 <= parse_duration(f["for"], f"{source}: faults[{i}].for") <= MAX_LASTS_S:
            problems.append(f"faults[{i}].for: {_shown(f['for'])}: give a length of at least 1 ms (the board "
                            f"counts whole ms) and at most {MAX_LASTS_S:.0f} s")
        if "clock" in f and given != "throttle":
            problems.append(f"faults[{i}].clock: only a throttle holds clocks; give throttle: REASON with it")
        if given == "throttle":
            try:
                clocks[i] = _clock(f["clock"]) if "clock" in f else DEFAULT_CLOCK
            except ValueError as exc:
                problems.append(f"faults[{i}].clock: {exc}")
    if problems:
        raise InvalidFaultPlan(f"{source}: " + "; ".join(problems))
    return [Fault(int(f["xid"]) if "xid" in f else None, f.get("device"),
                  parse_duration(f.get("at", 0), f"{source}: at"), f.get("after_allocations"),
                  f.get("corrected_ecc"), pressures.get(i), f.get("throttle"), clocks.get(i, DEFAULT_CLOCK),
                  parse_duration(f["for"], f"{source}: for") if "for" in f else 0.0,
                  f.get("nccl"), f.get("rank"), f.get("after_collectives"), f.get("after_steps"))
            for i, f in enumerate(doc["faults"])]


def _target_problems(i: int, f: dict[str, Any], given: str) -> list[str]:
    """What a fault's target and trigger get wrong for its kind: an NCCL fault hits a rank (its GPU is whichever
    the rank uses) and may wait for the rank's Nth operation; every other kind hits a GPU."""
    where = f"faults[{i}]"
    if given == "nccl":
        out = [] if "rank" in f else [f"{where}: an NCCL fault needs rank: N (the global rank, $RANK, whose NCCL "
                                      "operations it hits)"]
        if "device" in f:
            out.append(f"{where}.device: an NCCL fault hits a rank, not a GPU; give rank: N instead")
        if "after_allocations" in f:
            out.append(f"{where}.after_allocations: an NCCL fault fires at a time (at), at the rank's Nth NCCL "
                       "operation (after_collectives) or training step (after_steps)")
        return out
    out = [] if "device" in f else [f"{where}: give device: the GPU, its index in the run or its UUID"]
    if "rank" in f:
        out.append(f"{where}.rank: only an NCCL fault (nccl: hang or error) hits a rank; give device: GPU")
    if "after_collectives" in f:
        out.append(f"{where}.after_collectives: only an NCCL fault fires at a rank's Nth NCCL operation; use at, "
                   "after_allocations or after_steps")
    return out


def _clock(value: int | str) -> tuple[int, bool]:
    """A throttle's clock: MHz (900, "900MHz") or a share of the boost clock ("50%"), as (value, percent)."""
    text = str(value).strip()
    percent = text.endswith("%")
    number = text[:-1] if percent else text.removesuffix("MHz").removesuffix("mhz").strip()
    if not number.isdigit():
        raise ValueError(f"{_shown(value)} is not a clock; expected MHz (900 or 900MHz) or a share of the boost "
                         "clock (50%)")
    n = int(number)
    if percent and not 1 <= n <= 100:
        raise ValueError(f"{_shown(value)}: a share of the boost clock is 1% to 100%")
    if not percent and not 1 <= n <= 0xFFFF:
        raise ValueError(f"{_shown(value)}: expected 1 to 65535 MHz")
    return n, percent


# The board counts held memory in MiB in a 32-bit field.
MAX_PRESSURE = ((1 << 32) - 1) * MIB


def _pressure_bytes(value: int | str) -> int:
    """A memory-pressure size in bytes, rounded up to whole MiB (as the board holds it)."""
    from fakegpu.sizes import parse_bytes

    size = value if isinstance(value, int) else parse_bytes(str(value))
    if size <= 0:
        raise ValueError(f"{_shown(value)} holds nothing; give a size above 0, e.g. 20GiB")
    if size > MAX_PRESSURE:
        raise ValueError(f"{_shown(value)} is more than any GPU has")
    return -(-size // MIB) * MIB


def load_text(text: str, source: str) -> list[Fault]:
    """A plan in YAML or JSON (JSON is YAML)."""
    import yaml

    from fakegpu.user_files import load_yaml

    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise InvalidFaultPlan(f"{source}{at}: not YAML or JSON ({getattr(exc, 'problem', None) or exc})") from exc
    return check(doc, source)


# A plan holds at most 64 faults: a few KiB of YAML. A larger file is refused before it is read.
MAX_PLAN_FILE_BYTES = 1 << 20


def load_file(path: str | os.PathLike[str]) -> list[Fault]:
    from fakegpu.user_files import UnreadableFile, read_text

    try:
        text = read_text(path, MAX_PLAN_FILE_BYTES)
    except UnreadableFile as exc:
        raise InvalidFaultPlan(f"fault plan {shorten(str(path))}: {exc}") from exc
    return load_text(text, str(path))


def parse_flag(value: str, source: str | None = None) -> Fault:
    """One `--fault KEY=VALUE,...` (xid=79,device=1,at=20s), checked as a plan of one fault."""
    source = source or f"--fault {shorten(value)}"
    fault: dict[str, Any] = {}
    for item in value.split(","):
        key, sep, v = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidFaultPlan(f"{source}: {shorten(item)} is not KEY=VALUE; expected e.g. "
                                   "xid=79,device=1,at=20s (keys: " + ", ".join(FAULT_KEYS) + ")")
        v = v.strip()
        # Signed: rank=-1 is a number the schema's minimum refuses, not a string of the wrong type.
        fault[key] = int(v) if key in NUMBER_KEYS and v.removeprefix("-").isdigit() else v
    return check({"faults": [fault]}, source)[0]


def is_plan_text(value: str) -> bool:
    """Whether $FAKEGPU_FAULTS holds a plan itself (YAML or JSON), not a file's path."""
    stripped = value.strip()
    return stripped.startswith(("{", "faults:", "---")) or "\n" in stripped


def from_environment(value: str) -> list[Fault]:
    """$FAKEGPU_FAULTS: a plan file's path, or the plan itself (YAML or JSON)."""
    return load_text(value, "FAKEGPU_FAULTS") if is_plan_text(value) else load_file(value.strip())


def records(faults: Sequence[Fault], uuids: Sequence[str], start_ns: int) -> list[Record]:
    """The board records of a run's faults: each GPU by its index among `uuids` (the run's devices, in order)."""
    out = []
    for f in faults:
        flags = FLAG_LOST if f.lost else 0
        if f.after_allocations is not None:
            fire, data, flags = NEVER, f.after_allocations, flags | FLAG_AFTER_ALLOCATIONS
        elif f.after_collectives is not None:
            fire, data, flags = NEVER, f.after_collectives, flags | FLAG_AFTER_COLLECTIVES
        elif f.after_steps is not None:
            fire, data, flags = NEVER, f.after_steps, flags | FLAG_AFTER_STEPS
        else:
            fire, data = start_ns + int(f.at_s * 1e9), 0
        if f.nccl is not None:
            kind, code, flags = KIND_NCCL, NCCL_FAULTS[f.nccl][0], flags | FLAG_RANK
        elif f.xid is not None:
            kind, code = KIND_XID, f.xid
        elif f.memory_pressure is not None:
            kind, code = KIND_MEMORY_PRESSURE, f.memory_pressure // MIB
        elif f.throttle is not None:
            value, percent = f.clock
            kind, code = KIND_THROTTLE, THROTTLES[f.throttle][0] | value << 8
            flags |= FLAG_CLOCK_PERCENT if percent else 0
        else:
            kind, code = KIND_CORRECTED_ECC, f.corrected_ecc
        data |= round(f.lasts_s * 1000) << 32
        target = f.rank if f.rank is not None else device_index(f.device, uuids)  # type: ignore[arg-type]
        out.append(Record(fire_ns=fire, device=target, code=code, kind=kind, flags=flags, data=data))
    return out


def device_index(device: int | str, uuids: Sequence[str]) -> int:
    """A fault's GPU as an index of the run; an index out of range or an unknown UUID is refused."""
    from fakegpu.profiles.matching import did_you_mean

    if isinstance(device, int):
        if device >= len(uuids):
            raise InvalidFaultPlan(f"fault on GPU {device}: the run has GPUs 0..{len(uuids) - 1}")
        return device
    for i, u in enumerate(uuids):
        if u.lower() == device.lower():
            return i
    raise InvalidFaultPlan(f"fault on {shorten(device)}: no GPU of the run has this UUID"
                           + (did_you_mean(device, uuids, quote=False, paren=False)
                              or f" (the run's: {', '.join(uuids)})"))
