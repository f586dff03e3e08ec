"""Live progress: the per-case lines always, a redrawn status line (done, running, failed, time) only on a
terminal. The unit tests drive Progress with a clock of their own; the last one runs the CLI on a pseudo-terminal
as a user's shell would and reads what a terminal would be sent."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.validate.matrix import Case
from fakegpu.validate.progress import CLEAR, Progress, is_live
from fakegpu.validate.runner import CaseResult


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _case(name: str) -> Case:
    return Case(id=f"{name}[profile=t4]", name=name, values={"profile": "t4"}, devices="t4", mode="native",
                command=["true"], cwd=Path("."), env={}, timeout_s=10.0, expect={}, case_dir=Path("."),
                origin="validate.yaml:3")


def test_plain_output_is_one_line_per_case_and_nothing_else() -> None:
    out = io.StringIO()
    progress = Progress(out, 2)
    assert not progress.live
    a, b = _case("a"), _case("b")
    progress.start(a)
    progress.start(b)
    progress.done(CaseResult(b, "passed", elapsed_s=0.25))
    progress.done(CaseResult(a, "failed", message="exit code 3", elapsed_s=1.5))
    progress.close()
    assert out.getvalue() == ("[1/2] PASSED  b[profile=t4] 0.2 s\n"
                              "[2/2] FAILED  a[profile=t4] 1.5 s: exit code 3\n")


def test_a_terminal_gets_a_status_line_under_the_case_lines() -> None:
    now = [100.0]
    out = Tty()
    progress = Progress(out, 3, clock=lambda: now[0], width=lambda: 80)
    assert progress.live
    a, b, c = _case("a"), _case("b"), _case("c")
    progress.start(a)
    progress.start(b)
    now[0] = 102.5
    assert progress.status() == "[0/3] 2 running, 2.5 s: a[profile=t4], b[profile=t4]"
    progress.done(CaseResult(a, "timeout", message="ran past its timeout", elapsed_s=2.5))
    progress.start(c)
    assert progress.status() == "[1/3] 2 running, 1 failed, 2.5 s: b[profile=t4], c[profile=t4]"
    now[0] = 160.0
    progress.done(CaseResult(b, "passed", elapsed_s=60))
    progress.done(CaseResult(c, "passed", elapsed_s=58))
    progress.close()
    text = out.getvalue()
    # each case line starts on a cleared line and ends the line; the status line after it is redrawn in place
    assert f"{CLEAR}[1/3] TIMEOUT a[profile=t4] 2.5 s: ran past its timeout\n" in text
    assert f"{CLEAR}[0/3] 2 running, 0.0 s: a[profile=t4], b[profile=t4]" in text  # drawn when b started
    assert f"{CLEAR}[3/3] 0 running, 1 failed, 60.0 s" in text
    assert text.endswith(CLEAR)  # closing takes the status line away: the summary prints on a clean line
    # a long status line is cut to the terminal's width, never wrapped
    progress = Progress(Tty(), 40, clock=lambda: 0.0, width=lambda: 40)
    for i in range(5):
        progress.start(_case(f"case{i}"))
    assert progress.status() == "[0/40] 5 running, 0.0 s: case0[profi..." and len(progress.status()) == 39
    progress.close()


def test_live_only_where_a_terminal_can_redraw() -> None:
    assert not is_live(io.StringIO())
    assert is_live(Tty(), {"TERM": "xterm-256color"})
    assert not is_live(Tty(), {"TERM": "dumb"})


@pytest.mark.native
def test_the_cli_on_a_terminal_shows_running_cases_and_the_clock(tmp_path: Path) -> None:
    (tmp_path / "validate.yaml").write_text("""\
defaults: {mode: native, timeout: 30}
matrix: {profile: [t4]}
cases:
  - {name: slow, command: [sleep, "1.5"]}
  - {name: quick, command: ["false"]}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    env.update(TERM="xterm", COLUMNS="200")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "-j", "2", "--out", "out"],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the last holder of the terminal's other end has gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 1
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    assert f"{CLEAR}[0/2] 2 running, " in text, text
    assert re.search(r"\[1/2\] FAILED  quick\[profile=t4\] \d+\.\d s: .*\n", text), text
    # the clock moved while `slow` ran alone: redrawn more than once with it running
    alone = re.findall(r"\[1/2\] 1 running, 1 failed, (\d+\.\d) s: slow\[profile=t4\]", text)
    assert len(set(alone)) >= 2, text
    assert f"{CLEAR}2 cases: 1 passed, 1 failed in " in text
