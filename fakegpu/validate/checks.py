"""A case's expectations, checked against what its command did: exit code, stdout/stderr contains or matches,
and JSON pointer checks on its stdout or a file it wrote.

`expect` keys (manifest.schema.json): exit_code (an int or a list of accepted ones; 0 when not given),
stdout_contains / stderr_contains and stdout_matches / stderr_matches (a text or a list: each must hold; matches
is re.search), json (a list of {pointer, file?, OPERATOR: value}). A JSON check reads `file` (relative to the
case's cwd) or else stdout: the whole of it, or failing that its last line that parses, as programs log before
printing their result. Each operator in an entry is a check of its own.

Memory, from FakeGPU's own reports of the case's processes (gathered as `fakegpu preflight` gathers them, into a
preflight document): `memory: {peak_allocated: "<= 70GiB", device: 0}` holds a bound on every device of the
case, or on `device` alone (keys MEMORY_KEYS: PyTorch's peak allocated and reserved bytes, reserved plus the CUDA
context, and what the capacity leaves); `preflight: fits|oom` holds preflight's verdict. With `preflight: oom`
the exit code is checked only when `exit_code` is given, as an out-of-memory error ends a program with a failure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.errors import clip

OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge", "approx", "in", "matches")
# memory expectation key -> the preflight document's per-device field
MEMORY_KEYS = {"peak_allocated": "peak_allocated_bytes", "peak_reserved": "peak_reserved_bytes",
               "peak_used": "peak_used_bytes", "headroom": "headroom_bytes"}
VERDICTS = {"fits": "PASS_FIT", "oom": "FAIL_OOM"}
DEFAULT_REL_TOLERANCE = 1e-6
# How much of a text a failed check quotes.
QUOTED = 200


@dataclass(frozen=True)
class CheckResult:
    check: str  # what was expected, in words: "stdout contains 'Tesla T4'"
    passed: bool
    detail: str = ""  # on failure, what was found instead


def wants_memory(expect: dict[str, Any]) -> bool:
    """Whether checking `expect` needs the processes' memory reports."""
    return "memory" in expect or "preflight" in expect


def evaluate(expect: dict[str, Any], exit_code: int, stdout: str, stderr: str, cwd: Path,
             memory: dict[str, Any] | None = None) -> list[CheckResult]:
    """Every check of `expect`, in the order a person reads them: exit code, texts, JSON, memory. `memory` is the
    preflight document of the case's run (wants_memory)."""
    results = []
    if "exit_code" in expect or expect.get("preflight") != "oom":
        results.append(_exit_code(expect.get("exit_code", 0), exit_code))
    for stream, text in (("stdout", stdout), ("stderr", stderr)):
        results += [_contains(stream, t, text) for t in _texts(expect.get(f"{stream}_contains"))]
        results += [_matches(stream, p, text) for p in _texts(expect.get(f"{stream}_matches"))]
    for entry in expect.get("json", []):
        results += json_checks(entry, stdout, cwd)
    if wants_memory(expect):
        results += memory_checks(expect, memory)
    return results


def _texts(value: str | list[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _quote(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= QUOTED else "..." + text[-QUOTED:])


def _exit_code(expected: int | list[int], got: int) -> CheckResult:
    accepted = [expected] if isinstance(expected, int) else list(expected)
    words = " or ".join(map(str, accepted))
    return CheckResult(f"exit code {words}", got in accepted, "" if got in accepted else f"exit code was {got}")


def _contains(stream: str, needle: str, text: str) -> CheckResult:
    ok = needle in text
    return CheckResult(f"{stream} contains {needle!r}", ok, "" if ok else f"not found in {stream} {_quote(text)}")


def _matches(stream: str, pattern: str, text: str) -> CheckResult:
    ok = re.search(pattern, text, re.MULTILINE) is not None
    return CheckResult(f"{stream} matches /{pattern}/", ok, "" if ok else f"no match in {stream} {_quote(text)}")


class PointerError(LookupError):
    pass


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """The value at an RFC 6901 JSON pointer ("" is the whole document, ~1 is '/', ~0 is '~')."""
    if pointer == "":
        return doc
    value = doc
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            if token not in value:
                raise PointerError(f"no key {token!r} (keys: {', '.join(map(str, value)) or 'none'})")
            value = value[token]
        elif isinstance(value, list):
            if not token.isdigit() or int(token) >= len(value):
                raise PointerError(f"no index {token!r} in a list of {len(value)}")
            value = value[int(token)]
        else:
            raise PointerError(f"{token!r} is below a {type(value).__name__}, not a mapping or a list")
    return value


def _document(entry: dict[str, Any], stdout: str, cwd: Path) -> Any:
    """The JSON document an entry reads; ValueError saying why there is none."""
    if "file" in entry:
        path = cwd / entry["file"]
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{entry['file']} was not written") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{entry['file']} is not JSON: {exc}") from None
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    for line in reversed(stdout.splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"stdout holds no JSON document {_quote(stdout)}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)  # "15360" from a CSV-ish tool or a placeholder in a string
    except (TypeError, ValueError):
        return None


def _compare(op: Callable[[float, float], bool]) -> Callable[[Any, Any, dict[str, Any]], str | None]:
    def check(got: Any, want: Any, _entry: dict[str, Any]) -> str | None:
        a, b = _number(got), _number(want)
        if a is None or b is None:
            return f"{got!r} and {want!r} are not both numbers"
        return None if op(a, b) else ""
    return check


def _approx(got: Any, want: Any, entry: dict[str, Any]) -> str | None:
    a, b = _number(got), _number(want)
    if a is None or b is None:
        return f"{got!r} and {want!r} are not both numbers"
    rel = entry.get("tolerance", DEFAULT_REL_TOLERANCE)
    allowed = max(rel * abs(b), entry.get("abs_tolerance", 0.0))
    return None if math.isclose(a, b, rel_tol=0, abs_tol=allowed) else f"off by {abs(a - b):g}, allowed {allowed:g}"


def _equal(got: Any, want: Any) -> bool:
    a, b = _number(got), _number(want)
    # 80 and 80.0 are equal, as JSON does not tell them apart; "80" and 80 are not.
    if isinstance(got, (int, float)) and isinstance(want, (int, float)) and a is not None and b is not None:
        return a == b
    return got == want


_CHECKS: dict[str, Callable[[Any, Any, dict[str, Any]], str | None]] = {
    "eq": lambda got, want, _e: None if _equal(got, want) else "",
    "ne": lambda got, want, _e: "" if _equal(got, want) else None,
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "approx": _approx,
    "in": lambda got, want, _e: None if any(_equal(got, w) for w in want) else "",
    "matches": lambda got, want, _e: None if re.search(want, got if isinstance(got, str) else json.dumps(got))
    else "",
}


def json_checks(entry: dict[str, Any], stdout: str, cwd: Path) -> list[CheckResult]:
    """One result per operator of a JSON check entry."""
    source = entry.get("file", "stdout")
    ops = [op for op in OPERATORS if op in entry]
    names = [f"{source} {entry['pointer'] or '(whole document)'} {op} {entry[op]!r}" for op in ops]
    try:
        doc = _document(entry, stdout, cwd)
        got = resolve_pointer(doc, entry["pointer"])
    except (ValueError, PointerError) as exc:
        return [CheckResult(name, False, str(exc)) for name in names]
    results = []
    for op, name in zip(ops, names, strict=True):
        problem = _CHECKS[op](got, entry[op], entry)
        detail = "" if problem is None else f"value is {got!r}" + (f": {problem}" if problem else "")
        results.append(CheckResult(name, problem is None, detail))
    return results


_BOUND = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*(.*?)\s*")
_BOUND_CHECKS: dict[str, Callable[[int, int], bool]] = {
    "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def memory_bound(text: str | int) -> tuple[str, int]:
    """("<=", 75161927680) from "<= 70GiB"; ValueError saying what a bound is (sizes: fakegpu.sizes)."""
    from fakegpu.sizes import parse_bytes

    found = _BOUND.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"{text!r} is not a bound; expected a comparison and a size, e.g. '<= 70GiB' "
                         "(<=, <, >=, >, ==, !=)")
    return found[1], parse_bytes(found[2])


def _size(n: int) -> str:
    """As PyTorch's messages give a size, and exactly."""
    from fakegpu.fakecuda.oom import format_size

    shown = format_size(n)
    return shown if shown.endswith(" bytes") else f"{shown} ({n} bytes)"


def memory_checks(expect: dict[str, Any], doc: dict[str, Any] | None) -> list[CheckResult]:
    """The `memory` bounds and the `preflight` verdict against a preflight document of the case's run."""
    wanted = expect.get("memory", {})
    bounds = {k: v for k, v in wanted.items() if k in MEMORY_KEYS}
    where = f"on cuda:{wanted['device']}" if "device" in wanted else "on every device"
    names = [f"memory {key} {' '.join(str(v).split())} {where}" for key, v in bounds.items()]
    if "preflight" in expect:
        names.append(f"preflight verdict {expect['preflight']} ({VERDICTS[expect['preflight']]})")
    if doc is None or not doc["processes"]:
        why = (doc["notes"][0] if doc and doc["notes"] else "the command ran no process that reports")
        return [CheckResult(name, False, f"no process reported its memory: {why}") for name in names]
    results = []
    rows = [d for d in doc["devices"] if "device" not in wanted or d["index"] == wanted["device"]]
    for (key, text), name in zip(bounds.items(), names, strict=False):
        op, limit = memory_bound(text)
        if not rows:
            results.append(CheckResult(name, False, f"the case has no device {wanted['device']} "
                                       f"(devices 0-{len(doc['devices']) - 1})"))
            continue
        broken = [d for d in rows if not _BOUND_CHECKS[op](d[MEMORY_KEYS[key]], limit)]
        results.append(CheckResult(name, not broken, "; ".join(
            f"cuda:{d['index']} ({d['name']}): {_size(d[MEMORY_KEYS[key]])}" for d in broken)))
    if "preflight" in expect:
        want, got = VERDICTS[expect["preflight"]], doc["verdict"]
        detail = "" if got == want else f"verdict was {got}" + (
            f": {clip(doc['oom']['message'] or 'out of memory')}" if doc["oom"]["occurred"] else
            f": {'; '.join(doc['notes'])}" if doc["notes"] else f" (exit code {doc['process_exit_code']})")
        results.append(CheckResult(names[-1], got == want, detail))
    return results
