"""daemon.json editing through the CLI: keeps other keys, idempotent, dry run writes nothing, bad JSON refused."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app

ORIGINAL = '{"data-root": "/var/lib/docker", "log-opts": {"max-size": "10m"}, "runtimes": {"other": {"path": "/x"}}}'


@pytest.fixture(autouse=True)
def front_dir(tmp_path, monkeypatch):
    """`runtime install` writes its sh fronts here, not into the virtual environment; the runtime's config
    (which uninstall edits) is the test's own too."""
    monkeypatch.setenv("FAKEGPU_FRONT_DIR", str(tmp_path / "front"))
    monkeypatch.setenv("FAKEGPU_CONFIG", str(tmp_path / "fakegpu-config.json"))
    return tmp_path / "front"


@pytest.fixture
def daemon_json(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text(ORIGINAL)
    return path


def cli(*args):
    return CliRunner().invoke(app, list(args))


def test_install_keeps_other_keys_and_is_idempotent(daemon_json, front_dir):
    result = cli("runtime", "install", "--config", str(daemon_json), "--no-reload")
    assert result.exit_code == 0, result.output
    data = json.loads(daemon_json.read_text())
    assert data["data-root"] == "/var/lib/docker" and data["log-opts"] == {"max-size": "10m"}
    assert data["runtimes"]["other"] == {"path": "/x"}
    assert data["runtimes"]["fakegpu"]["path"] == str(front_dir / "fakegpu-container-runtime")
    assert (front_dir / "fakegpu-container-runtime").read_text().startswith("#!/bin/sh")
    assert os.access(front_dir / "fakegpu-hook", os.X_OK)
    assert "default-runtime" not in data
    after_first = daemon_json.read_bytes()
    result = cli("runtime", "install", "--config", str(daemon_json), "--no-reload")
    assert result.exit_code == 0 and "already up to date" in result.output
    assert daemon_json.read_bytes() == after_first
    assert (daemon_json.parent / "daemon.json.fakegpu.bak").read_text() == ORIGINAL


def test_python_create_front_has_no_c_fast_path(daemon_json, front_dir):
    assert cli("runtime", "install", "--config", str(daemon_json), "--no-reload").exit_code == 0
    assert "CREATE=" in (front_dir / "fakegpu-container-runtime").read_text()
    assert "fakegpu-create" in (front_dir / "fakegpu-container-runtime").read_text()
    result = cli("runtime", "install", "--config", str(daemon_json), "--no-reload", "--python-create")
    assert result.exit_code == 0, result.output
    assert "CREATE=''" in (front_dir / "fakegpu-container-runtime").read_text()


def test_dry_run_writes_nothing(daemon_json, front_dir):
    result = cli("runtime", "install", "--config", str(daemon_json), "--dry-run", "--set-default")
    assert result.exit_code == 0
    assert '"default-runtime": "fakegpu"' in result.output and "dry run" in result.output
    assert daemon_json.read_text() == ORIGINAL
    assert sorted(p.name for p in daemon_json.parent.iterdir()) == ["daemon.json"]
    assert not front_dir.exists()


def test_uninstall_restores_the_original_bytes(daemon_json):
    assert cli("runtime", "install", "--config", str(daemon_json), "--no-reload", "--set-default").exit_code == 0
    assert json.loads(daemon_json.read_text())["default-runtime"] == "fakegpu"
    assert cli("runtime", "uninstall", "--config", str(daemon_json), "--no-reload").exit_code == 0
    assert daemon_json.read_text() == ORIGINAL


def test_missing_file_is_created(tmp_path):
    path = tmp_path / "etc" / "daemon.json"
    assert cli("runtime", "install", "--config", str(path), "--no-reload", "--name", "fg").exit_code == 0
    assert list(json.loads(path.read_text())["runtimes"]) == ["fg"]


def test_invalid_json_is_refused_naming_the_file(daemon_json):
    daemon_json.write_text("{broken")
    result = cli("runtime", "install", "--config", str(daemon_json), "--no-reload", "--json")
    assert result.exit_code == 1
    envelope = json.loads(result.output)
    assert str(daemon_json) in envelope["errors"][0]["message"] and "not valid JSON" in envelope["errors"][0]["message"]
    assert daemon_json.read_text() == "{broken"


def test_reload_failure_is_reported(daemon_json, monkeypatch):
    from fakegpu_hook import daemon_json as dj

    monkeypatch.setattr(dj, "DEFAULT_PID_FILE", daemon_json.parent / "no.pid")
    monkeypatch.setattr(dj.shutil, "which", lambda name: None)
    with pytest.raises(dj.DaemonConfigError, match="could not reload"):
        dj.reload_daemon(daemon_json.parent / "no.pid")
