"""A validate report for people: Markdown (a CI job's summary page: GitHub's $GITHUB_STEP_SUMMARY, a merge
request comment) and one self-contained HTML page (inline styles, no scripts, nothing fetched). Both show a
table of the cases, status, axis values, time and the first failed check, then what went wrong in each case
that did not pass; the HTML page also has the end of each case's logs."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from fakegpu.errors import clip
from fakegpu.validate import report

MARK = {"passed": "✅", "failed": "❌", "timeout": "⏱️", "error": "❗", "skipped": "⏭️"}
# A table cell is one line: a long detail is cut there and given whole below the table.
CELL_CHARS = 160


def _title(doc: dict[str, Any]) -> str:
    return f"fakegpu validate {Path(doc['manifest']).name}"


def _headline(doc: dict[str, Any]) -> str:
    return f"{report.summary_line(doc)}, exit code {doc['exit_code']}"


def _cell(text: str) -> str:
    """Text safe in one Markdown table cell: one line, no column break, no HTML a renderer would act on."""
    one_line = " ".join(text.split())
    return escape(clip(one_line, CELL_CHARS), quote=False).replace("|", "\\|")


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"## {escape(_title(doc), quote=False)}", "", f"**{escape(_headline(doc), quote=False)}**", "",
             "| status | case | axis values | time | first failed check |", "|---|---|---|--:|---|"]
    for case in doc["cases"]:
        lines.append(f"| {MARK[case['status']]} {case['status']} | {_cell(case['name'])} | "
                     f"{_cell(report.axis_text(case))} | {case['elapsed_s']:.1f} s | "
                     f"{_cell(report.first_failure(case))} |")
    troubled = [c for c in doc["cases"] if c["status"] not in ("passed", "skipped")]
    if troubled:
        lines += ["", "### Not passed", ""]
        for case in troubled:
            lines.append(f"- **{_cell(case['id'])}** ({case['status']}, exit code {case['exit_code']}); logs: "
                         f"`{case['stdout_log']}`, `{case['stderr_log']}`")
            lines += [f"  - {_cell(why)}" for why in (report.failed_checks(case) or [case["message"]])]
    return "\n".join(lines) + "\n"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
td.time { text-align: right; white-space: nowrap; }
tr.passed td.status { color: #2a7d2a; } tr.failed td.status, tr.error td.status { color: #c62828; }
tr.timeout td.status { color: #b26a00; } tr.skipped td.status { color: #777; }
pre { background: #f6f6f6; padding: 6px; max-height: 30em; overflow: auto; white-space: pre-wrap; }
"""


def html(doc: dict[str, Any]) -> str:
    rows = []
    for case in doc["cases"]:
        status = case["status"]
        rows.append(f'<tr class="{status}"><td class="status">{MARK[status]} {status}</td>'
                    f"<td>{escape(case['name'])}</td><td>{escape(report.axis_text(case))}</td>"
                    f'<td class="time">{case["elapsed_s"]:.1f} s</td><td>{escape(report.first_failure(case))}</td>'
                    f"<td>{_details(case)}</td></tr>")
    title = escape(_title(doc))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_STYLE}</style></head><body>\n<h1>{title}</h1>\n"
            f"<p><strong>{escape(_headline(doc))}</strong>; manifest {escape(doc['manifest'])}</p>\n"
            "<table><thead><tr><th>status</th><th>case</th><th>axis values</th><th>time</th>"
            "<th>first failed check</th><th>details</th></tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table>\n</body></html>\n")


def _details(case: dict[str, Any]) -> str:
    checks = "".join(f"<li>{'✓' if c['passed'] else '✗'} {escape(c['check'])}"
                     f"{': ' + escape(c['detail']) if c['detail'] else ''}</li>" for c in case["checks"])
    parts = [f"<p>command: <code>{escape(' '.join(case['command']))}</code>, exit code {case['exit_code']}</p>"]
    if case["message"]:
        parts.append(f"<p>{escape(case['message'])}</p>")
    if checks:
        parts.append(f"<ul>{checks}</ul>")
    for label, key in (("stdout", "stdout_log"), ("stderr", "stderr_log")):
        excerpt = report.log_excerpt(case[key])
        if excerpt:
            parts.append(f"<p>{label} ({escape(case[key])}):</p><pre>{escape(excerpt)}</pre>")
    return f"<details><summary>{escape(case['id'])}</summary>{''.join(parts)}</details>"


def write_markdown(path: Path, doc: dict[str, Any]) -> None:
    report.write_text(path, markdown(doc))


def write_html(path: Path, doc: dict[str, Any]) -> None:
    report.write_text(path, html(doc))
