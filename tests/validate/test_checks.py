"""Each expectation kind, holding and not holding, with the detail a failure gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fakegpu.validate.checks import PointerError, evaluate, json_checks, resolve_pointer

DOC = {"gpus": [{"name": "Tesla T4", "memory_mib": 15360, "util": 0.5}], "a/b": {"~x": True}, "n": "80"}
STDOUT = "loading...\n" + json.dumps(DOC) + "\n"


def _one(expect: dict, exit_code: int = 0, stdout: str = STDOUT, stderr: str = "", cwd: Path = Path(".")):
    results = evaluate(expect, exit_code, stdout, stderr, cwd)
    assert results[0].check.startswith("exit code")
    return results[1:] or results


def test_exit_code_defaults_to_zero_and_takes_a_list() -> None:
    [ok] = evaluate({}, 0, "", "", Path("."))
    [bad] = evaluate({}, 3, "", "", Path("."))
    assert (ok.passed, bad.passed, bad.detail) == (True, False, "exit code was 3")
    assert evaluate({"exit_code": [1, 124]}, 124, "", "", Path("."))[0].passed
    assert not evaluate({"exit_code": 1}, 0, "", "", Path("."))[0].passed


def test_contains_and_matches_on_both_streams() -> None:
    ok = _one({"stdout_contains": ["Tesla T4", "loading"], "stderr_matches": r"^warn: \d+$"}, stderr="warn: 3\n")
    assert [r.passed for r in ok] == [True, True, True]
    bad = _one({"stdout_contains": "A100", "stdout_matches": "^T4", "stderr_contains": "x"})
    assert [r.passed for r in bad] == [False, False, False]
    assert bad[0].check == "stdout contains 'A100'" and bad[0].detail.startswith("not found in stdout '")
    assert bad[1].detail.startswith("no match in stdout")


@pytest.mark.parametrize(("op", "want", "passes"), [
    ("eq", "Tesla T4", True), ("eq", "T4", False),
    ("ne", "T4", True), ("ne", "Tesla T4", False),
    ("in", ["L4", "Tesla T4"], True), ("in", ["L4"], False),
    ("matches", "^Tesla T[0-9]$", True), ("matches", "A100", False),
])
def test_string_operators(op: str, want, passes: bool) -> None:
    [r] = json_checks({"pointer": "/gpus/0/name", op: want}, STDOUT, Path("."))
    assert r.passed is passes
    assert r.detail == ("" if passes else "value is 'Tesla T4'")


@pytest.mark.parametrize(("op", "want", "passes"), [
    ("eq", 15360.0, True), ("eq", 15361, False),
    ("lt", 15361, True), ("lt", 15360, False),
    ("le", 15360, True), ("le", 15359, False),
    ("gt", 15359, True), ("gt", 15360, False),
    ("ge", 15360, True), ("ge", 15361, False),
    ("approx", 15300, False), ("approx", 15360.000001, True),
])
def test_number_operators(op: str, want, passes: bool) -> None:
    [r] = json_checks({"pointer": "/gpus/0/memory_mib", op: want}, STDOUT, Path("."))
    assert r.passed is passes, r


def test_approx_tolerances_relative_and_absolute() -> None:
    entry = {"pointer": "/gpus/0/memory_mib", "approx": 15300}
    assert not json_checks(entry, STDOUT, Path("."))[0].passed
    assert json_checks({**entry, "tolerance": 0.01}, STDOUT, Path("."))[0].passed
    assert json_checks({**entry, "abs_tolerance": 60}, STDOUT, Path("."))[0].passed
    [r] = json_checks({**entry, "abs_tolerance": 59}, STDOUT, Path("."))
    assert not r.passed and r.detail == "value is 15360: off by 60, allowed 59"


def test_ordering_a_non_number_fails_saying_so() -> None:
    [r] = json_checks({"pointer": "/gpus/0/name", "gt": 1}, STDOUT, Path("."))
    assert not r.passed and "are not both numbers" in r.detail
    # "80" is a number in text (CSV-like output) for ordering, but not equal to 80.
    assert json_checks({"pointer": "/n", "ge": 80}, STDOUT, Path("."))[0].passed
    assert not json_checks({"pointer": "/n", "eq": 80}, STDOUT, Path("."))[0].passed


def test_each_operator_of_an_entry_is_a_check_of_its_own() -> None:
    results = json_checks({"pointer": "/gpus/0/util", "gt": 0, "le": 0.4}, STDOUT, Path("."))
    assert [(r.check, r.passed) for r in results] == [("stdout /gpus/0/util le 0.4", False),
                                                      ("stdout /gpus/0/util gt 0", True)]


def test_a_file_the_command_wrote(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text(json.dumps(DOC))
    assert json_checks({"pointer": "/a~1b/~0x", "file": "out.json", "eq": True}, "", tmp_path)[0].passed
    [missing] = json_checks({"pointer": "/a", "file": "nope.json", "eq": 1}, "", tmp_path)
    assert not missing.passed and missing.detail == "nope.json was not written"
    (tmp_path / "bad.json").write_text("{")
    assert "bad.json is not JSON" in json_checks({"pointer": "", "file": "bad.json", "eq": 1}, "", tmp_path)[0].detail


def test_pointer_problems_are_failed_checks_that_say_why() -> None:
    [r] = json_checks({"pointer": "/gpus/3/name", "eq": "x"}, STDOUT, Path("."))
    assert not r.passed and r.detail == "no index '3' in a list of 1"
    [r] = json_checks({"pointer": "/gpu", "eq": "x"}, STDOUT, Path("."))
    assert r.detail == "no key 'gpu' (keys: gpus, a/b, n)"
    [r] = json_checks({"pointer": "/x", "eq": 1}, "no json here", Path("."))
    assert r.detail.startswith("stdout holds no JSON document")
    with pytest.raises(PointerError):
        resolve_pointer({"a": 1}, "/a/b")
    assert resolve_pointer(DOC, "") is DOC


GiB = 1 << 30


def _preflight(verdict: str = "PASS_FIT", peaks: tuple[int, ...] = (3 * GiB, 0), processes: int = 1,
               exit_code: int = 0, oom: str | None = None) -> dict:
    """A preflight document as fakegpu.fakecuda.preflight.document gives it, reduced to what the checks read."""
    devices = [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "capacity_bytes": 80 * GiB, "peak_allocated_bytes": p,
                "peak_reserved_bytes": p + GiB if p else 0, "peak_used_bytes": p + GiB + 500 * (1 << 20) if p else 0,
                "headroom_bytes": 80 * GiB - (p + GiB) if p else 80 * GiB} for i, p in enumerate(peaks)]
    return {"verdict": verdict, "devices": devices, "processes": [{}] * processes, "process_exit_code": exit_code,
            "notes": [] if processes else ["no fakecuda process reported: the command ran no Python with the start "
                                           "hook (python -I/-S?)"],
            "oom": {"occurred": oom is not None, "message": oom}}


def test_memory_bounds_hold_on_every_device_or_one() -> None:
    from fakegpu.validate.checks import memory_checks

    doc = _preflight()
    [ok, bad] = memory_checks({"memory": {"peak_allocated": "<= 3GiB", "peak_reserved": "<4GiB"}}, doc)
    assert (ok.check, ok.passed) == ("memory peak_allocated <= 3GiB on every device", True)
    assert (bad.check, bad.passed) == ("memory peak_reserved <4GiB on every device", False)
    assert bad.detail == "cuda:0 (NVIDIA A100-SXM4-80GB): 4.00 GiB (4294967296 bytes)"
    # a lower bound on every device fails on the one left unused; on device 0 alone it holds
    [low] = memory_checks({"memory": {"peak_used": ">= 1GiB"}}, doc)
    assert not low.passed and low.detail == "cuda:1 (NVIDIA A100-SXM4-80GB): 0 bytes"
    [one] = memory_checks({"memory": {"peak_used": ">= 1GiB", "device": 0}}, doc)
    assert one.passed and one.check == "memory peak_used >= 1GiB on cuda:0"
    [head] = memory_checks({"memory": {"headroom": "> 70 GiB"}}, doc)
    assert head.passed
    [missing] = memory_checks({"memory": {"peak_used": "< 1GiB", "device": 5}}, doc)
    assert not missing.passed and missing.detail == "the case has no device 5 (devices 0-1)"


def test_preflight_verdicts_and_no_reports() -> None:
    from fakegpu.validate.checks import memory_checks

    [fits] = memory_checks({"preflight": "fits"}, _preflight())
    assert (fits.check, fits.passed) == ("preflight verdict fits (PASS_FIT)", True)
    oom = _preflight("FAIL_OOM", exit_code=1, oom="CUDA out of memory. Tried to allocate 100.00 GiB.")
    [not_fit] = memory_checks({"preflight": "fits"}, oom)
    assert not not_fit.passed and not_fit.detail == "verdict was FAIL_OOM: CUDA out of memory. Tried to allocate " \
        "100.00 GiB."
    assert memory_checks({"preflight": "oom"}, oom)[0].passed
    # nothing reported (no torch, python -I): every memory check fails, saying why; none passes by default
    checks = memory_checks({"memory": {"peak_allocated": "<= 1GiB"}, "preflight": "fits"},
                           _preflight("RUNTIME_ERROR", processes=0))
    assert [c.passed for c in checks] == [False, False]
    assert checks[0].detail.startswith("no process reported its memory: no fakecuda process reported")


def test_an_expected_oom_checks_the_exit_code_only_when_asked() -> None:
    oom = _preflight("FAIL_OOM", exit_code=1, oom="CUDA out of memory.")
    checks = evaluate({"preflight": "oom"}, 1, "", "", Path("."), oom)
    assert [(c.check, c.passed) for c in checks] == [("preflight verdict oom (FAIL_OOM)", True)]
    checks = evaluate({"preflight": "oom", "exit_code": 0}, 1, "", "", Path("."), oom)
    assert [c.passed for c in checks] == [False, True]
    assert evaluate({"preflight": "fits"}, 0, "", "", Path("."), _preflight())[0].check == "exit code 0"


@pytest.mark.parametrize(("text", "problem"), [
    ("<= 70G", "'70G' is not a size (70GiB or 70GB?)"),
    ("70GiB", "'70GiB' is not a bound; expected a comparison and a size, e.g. '<= 70GiB'"),
])
def test_bounds_that_do_not_parse(text: str, problem: str) -> None:
    from fakegpu.validate.checks import memory_bound

    with pytest.raises(ValueError, match=re.escape(problem)):
        memory_bound(text)
    assert memory_bound(" >=1.5 GB ") == (">=", 1_500_000_000)
