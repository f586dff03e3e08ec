"""A validate report as JUnit XML, the shape GitHub Actions' test reporters, GitLab's `artifacts:reports:junit`
and Jenkins' junit step read: one <testsuites> holding one <testsuite> for the manifest, one <testcase> per
case with classname the manifest case's name and name its id (the name and the axis values, as pytest names a
parametrised test), and in it

    <failure>  a check did not hold (message: the first failed check; text: every failed check and the command)
    <error>    the case timed out, or could not start (type "timeout" or "error")
    <skipped>  a requirement was not met, or --fail-fast stopped the run first
    <system-out>, <system-err>  the end of the case's stdout and stderr logs

Element and attribute names are the ones the common JUnit schemas (Ant's, Jenkins' junit-10) agree on; times
are seconds with three decimals, as Jenkins' schema's time pattern allows.
"""

from __future__ import annotations

import re
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from fakegpu.errors import clip
from fakegpu.validate import report

# Characters XML 1.0 cannot carry at all, not even escaped: a program's log may hold them (a terminal's
# control codes), and one would make the whole file unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# A message attribute is a line a CI shows in a table: long details go in the element's text.
MESSAGE_CHARS = 500


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def document(doc: dict[str, Any]) -> ET.Element:
    """The <testsuites> element of a built validate report."""
    summary = doc["summary"]
    failures = summary["failed"]
    errors = summary["timeout"] + summary["error"]
    name = f"fakegpu validate {Path(doc['manifest']).name}"
    root = ET.Element("testsuites", {"name": name, "tests": str(summary["total"]), "failures": str(failures),
                                     "errors": str(errors), "time": _seconds(doc["elapsed_s"])})
    suite = ET.SubElement(root, "testsuite", {
        "name": name, "tests": str(summary["total"]), "failures": str(failures), "errors": str(errors),
        "skipped": str(summary["skipped"]), "time": _seconds(doc["elapsed_s"]),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(doc["started"])),
        "hostname": socket.gethostname()})
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "manifest", "value": _text(doc["manifest"])})
    for case in doc["cases"]:
        suite.append(_testcase(case))
    return root


def _testcase(case: dict[str, Any]) -> ET.Element:
    element = ET.Element("testcase", {"classname": case["name"], "name": _text(case["id"]),
                                      "time": _seconds(case["elapsed_s"])})
    status = case["status"]
    message = _text(clip(report.first_failure(case), MESSAGE_CHARS))
    if status == "failed":
        body = "\n".join([*report.failed_checks(case), "", f"command: {' '.join(case['command'])}",
                          f"axis values: {report.axis_text(case)}"])
        ET.SubElement(element, "failure", {"type": "expectation", "message": message}).text = _text(body)
    elif status in ("timeout", "error"):
        ET.SubElement(element, "error", {"type": status, "message": message}).text = _text(case["message"])
    elif status == "skipped":
        ET.SubElement(element, "skipped", {"message": message})
    for tag, key in (("system-out", "stdout_log"), ("system-err", "stderr_log")):
        excerpt = report.log_excerpt(case[key])
        if excerpt:
            ET.SubElement(element, tag).text = _text(excerpt)
    return element


def render(doc: dict[str, Any]) -> str:
    root = document(doc)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: Path, doc: dict[str, Any]) -> None:
    report.write_text(path, render(doc))
