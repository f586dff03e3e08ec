"""The report's other formats, each from the one JSON document: JUnit XML read back by a JUnit parser nobody here
wrote (junitparser) and held to the element and attribute shape the common JUnit schemas give, the Markdown
summary and the HTML page. Built from made-up results: no case runs here."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from fakegpu import reports
from fakegpu.validate import FORMATS, write_reports
from fakegpu.validate import report as rep
from fakegpu.validate.checks import CheckResult
from fakegpu.validate.matrix import Case
from fakegpu.validate.runner import CaseResult

# The JUnit shape CI systems read, as Ant's JUnit schema and Jenkins' junit-10 schema describe it (their union
# where they differ: Ant names a testcase's error <error>, junit-10 <errors>; GitHub's, GitLab's and Jenkins'
# readers take <error>): element -> (required attributes, optional attributes, child elements).
JUNIT_SHAPE: dict[str, tuple[set[str], set[str], set[str]]] = {
    "testsuites": (set(), {"name", "time", "tests", "failures", "errors"}, {"testsuite"}),
    "testsuite": ({"name", "tests", "failures", "errors"},
                  {"time", "skipped", "timestamp", "hostname", "id", "package", "group", "file", "log", "url",
                   "version"}, {"properties", "testcase", "system-out", "system-err"}),
    "properties": (set(), set(), {"property"}),
    "property": ({"name", "value"}, set(), set()),
    "testcase": ({"name"}, {"classname", "time", "group"},
                 {"skipped", "error", "failure", "system-out", "system-err"}),
    "failure": (set(), {"type", "message"}, set()),
    "error": (set(), {"type", "message"}, set()),
    "skipped": (set(), {"type", "message"}, set()),
    "system-out": (set(), set(), set()),
    "system-err": (set(), set(), set()),
}
# Both schemas' time: digits with at most three decimals.
TIME = r"[0-9]+(\.[0-9]{1,3})?"


def _check_shape(element: ET.Element) -> None:
    required, optional, children = JUNIT_SHAPE[element.tag]
    attrs = set(element.attrib)
    assert required <= attrs, (element.tag, required - attrs)
    assert attrs <= required | optional, (element.tag, attrs - required - optional)
    if "time" in attrs:
        assert re.fullmatch(TIME, element.attrib["time"]), element.attrib["time"]
    for name in ("tests", "failures", "errors", "skipped"):
        if name in attrs:
            assert element.attrib[name].isdigit()
    for child in element:
        assert child.tag in children, (element.tag, child.tag)
        _check_shape(child)


def _case(tmp: Path, name: str, values: dict, command: tuple[str, ...] = ("python", "-c", "pass")) -> Case:
    cid = f"{name}[{','.join(f'{k}={v}' for k, v in values.items())}]"
    return Case(id=cid, name=name, values=values, devices=values["profile"], mode=values.get("mode", "native"),
                command=list(command), cwd=tmp, env={}, timeout_s=60.0, expect={}, case_dir=tmp / cid,
                origin="validate.yaml:3")


def _logs(tmp: Path, key: str, out: str, err: str) -> tuple[Path, Path]:
    folder = tmp / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.log").write_text(out)
    (folder / "stderr.log").write_text(err)
    return folder / "stdout.log", folder / "stderr.log"


def _doc(tmp: Path) -> dict:
    """One case of each status, logs with a control character and markup in them."""
    t4, a100 = {"profile": "t4", "mode": "native"}, {"profile": "a100", "mode": "fakecuda"}
    passed_out, passed_err = _logs(tmp, "p", "Tesla T4, 15360 MiB\n", "")
    failed_out, failed_err = _logs(tmp, "f", "x" * 20000 + "\nthe end <b>&\n", "warning \x1b[31mred\x1b[0m\n")
    timeout_out, timeout_err = _logs(tmp, "t", "", "still going\n")
    results = [
        CaseResult(_case(tmp, "smi", t4), "passed", 0, 0.25,
                   [CheckResult("exit code 0", True), CheckResult("stdout contains 'Tesla T4'", True)],
                   stdout_log=passed_out, stderr_log=passed_err),
        CaseResult(_case(tmp, "smi", a100), "failed", 0, 1.5,
                   [CheckResult("exit code 0", True),
                    CheckResult("stdout matches /^NVIDIA A100-SXM4-80GB, 40960 MiB$/", False,
                                "no match in stdout 'NVIDIA A100-SXM4-80GB, 81920 MiB'"),
                    CheckResult("stdout /gpus/0/util lt 0.4", False, "value is 0.5")],
                   stdout_log=failed_out, stderr_log=failed_err),
        CaseResult(_case(tmp, "train", t4), "timeout", 143, 4.0,
                   message="ran past its timeout of 4 s; ended it (pid 12: SIGTERM, SIGKILL after 2 s)",
                   stdout_log=timeout_out, stderr_log=timeout_err),
        CaseResult(_case(tmp, "train", a100), "error", None, 0.0,
                   message="native mode needs FakeGPU's CUDA libraries in /x"),
        CaseResult(_case(tmp, "docker", t4), "skipped", None, 0.0,
                   message="requires a Docker Engine: not reachable (no socket)"),
    ]
    return rep.build(tmp / "validate.yaml", results, 1_700_000_000.0, 6.25)


@pytest.fixture
def written(tmp_path: Path) -> tuple[dict, Path]:
    doc = _doc(tmp_path)
    paths = {f: tmp_path / "reports" / name for f, name in zip(FORMATS, ("junit.xml", "summary.md", "summary.html"),
                                                                 strict=True)}
    write_reports(doc, tmp_path / "out", paths)
    return doc, tmp_path / "reports"


def test_junit_is_read_back_by_a_junit_parser_with_every_status(written: tuple[dict, Path]) -> None:
    folder = written[1]
    xml = JUnitXml.fromfile(str(folder / "junit.xml"))
    [suite] = list(xml)
    assert (suite.name, suite.tests, suite.failures, suite.errors, suite.skipped) == (
        "fakegpu validate validate.yaml", 5, 1, 2, 1)
    assert suite.time == pytest.approx(6.25)
    cases = {(c.classname, c.name): c for c in suite}
    assert list(cases) == [("smi", "smi[profile=t4,mode=native]"), ("smi", "smi[profile=a100,mode=fakecuda]"),
                           ("train", "train[profile=t4,mode=native]"), ("train", "train[profile=a100,mode=fakecuda]"),
                           ("docker", "docker[profile=t4,mode=native]")]
    passed, failed, timeout, error, skipped = cases.values()
    assert passed.is_passed and passed.result == [] and passed.time == pytest.approx(0.25)
    assert passed.system_out == "Tesla T4, 15360 MiB\n"

    [failure] = failed.result
    assert isinstance(failure, Failure) and failure.type == "expectation"
    assert failure.message == ("stdout matches /^NVIDIA A100-SXM4-80GB, 40960 MiB$/: no match in stdout "
                               "'NVIDIA A100-SXM4-80GB, 81920 MiB'")
    assert "stdout /gpus/0/util lt 0.4: value is 0.5" in failure.text
    assert "axis values: profile=a100, mode=fakecuda" in failure.text
    # the end of a long log, saying where the whole is; markup escaped, a terminal's ESC made harmless
    assert failed.system_out.endswith("the end <b>&\n") and "the whole log (20014 bytes)" in failed.system_out
    assert len(failed.system_out) < rep.EXCERPT_CHARS + 200
    assert failed.system_err == "warning \ufffd[31mred\ufffd[0m\n"

    [timed] = timeout.result
    assert isinstance(timed, Error) and timed.type == "timeout" and timed.message.startswith("ran past its timeout")
    [err] = error.result
    assert isinstance(err, Error) and err.type == "error" and "CUDA libraries" in err.message
    assert error.system_out is None  # never started: no log
    [skip] = skipped.result
    assert isinstance(skip, Skipped) and skip.message == "requires a Docker Engine: not reachable (no socket)"


def test_junit_has_the_shape_of_the_common_junit_schemas(written: tuple[dict, Path]) -> None:
    root = ET.parse(written[1] / "junit.xml").getroot()
    assert root.tag == "testsuites"
    _check_shape(root)
    suite = root.find("testsuite")
    assert suite is not None and suite.attrib["timestamp"].count(":") == 2


def test_markdown_is_a_table_of_cases_with_the_first_failed_check(written: tuple[dict, Path]) -> None:
    text = (written[1] / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "## fakegpu validate validate.yaml"
    assert lines[2] == "**5 cases: 1 passed, 1 failed, 1 timeout, 1 error, 1 skipped in 6.2 s, exit code 1**"
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| status | case | axis values | time | first failed check |"
    assert table[1] == "| ✅ passed | smi | profile=t4, mode=native | 0.2 s |  |"
    assert table[2].startswith("| ❌ failed | smi | profile=a100, mode=fakecuda | 1.5 s | stdout matches "
                               "/^NVIDIA A100-SXM4-80GB, 40960 MiB$/: no match")
    assert table[5] == ("| ⏭️ skipped | docker | profile=t4, mode=native | 0.0 s | requires a Docker Engine: not "
                        "reachable (no socket) |")
    assert all(row.count(" | ") == 4 for row in table)  # no cell broke into another column
    # what went wrong in each, below the table: every failed check, not only the first
    assert "  - stdout /gpus/0/util lt 0.4: value is 0.5" in lines


def test_markdown_cells_cannot_break_the_table_or_inject_markup() -> None:
    from fakegpu.validate.summary import _cell

    assert _cell("a | b\nc <script>") == "a \\| b c &lt;script&gt;"
    assert len(_cell("x" * 1000)) < 200


def test_the_html_page_is_self_contained_and_escaped(written: tuple[dict, Path]) -> None:
    page = (written[1] / "summary.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "5 cases: 1 passed, 1 failed, 1 timeout, 1 error, 1 skipped" in page
    assert "the end &lt;b&gt;&amp;" in page and "the end <b>" not in page
    assert page.count('<tr class="') == 5 and '<tr class="skipped">' in page


def test_every_format_comes_from_the_json_report_beside_them(written: tuple[dict, Path], tmp_path: Path) -> None:
    import json

    doc, _ = written
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    reports.validate(on_disk, "validate")
    assert on_disk == json.loads(json.dumps(doc))
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        write_reports(doc, tmp_path / "out", {"xml": tmp_path / "x"})

