"""A FIFO or a device where a user's file should be: every reader refuses it at once (exit 2, naming what it is),
none blocks waiting for a writer or reads /dev/zero forever."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.user_files import UnreadableFile, open_regular, read_text

COMMANDS = {
    "workspace-profiles file": lambda f: ["workspace-profiles", "list", "--file", f],
    "op list": lambda f: ["estimate-roofline", "-p", "h100", "--ops", f],
    "fabric file": lambda f: ["simulate-topology", "-f", f],
    "validate manifest": lambda f: ["validate", f],
    "training --config": lambda f: ["plan-training", "--model-dir", "unused", "--config", f],
    "calibrate observation": lambda f: ["calibrate", "compare", f, f],
    "trace": lambda f: ["replay-trace", f],
    "fault plan": lambda f: ["run", "--mode", "fakecuda", "--faults", f, "--", "true"],
}


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "plan.yaml"
    os.mkfifo(path)
    return str(path)


def _device(tmp_path: Path) -> str:
    path = tmp_path / "plan.json"
    path.symlink_to("/dev/zero")
    return str(path)


def test_open_regular_names_what_is_there_instead(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match=r"not a regular file \(a FIFO\)"):
        open_regular(_fifo(tmp_path))
    with pytest.raises(UnreadableFile, match=r"not a regular file \(a device\)"):
        open_regular(_device(tmp_path))
    with pytest.raises(UnreadableFile, match=r"not a regular file \(a folder\)"):
        open_regular(tmp_path)
    with pytest.raises(UnreadableFile) as missing:
        read_text(tmp_path / "nope", 10)
    assert isinstance(missing.value.__cause__, FileNotFoundError)
    (tmp_path / "ok.txt").write_text("fine")
    assert read_text(tmp_path / "ok.txt", 10) == "fine"


@pytest.mark.parametrize("make", [_fifo, _device])
@pytest.mark.parametrize("case", list(COMMANDS))
def test_no_reader_blocks_on_a_fifo_or_reads_a_device(case: str, make, tmp_path: Path) -> None:
    args = COMMANDS[case](make(tmp_path))
    if case == "training --config":
        args[2] = str(tmp_path)  # the config is read before the model folder is looked at
    got: list = []
    worker = threading.Thread(target=lambda: got.append(CliRunner().invoke(app, args)), daemon=True)
    worker.start()
    worker.join(20)
    assert got, f"{case}: still reading after 20 s"
    result = got[0]
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.stderr
