"""A case's `requires`: modules found by the case's own interpreter (a python program, a script's #! line),
programs on its PATH, a Docker Engine; unmet, the case is skipped with the reason in every report, and a run
with skips and no failure exits 0 and counts them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml, Skipped

from fakegpu.validate import requires
from fakegpu.validate.requires import interpreter, unmet

PATH = os.environ.get("PATH", os.defpath)


def _script(tmp_path: Path, name: str, first_line: str) -> Path:
    path = tmp_path / name
    path.write_text(f"{first_line}\nprint('hi')\n")
    path.chmod(0o755)
    return path


def test_the_interpreter_is_the_commands_own(tmp_path: Path) -> None:
    assert interpreter(None, [sys.executable, "x.py"], tmp_path, PATH) == sys.executable
    venv_python = _script(tmp_path, "python3.99", "#!/bin/sh")  # named like one: it is one
    assert interpreter(None, [str(venv_python)], tmp_path, PATH) == str(venv_python)
    # a console script (torchrun, accelerate): the interpreter of its #! line, absolute or through env
    direct = _script(tmp_path, "torchrun", f"#!{sys.executable}")
    assert interpreter(None, [str(direct), "--nproc-per-node", "2"], tmp_path, PATH) == sys.executable
    _script(tmp_path, "tool", "#!/usr/bin/env -S python3")
    assert interpreter(None, ["./tool"], tmp_path, PATH) == shutil.which("python3")
    # not Python at all: python3 on the PATH; named explicitly: that one
    shell = _script(tmp_path, "run.sh", "#!/bin/sh")
    assert interpreter(None, [str(shell)], tmp_path, PATH) == shutil.which("python3")
    assert interpreter(str(direct), ["nvidia-smi"], tmp_path, PATH) == str(direct)


def test_modules_binaries_and_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requires.forget()
    env = dict(os.environ)
    command = [sys.executable, "-c", "pass"]
    assert unmet({"modules": ["json", "xml.etree.ElementTree"], "binaries": ["sh"]}, command, tmp_path, env) == []
    assert unmet({"modules": ["json", "no_such_mod_xyz", "nope_pkg.sub"]}, command, tmp_path, env) == [
        f"modules 'no_such_mod_xyz', 'nope_pkg.sub' not importable by {sys.executable}"]
    # the case's environment counts: a module on its PYTHONPATH is found
    (tmp_path / "mine_xyz.py").write_text("")
    assert unmet({"modules": "mine_xyz"}, command, tmp_path, {**env, "PYTHONPATH": str(tmp_path)}) == []
    assert unmet({"binaries": ["no-such-tool-xyz", "sh"]}, command, tmp_path, env) == [
        "program 'no-such-tool-xyz' is not on PATH"]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    [docker] = unmet({"docker": True}, command, tmp_path, env)
    assert docker.startswith("Docker Engine not reachable")
    assert unmet({"docker": False}, command, tmp_path, env) == []


def test_each_question_is_asked_once_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requires.forget()
    asked: list[tuple[str, ...]] = []
    real = requires._missing_modules
    monkeypatch.setattr(requires, "_missing_modules", lambda p, m, e: asked.append(tuple(m)) or real(p, m, e))
    for _ in range(5):
        unmet({"modules": ["json"]}, [sys.executable], tmp_path, dict(os.environ))
    assert asked == [("json",)]


@pytest.mark.native
def test_unmet_requirements_skip_and_say_why_in_every_report(tmp_path: Path) -> None:
    manifest = """\
matrix: {profile: [t4, a100]}
cases:
  - name: plain
    command: ["true"]
  - name: needs-module
    command: ["{python}", -c, "import no_such_mod_xyz"]
    requires: {modules: [json, no_such_mod_xyz]}
  - name: needs-tool
    command: [no-such-tool-xyz, --version]
    requires: {binaries: no-such-tool-xyz}
  - name: needs-docker
    command: ["true"]
    requires: {docker: true}
  - name: has-all
    command: ["{python}", -c, "import json"]
    requires: {modules: json, binaries: [sh, nvidia-smi]}
"""
    (tmp_path / "validate.yaml").write_text(manifest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no.sock"
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out", "-j", "2",
                           "--junit", "j.xml", "--markdown", "s.md", "--fail-fast"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180)
    # skips fail nothing (and do not stop --fail-fast); the summary counts them
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("10 cases: 4 passed, 6 skipped in ")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    why = {c["id"]: c["message"] for c in report["cases"] if c["status"] == "skipped"}
    assert why["needs-module[profile=t4]"] == (
        f"requirement not met: module 'no_such_mod_xyz' not importable by {sys.executable}")
    assert why["needs-tool[profile=a100]"] == "requirement not met: program 'no-such-tool-xyz' is not on PATH"
    assert why["needs-docker[profile=t4]"].startswith("requirement not met: Docker Engine not reachable")
    assert all(c["exit_code"] is None and c["stdout_log"] is None for c in report["cases"] if c["id"] in why)
    assert "SKIPPED needs-tool[profile=t4] 0.0 s: requirement not met: program 'no-such-tool-xyz'" in proc.stdout

    [suite] = list(JUnitXml.fromfile(str(tmp_path / "j.xml")))
    assert (suite.tests, suite.skipped, suite.failures, suite.errors) == (10, 6, 0, 0)
    skipped = {c.name: c.result for c in suite if c.result}
    assert all(isinstance(r[0], Skipped) for r in skipped.values()) and len(skipped) == 6
    assert skipped["needs-module[profile=a100]"][0].message == why["needs-module[profile=a100]"]
    summary = (tmp_path / "s.md").read_text()
    assert "10 cases: 4 passed, 6 skipped" in summary
    assert "| ⏭️ skipped | needs-tool | profile=t4 | 0.0 s | requirement not met: program 'no-such-tool-xyz'" in summary
