"""`fakegpu runtime install --devices` and `uninstall`: the host's inventory in the runtime's config, validated by
the one spec parser, written atomically next to whatever else the config holds, shown by install and doctor."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.devices import resolve_devices
from fakegpu.doctor import PASS, CheckResult


@pytest.fixture(autouse=True)
def paths(tmp_path, monkeypatch):
    """A daemon.json, a site config and a front folder of the test's own."""
    monkeypatch.setenv("FAKEGPU_FRONT_DIR", str(tmp_path / "front"))
    monkeypatch.setenv("FAKEGPU_CONFIG", str(tmp_path / "etc" / "config.json"))
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "json-file"}')
    return {"daemon": daemon, "config": tmp_path / "etc" / "config.json", "front": tmp_path / "front"}


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def install(paths, *args: str):
    return cli("runtime", "install", "--config", str(paths["daemon"]), "--no-reload", *args)


def uninstall(paths, *args: str):
    return cli("runtime", "uninstall", "--config", str(paths["daemon"]), "--no-reload", *args)


def test_install_devices_writes_the_inventory_and_lists_it(paths):
    result = install(paths, "--devices", "a100:8")
    assert result.exit_code == 0, result.output
    assert json.loads(paths["config"].read_text()) == {"inventory": "a100:8"}
    # What NVIDIA_VISIBLE_DEVICES selects from, as nvidia-smi -L on the host would list it.
    for d in resolve_devices("a100:8", seed="0"):
        assert f"GPU {d.index}: {d.profile.name} (UUID: {d.uuid}, bus {d.pci_bus_id})" in result.output
    assert "runtimes" in json.loads(paths["daemon"].read_text())
    from fakegpu_hook.settings import load_settings

    assert load_settings().inventory_spec() == "a100:8"  # what the runtime reads at the next create


def test_install_keeps_the_configs_other_settings_and_replaces_the_inventory(paths):
    paths["config"].parent.mkdir()
    paths["config"].write_text('{"low_level_runtime": "crun", "inventory": "t4"}')
    assert install(paths, "--devices", "h100:2,l4").exit_code == 0
    assert json.loads(paths["config"].read_text()) == {"low_level_runtime": "crun", "inventory": "h100:2,l4"}
    before = paths["config"].read_bytes()
    assert install(paths, "--devices", "h100:2,l4").exit_code == 0
    assert paths["config"].read_bytes() == before  # idempotent, byte for byte


def test_install_without_devices_keeps_the_inventory_and_shows_it(paths):
    paths["config"].parent.mkdir()
    paths["config"].write_text('{"inventory": "l4:2"}')
    result = install(paths)
    assert result.exit_code == 0 and json.loads(paths["config"].read_text()) == {"inventory": "l4:2"}
    assert "GPU 1: NVIDIA L4" in result.output


@pytest.mark.parametrize(("spec", "named"), [("a10O:8", "Did you mean: a100"), ("a100:65", "outside 1..64"),
                                             ("a100,", "stray comma"), ("x" * 5000, "at most 1024")])
def test_a_bad_spec_writes_nothing_and_says_why(paths, spec, named):
    daemon = paths["daemon"].read_bytes()
    result = install(paths, "--devices", spec)
    assert result.exit_code == 2 and named in result.output
    assert len(result.output) < 600  # a 5000-byte spec is not echoed whole
    assert paths["daemon"].read_bytes() == daemon
    assert not paths["config"].exists() and not paths["front"].exists()


@pytest.mark.parametrize("text", ['{"colour": "blue"}', "{broken", "[1]", '{"low_level_runtime": 7}'])
def test_a_config_the_runtime_would_refuse_stops_the_install(paths, text):
    paths["config"].parent.mkdir()
    paths["config"].write_text(text)
    daemon = paths["daemon"].read_bytes()
    result = install(paths, "--devices", "a100:2")
    assert result.exit_code == 1 and "cannot update the runtime's config" in result.output
    assert paths["config"].read_text() == text and paths["daemon"].read_bytes() == daemon
    assert not paths["front"].exists()


def test_a_symlinked_config_is_not_followed(paths, tmp_path):
    paths["config"].parent.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    paths["config"].symlink_to(target)
    result = install(paths, "--devices", "a100:2")
    assert result.exit_code == 1 and "symlink" in result.output
    assert target.read_text() == "{}"


def test_dry_run_shows_the_config_change_and_writes_nothing(paths):
    result = install(paths, "--devices", "a100:2", "--dry-run")
    assert result.exit_code == 0
    assert '+    "inventory": "a100:2"' in result.output and "dry run" in result.output
    assert not paths["config"].exists()


def test_json_output_carries_the_config_change_and_the_inventory(paths):
    result = install(paths, "--devices", "a100:2", "--json")
    data = json.loads(result.output)["data"]
    assert data["config"]["written"] and data["config"]["path"] == str(paths["config"])
    assert [line.split(" (")[0] for line in data["inventory"]] == ["GPU 0: NVIDIA A100-SXM4-80GB",
                                                                   "GPU 1: NVIDIA A100-SXM4-80GB"]


def test_the_write_is_atomic(paths, monkeypatch):
    """A failing write leaves the old config whole and no temporary file beside it."""
    paths["config"].parent.mkdir()
    paths["config"].write_text('{"inventory": "t4"}')

    real_replace = os.replace

    def broken_replace(src, dst):
        if os.fspath(dst) == str(paths["config"]):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", broken_replace)
    result = install(paths, "--devices", "a100:2")
    assert result.exit_code == 1 and "cannot update the runtime's config" in result.output
    assert "No space left" in result.output
    assert paths["config"].read_text() == '{"inventory": "t4"}'
    assert sorted(p.name for p in paths["config"].parent.iterdir()) == ["config.json"]


def test_uninstall_removes_the_inventory_and_an_emptied_config(paths):
    assert install(paths, "--devices", "a100:2").exit_code == 0
    result = uninstall(paths)
    assert result.exit_code == 0 and "removed" in result.output
    assert not paths["config"].exists()
    assert "runtimes" not in json.loads(paths["daemon"].read_text())


def test_uninstall_keeps_other_settings_and_keep_inventory_keeps_it(paths):
    paths["config"].parent.mkdir()
    paths["config"].write_text('{"low_level_runtime": "crun", "inventory": "t4"}')
    assert uninstall(paths, "--keep-inventory").exit_code == 0
    assert json.loads(paths["config"].read_text()) == {"low_level_runtime": "crun", "inventory": "t4"}
    assert uninstall(paths).exit_code == 0
    assert json.loads(paths["config"].read_text()) == {"low_level_runtime": "crun"}


def test_uninstall_without_a_config_changes_nothing_there(paths):
    assert uninstall(paths).exit_code == 0 and not paths["config"].exists()


def test_doctor_names_the_inventory_and_fails_on_a_config_the_runtime_refuses(paths):
    from fakegpu.cli.doctor import _with_inventory

    registered = CheckResult("runtime", PASS, "runtime 'fakegpu' registered with the engine")
    assert "inventory 'a100:1': 1 GPU (no inventory set" in _with_inventory(registered).detail
    paths["config"].parent.mkdir()
    paths["config"].write_text('{"inventory": "h100:8"}')
    checked = _with_inventory(registered)
    assert checked.status == PASS and "inventory 'h100:8': 8 GPUs (setting inventory" in checked.detail
    paths["config"].write_text('{"inventory": "h10O:8"}')
    checked = _with_inventory(registered)
    assert checked.status == "fail" and "Did you mean" in checked.detail and checked.fix


def test_a_config_uninstall_did_not_change_is_left_as_it_was(paths):
    paths["config"].parent.mkdir()
    paths["config"].write_text("{}")
    assert uninstall(paths).exit_code == 0
    assert paths["config"].read_text() == "{}"


def test_install_driver_sets_the_hosts_driver_and_uninstall_removes_it(paths):
    result = install(paths, "--devices", "a100:2", "--driver", "550.127.08")
    assert result.exit_code == 0, result.output
    assert json.loads(paths["config"].read_text()) == {"inventory": "a100:2", "driver_version": "550.127.08"}
    from fakegpu_hook.settings import load_settings

    assert load_settings().driver_version == "550.127.08"  # what the next create names the driver after
    assert uninstall(paths).exit_code == 0
    assert not paths["config"].exists()


@pytest.mark.parametrize("driver", ["latest", "550", "5" * 10_000])
def test_a_bad_driver_writes_nothing_and_says_why(paths, driver):
    before = paths["daemon"].read_bytes()
    result = install(paths, "--driver", driver)
    assert result.exit_code != 0
    assert "is not a driver version; expected one like 580.95.05" in result.output
    assert len(result.output) < 400
    assert paths["daemon"].read_bytes() == before and not paths["config"].exists()
    assert not paths["front"].exists()
