"""Matrix expansion: the product, exclude and include as a CI matrix computes them, placeholders, --filter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fakegpu.validate.manifest import ManifestError, load
from fakegpu.validate.matrix import combinations, expand, select


def test_product_then_exclude_then_include_as_github_actions_documents() -> None:
    # The example of GitHub's "Expanding or adding matrix configurations" documentation, with its result.
    axes = {"fruit": ["apple", "pear"], "animal": ["cat", "dog"]}
    include = [{"color": "green"}, {"color": "pink", "animal": "cat"}, {"fruit": "apple", "shape": "circle"},
               {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}]
    assert combinations(axes, include) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_exclude_drops_every_combination_with_all_its_values() -> None:
    axes = {"profile": ["t4", "a100", "h100"], "mode": ["native", "fakecuda"]}
    got = combinations(axes, exclude=[{"profile": "t4", "mode": "fakecuda"}, {"profile": "h100"}])
    assert got == [{"profile": "t4", "mode": "native"}, {"profile": "a100", "mode": "native"},
                   {"profile": "a100", "mode": "fakecuda"}]


MANIFEST = """\
defaults: {mode: fakecuda, env: {OUT: "{case_dir}/r.json"}}
matrix:
  profile: [t4, a100]
  batch: [1, 8]
  exclude: [{profile: t4, batch: 8}]
  include:
    - {profile: t4, board: Tesla T4}
    - {profile: a100, board: NVIDIA A100-SXM4-80GB}
cases:
  - name: train
    command: "{python} train.py --batch {batch} --tag '{profile} x'"
    expect:
      stdout_contains: "{board}"
      stdout_matches: '\\d{3} MiB'
      json: [{pointer: /batch, eq: "{batch}"}]
  - name: native-only
    mode: native
    command: [echo, "{{literal}}"]
"""


def _cases(tmp_path: Path, text: str = MANIFEST):
    path = tmp_path / "v.yaml"
    path.write_text(text)
    return expand(load(path), tmp_path / "out")


def test_cases_times_combinations_with_placeholders_filled(tmp_path: Path) -> None:
    cases = _cases(tmp_path)
    assert [c.id for c in cases] == [
        "train[profile=t4,batch=1]", "train[profile=a100,batch=1]", "train[profile=a100,batch=8]",
        "native-only[profile=t4,batch=1]", "native-only[profile=a100,batch=1]", "native-only[profile=a100,batch=8]"]
    t4 = cases[0]
    assert t4.command == [sys.executable, "train.py", "--batch", "1", "--tag", "t4 x"]
    assert (t4.devices, t4.mode, t4.values["board"]) == ("t4", "fakecuda", "Tesla T4")
    assert t4.expect["stdout_contains"] == "Tesla T4"
    assert t4.expect["stdout_matches"] == r"\d{3} MiB"  # {3} is a regex count, not a placeholder
    assert t4.expect["json"] == [{"pointer": "/batch", "eq": 1}]  # a lone placeholder keeps the value's type
    assert t4.env["OUT"] == str(t4.case_dir / "r.json") and t4.case_dir.parent == tmp_path / "out" / "cases"
    assert cases[2].expect["stdout_contains"] == "NVIDIA A100-SXM4-80GB"
    assert cases[3].mode == "native" and cases[3].command == ["echo", "{literal}"]
    assert len({c.case_dir for c in cases}) == len(cases)


def test_an_unknown_placeholder_is_a_manifest_error_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        _cases(tmp_path, MANIFEST.replace('"{board}"', '"{bord}"'))
    [problem] = caught.value.problems
    assert ":13: cases[0].expect.stdout_contains: unknown placeholder {bord}; did you mean {board}?" in problem


def test_a_regex_that_breaks_once_filled_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"cases\[0\].expect.stdout_matches: '\(Tesla T4' is not a regular"):
        _cases(tmp_path, MANIFEST.replace("'\\d{3} MiB'", "'({board}'"))


def test_filter_by_part_of_the_id_or_by_glob(tmp_path: Path) -> None:
    cases = _cases(tmp_path)
    assert [c.id for c in select(cases, ["a100,batch=8"])] == ["train[profile=a100,batch=8]",
                                                                "native-only[profile=a100,batch=8]"]
    assert [c.id for c in select(cases, ["train[*t4*]"])] == ["train[profile=t4,batch=1]"]
    assert [c.id for c in select(cases, ["native-only*", "train[profile=t4,batch=1]"])] == [
        "train[profile=t4,batch=1]", *(c.id for c in cases[3:])]
    assert select(cases, ["nothing"]) == [] and select(cases, []) == cases


def test_an_include_of_its_own_must_name_a_profile(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        _cases(tmp_path, MANIFEST.replace("{profile: t4, board: Tesla T4}", "{batch: 16}"))
    [problem] = caught.value.problems
    assert ":6: matrix.include: {'batch': 16} matches no combination, so it is one of its own, and it names no " \
           "profile" in problem


def test_a_command_string_that_does_not_split_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        _cases(tmp_path, MANIFEST.replace("--tag '{profile} x'", "--tag '{profile} x"))
    [problem] = caught.value.problems
    assert problem.endswith(":11: cases[0].command: not a command line: No closing quotation")


def test_a_memory_bound_is_checked_once_filled_and_located(tmp_path: Path) -> None:
    text = MANIFEST.replace('      json: [{pointer: /batch, eq: "{batch}"}]',
                            '      memory: {peak_allocated: "<= {budget}"}').replace(
        "{profile: t4, board: Tesla T4}", "{profile: t4, board: Tesla T4, budget: 14GiB}").replace(
        "{profile: a100, board: NVIDIA A100-SXM4-80GB}", "{profile: a100, board: NVIDIA A100-SXM4-80GB, budget: 70G}")
    with pytest.raises(ManifestError) as caught:
        _cases(tmp_path, text)
    [problem] = caught.value.problems
    assert problem.endswith(":15: cases[0].expect.memory.peak_allocated: '70G' is not a size (70GiB or 70GB?); "
                            "expected bytes, or a number with unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, "
                            "GiB, TiB (powers of 1024), e.g. 70GiB")
    cases = _cases(tmp_path, text.replace("budget: 70G}", "budget: 70GiB}"))
    assert cases[0].expect["memory"] == {"peak_allocated": "<= 14GiB"}
