"""`fakegpu runtime install --gpus` / `uninstall`: our hook under NVIDIA's name in a folder of the test's own,
refused where NVIDIA's toolkit is present, removed only when it is ours. Nothing outside tmp_path changes."""

from __future__ import annotations

import json
import os

import pytest
from fakegpu_hook import front, gpus
from typer.testing import CliRunner

from fakegpu.cli import container
from fakegpu.cli.main import app

HOOK = front.NVIDIA_HOOK


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A hook folder, a PATH and a 'dockerd PATH' of the test's own, no toolkit config folder, and the other
    files install writes (fronts, site config, daemon.json) under tmp_path."""
    hook_dir, bin_dir, sbin_dir = tmp_path / "hooks", tmp_path / "bin", tmp_path / "sbin"
    for d in (hook_dir, bin_dir, sbin_dir):
        d.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(gpus, "DOCKERD_PATH", str(sbin_dir))
    monkeypatch.setattr(gpus, "TOOLKIT_CONFIG_DIRS", (str(tmp_path / "etc-nvidia-container-runtime"),))
    monkeypatch.setenv("FAKEGPU_FRONT_DIR", str(tmp_path / "front"))
    monkeypatch.setenv("FAKEGPU_CONFIG", str(tmp_path / "fakegpu-config.json"))
    monkeypatch.delenv("FAKEGPU_HOOK_DIR", raising=False)
    return tmp_path


def cli(place, *args):
    daemon = ["--config", str(place / "daemon.json"), "--no-reload"]
    return CliRunner().invoke(app, ["runtime", *args, *daemon])


def install(place, *extra):
    return cli(place, "install", "--gpus", "--hook-dir", str(place / "hooks"), *extra)


def test_install_writes_the_front_and_says_to_restart(place):
    result = install(place)
    assert result.exit_code == 0, result.output
    hook = place / "hooks" / HOOK
    text = hook.read_text()
    assert text.startswith("#!/bin/sh\n" + front.NVIDIA_HOOK_MARK + "\n")
    assert "from fakegpu_hook.hook import nvidia_main" in text and " -I -S " in text
    assert os.access(hook, os.X_OK) and front.is_our_nvidia_hook(str(hook))
    assert f"wrote {hook}" in result.output and "restart" in result.output
    # The usual install happened too: --gpus adds to it.
    assert "fakegpu" in json.loads((place / "daemon.json").read_text())["runtimes"]
    again = install(place)
    assert again.exit_code == 0 and "already up to date" in again.output and hook.read_text() == text


def test_install_json_reports_the_hook(place):
    result = install(place, "--json")
    assert result.exit_code == 0, result.output
    hook = json.loads(result.output)["data"]["gpus_hook"]
    assert hook == {"action": "install", "path": str(place / "hooks" / HOOK), "hook_dir": str(place / "hooks"),
                    "changed": True, "written": True, "restart_dockerd": True}


def test_dry_run_writes_nothing(place):
    result = install(place, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"would write {place / 'hooks' / HOOK}" in result.output
    assert list((place / "hooks").iterdir()) == [] and not (place / "daemon.json").exists()


@pytest.mark.parametrize("where", ["hooks", "bin", "sbin"])
@pytest.mark.parametrize("name", [HOOK, "nvidia-ctk", "nvidia-container-toolkit", "nvidia-container-cli"])
def test_nvidia_toolkit_refuses_and_changes_nothing(place, where, name):
    theirs = place / where / name
    theirs.write_text("#!/bin/sh\n# NVIDIA's\n")
    theirs.chmod(0o755)
    result = install(place)
    assert result.exit_code == 1
    assert "NVIDIA's container toolkit" in result.output and str(theirs) in result.output
    assert "nothing was written" in result.output
    assert theirs.read_text() == "#!/bin/sh\n# NVIDIA's\n"
    assert not (place / "daemon.json").exists() and not (place / "front").exists()
    if where != "hooks":
        assert not (place / "hooks" / HOOK).exists()


def test_toolkit_config_folder_refuses(place):
    (place / "etc-nvidia-container-runtime").mkdir()
    result = install(place)
    assert result.exit_code == 1 and "etc-nvidia-container-runtime" in result.output
    assert not (place / "hooks" / HOOK).exists()


def test_a_link_at_the_name_is_not_ours_even_to_our_front(place):
    ours = place / "elsewhere"
    ours.mkdir()
    gpus.install_gpus_hook(str(ours), path="")
    (place / "hooks" / HOOK).symlink_to(ours / HOOK)
    assert install(place).exit_code == 1
    assert (place / "hooks" / HOOK).is_symlink()


def test_relative_hook_dir_is_refused(place):
    with pytest.raises(gpus.GpusHookError, match="absolute"):
        gpus.install_gpus_hook("hooks", path="")


def test_uninstall_removes_ours_and_says_to_restart(place):
    assert install(place).exit_code == 0
    result = cli(place, "uninstall", "--hook-dir", str(place / "hooks"))
    assert result.exit_code == 0, result.output
    assert not (place / "hooks" / HOOK).exists() and (place / "hooks").is_dir()
    assert f"removed {place / 'hooks' / HOOK}" in result.output and "restart" in result.output


def test_uninstall_leaves_a_file_not_ours_alone(place):
    theirs = place / "hooks" / HOOK
    theirs.write_text("#!/bin/sh\n# NVIDIA's\n")
    result = cli(place, "uninstall", "--hook-dir", str(place / "hooks"))
    assert result.exit_code == 0, result.output
    assert theirs.read_text() == "#!/bin/sh\n# NVIDIA's\n"
    assert f"left {theirs} alone: not written by fakegpu" in result.output


def test_uninstall_without_a_hook_says_nothing_of_it(place):
    result = cli(place, "uninstall", "--hook-dir", str(place / "hooks"))
    assert result.exit_code == 0, result.output
    assert "nvidia-container-runtime-hook" not in result.output and "restart" not in result.output


def test_uninstall_dry_run_keeps_the_hook(place):
    assert install(place).exit_code == 0
    result = cli(place, "uninstall", "--hook-dir", str(place / "hooks"), "--dry-run")
    assert result.exit_code == 0 and "would remove" in result.output
    assert (place / "hooks" / HOOK).exists()


def test_the_cli_default_is_the_modules():
    assert container.DEFAULT_HOOK_DIR == gpus.DEFAULT_HOOK_DIR
    assert gpus.DEFAULT_HOOK_DIR in gpus.DOCKERD_PATH.split(":")
