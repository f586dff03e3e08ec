"""Manifest loading: every problem named by file, line and key path, a close match for a misspelt key, in each
format; and a good manifest read into its parts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fakegpu.validate.manifest import ManifestError, load

GOOD = """\
defaults:
  timeout: 90s
  env: {SEED: 1, QUIET: true}
matrix:
  profile: [t4, "a100:2"]
  batch: [1, 8]
  exclude:
    - {profile: t4, batch: 8}
cases:
  - name: smi
    command: nvidia-smi -L
    expect: {exit_code: 0}
"""


def _write(tmp_path: Path, text: str, name: str = "validate.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load(path)
    assert caught.value.exit_code == 2
    return caught.value.problems


def test_a_good_manifest_is_read_into_its_parts(tmp_path: Path) -> None:
    m = load(_write(tmp_path, GOOD))
    assert m.axes == {"profile": ["t4", "a100:2"], "batch": [1, 8]}
    assert m.exclude == [{"profile": "t4", "batch": 8}]
    assert m.defaults.timeout_s == 90.0
    assert m.defaults.env == {"SEED": "1", "QUIET": "1"}
    assert [c.name for c in m.cases] == ["smi"] and m.cases[0].command == "nvidia-smi -L"


def test_a_misspelt_key_names_file_line_path_and_the_close_match(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("expect: {exit_code: 0}", "expect:\n      exit_cod: 0"))
    [problem] = _problems(path)
    assert problem.startswith(f"{path}:13: cases[0].expect.exit_cod: unknown key 'exit_cod'; "
                              "did you mean 'exit_code'?")
    assert "accepted: exit_code, json," in problem


def test_every_problem_is_listed_in_file_order(tmp_path: Path) -> None:
    text = GOOD.replace("timeout: 90s", "timout: 90s").replace("command: nvidia-smi -L", "comand: x")
    problems = _problems(_write(tmp_path, text))
    assert [p.split(": ", 2)[1] for p in problems] == ["defaults.timout", "cases[0].comand"]
    assert problems[0].split(": ")[0].endswith(":2") and problems[1].split(": ")[0].endswith(":11")
    # the misspelling is the one problem: no "missing required key 'command'" beside it
    assert problems[1].endswith("unknown key 'comand'; did you mean 'command'? (accepted: command, cwd, env, "
                                "expect, image, mode, name, requires, timeout)")


def test_requires_keys_are_checked_too(tmp_path: Path) -> None:
    text = GOOD.replace("expect: {exit_code: 0}", "requires:\n      modueles: [torch]\n      docker: yes please")
    problems = _problems(_write(tmp_path, text))
    assert [p.split(": ", 1)[1] for p in problems] == [  # in the order of the file
        "cases[0].requires.modueles: unknown key 'modueles'; did you mean 'modules'? (accepted: binaries, docker, "
        "modules, python)",
        "cases[0].requires.docker: 'yes please' is a string; expected true/false"]
    ok = load(_write(tmp_path, GOOD.replace("expect: {exit_code: 0}", "requires: {modules: torch, docker: true}")))
    assert ok.cases[0].requires == {"modules": "torch", "docker": True}


def test_a_missing_required_key_is_named(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace("    command: nvidia-smi -L\n", "")))
    assert problem.endswith(":10: cases[0]: missing required key 'command'")


def test_a_wrong_value_says_what_is_accepted(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace("timeout: 90s", "mode: cuda")))
    assert problem.endswith(":2: defaults.mode: 'cuda' is not accepted; expected one of: fakecuda, native, container")
    [problem] = _problems(_write(tmp_path, GOOD.replace("timeout: 90s", "timeout: soon")))
    assert ":2: defaults.timeout: 'soon' is not accepted; expected seconds, or a duration" in problem


def test_a_device_spec_goes_through_the_one_parser(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace('"a100:2"', "a10O")))
    assert ":5: matrix.profile[1]: invalid device spec 'a10O'" in problem and "Did you mean: a100" in problem


def test_exclude_names_only_axes(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace("{profile: t4, batch: 8}", "{profile: t4, bach: 8}")))
    assert ":8: matrix.exclude[0].bach: not an axis of the matrix; did you mean 'batch'?" in problem


def test_a_json_check_needs_an_operator(tmp_path: Path) -> None:
    text = GOOD.replace("expect: {exit_code: 0}", "expect:\n      json:\n        - {pointer: /a, file: x.json}")
    [problem] = _problems(_write(tmp_path, text))
    assert ":14: cases[0].expect.json[0]: no operator given; expected one of eq, ne, lt" in problem


def test_memory_needs_a_bound_and_preflight_a_verdict(tmp_path: Path) -> None:
    text = GOOD.replace("expect: {exit_code: 0}", "expect:\n      memory: {device: 0}\n      preflight: fit")
    problems = _problems(_write(tmp_path, text))
    assert [p.split(": ", 1)[1] for p in problems] == [
        "cases[0].expect.memory: no bound given; expected one of peak_allocated, peak_reserved, peak_used, headroom",
        "cases[0].expect.preflight: 'fit' is not accepted; expected one of: fits, oom"]
    [problem] = _problems(_write(tmp_path, GOOD.replace("expect: {exit_code: 0}",
                                                        "expect: {memory: {peak_alocated: '<= 1GiB'}}")))
    assert "cases[0].expect.memory.peak_alocated: unknown key 'peak_alocated'; did you mean 'peak_allocated'?" \
        in problem
    [problem] = _problems(_write(tmp_path, GOOD.replace("expect: {exit_code: 0}",
                                                        "expect: {memory: {peak_used: 'about 1GiB'}}")))
    assert problem.endswith("cases[0].expect.memory.peak_used: 'about 1GiB' is not accepted; expected a comparison "
                            "and a size: '<= 70GiB', '> 512MiB'")


def test_yaml_syntax_errors_name_the_line(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace("batch: [1, 8]", "batch: [1, 8")))
    assert problem.startswith(f"{tmp_path / 'validate.yaml'}:") and "not valid YAML" in problem


def test_json_manifests_have_lines_too(tmp_path: Path) -> None:
    text = '{\n  "matrix": {"profile": ["t4"]},\n  "cases": [\n    {"name": "a", "command": "true",\n' \
           '     "timeot": 3}\n  ]\n}\n'
    [problem] = _problems(_write(tmp_path, text, "v.json"))
    assert ":5: cases[0].timeot: unknown key 'timeot'; did you mean 'timeout'?" in problem
    [problem] = _problems(_write(tmp_path, "{\n  \"matrix\": }\n", "w.json"))
    assert ":2: not valid JSON" in problem


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_toml_manifests_are_read_and_located(tmp_path: Path) -> None:
    text = '[matrix]\nprofile = ["t4"]\n\n[[cases]]\nname = "a"\ncommand = "true"\nexpcet = {exit_code = 0}\n'
    [problem] = _problems(_write(tmp_path, text, "v.toml"))
    assert ":7: cases[0].expcet: unknown key 'expcet'; did you mean 'expect'?" in problem
    assert load(_write(tmp_path, text.replace("expcet", "expect"), "v.toml")).cases[0].expect == {"exit_code": 0}
    # the second of two [[cases]] tables: its own line, not the first table's key of that name
    two = text.replace("expcet", "expect") + '\n[[cases]]\nname = "b"\ncommand = "true"\ntimeout = "soon"\n'
    [problem] = _problems(_write(tmp_path, two, "v.toml"))
    assert ":12: cases[1].timeout: 'soon' is not accepted" in problem


def test_duplicate_case_names_and_unknown_suffix(tmp_path: Path) -> None:
    text = GOOD + "  - name: smi\n    command: 'true'\n"
    [problem] = _problems(_write(tmp_path, text))
    assert ":13: cases[1].name: case 'smi' is named twice (also cases[0])" in problem
    [problem] = _problems(_write(tmp_path, GOOD, "v.ini"))
    assert "a manifest is .yaml, .yml, .json, .toml" in problem
    [problem] = _problems(tmp_path / "missing.yaml")
    assert problem.endswith("missing.yaml: no such manifest")


def test_a_bad_name_says_what_a_name_is(tmp_path: Path) -> None:
    [problem] = _problems(_write(tmp_path, GOOD.replace("  batch: [1, 8]", '  "bat-ch": [1, 8]')
                                 .replace("batch: 8}", "profile: t4}")))
    assert problem.endswith(":6: matrix.bat-ch: key 'bat-ch' is not accepted; expected an identifier: letters, "
                            "digits and _, not starting with a digit")
    [problem] = _problems(_write(tmp_path, GOOD.replace("name: smi", "name: my case")))
    assert ":10: cases[0].name: 'my case' is not accepted; expected letters, digits" in problem
