"""CDI spec and podman hooks.d generation."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.devices import resolve_devices


@pytest.mark.parametrize("args", [["cdi", "generate", "--devices", "a100"], ["hook", "podman-config"]])
def test_an_output_that_cannot_be_written_fails_as_other_commands_do(tmp_path, args):
    # exit 1 with the path named, as devices --table, validate --out and k8s render --out report it
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "fakegpu.json"
    result = CliRunner().invoke(app, [*args, "--output", str(out)])
    assert result.exit_code == 1, result.output
    assert f"cannot write {out}: {tmp_path / 'file'}: not a folder; nothing was written" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_write_leaves_the_old_spec_whole(tmp_path, monkeypatch):
    out = tmp_path / "fakegpu.json"
    out.write_text("the old spec\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100", "--output", str(out)])
    assert result.exit_code == 1, result.output
    assert f"cannot write {out}: No space left on device; nothing was written" in result.stderr
    assert out.read_text() == "the old spec\n" and [p.name for p in tmp_path.iterdir()] == ["fakegpu.json"]


def test_cdi_generate(tmp_path):
    out = tmp_path / "cdi" / "fakegpu.json"
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100:2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    spec = json.loads(out.read_text())
    assert spec["kind"] == "fakegpu.dev/gpu" and spec["cdiVersion"]
    gpus = resolve_devices("a100:2", seed="0")
    assert [d["name"] for d in spec["devices"]] == ["0", gpus[0].uuid, "1", gpus[1].uuid, "all"]
    # a GPU's two names set one variable (so naming it twice gives it once) to its UUID
    assert [d["containerEdits"]["env"] for d in spec["devices"]] == [
        [f"FAKEGPU_CDI_DEVICE_0={gpus[0].uuid}"], [f"FAKEGPU_CDI_DEVICE_0={gpus[0].uuid}"],
        [f"FAKEGPU_CDI_DEVICE_1={gpus[1].uuid}"], [f"FAKEGPU_CDI_DEVICE_1={gpus[1].uuid}"],
        ["FAKEGPU_CDI_DEVICE_ALL=all"]]
    edits = spec["containerEdits"]
    assert "FAKEGPU_CDI_INVENTORY=a100:2" in edits["env"]
    hook, cleanup = edits["hooks"]
    assert hook["hookName"] == "createContainer" and hook["path"].endswith("fakegpu-hook")
    assert not any(e.startswith("LD_") for e in hook["env"])
    # no runtime of ours deletes the container's host folder on this path: the hook's poststop stage does
    assert cleanup["hookName"] == "poststop" and cleanup["args"] == [*hook["args"], "--poststop"]


def test_cdi_names_mig_devices_by_place_and_uuid():
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100:1:mig=3g.40gb+1g.10gb"])
    assert result.exit_code == 0, result.output
    spec = json.loads(result.output)
    (gpu,) = resolve_devices("a100:1:mig=3g.40gb+1g.10gb", seed="0")
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", gpu.uuid, "0:0", gpu.mig[0].uuid, "0:1", gpu.mig[1].uuid, "all"]
    assert spec["devices"][4]["containerEdits"]["env"] == [f"FAKEGPU_CDI_DEVICE_0_1={gpu.mig[1].uuid}"]


def test_cdi_devices_select_as_nvidia_visible_devices_would():
    from fakegpu_hook.env import CDI_SOURCE, RequestError, device_request, resolve_request

    spec = "h100:4"
    gpus = resolve_devices(spec, seed="0")
    base = [f"FAKEGPU_CDI_INVENTORY={spec}", "NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin"]
    # in the order the engine applied the devices; the CDI devices win over NVIDIA_VISIBLE_DEVICES
    request = device_request([*base, f"FAKEGPU_CDI_DEVICE_3={gpus[3].uuid}", f"FAKEGPU_CDI_DEVICE_1={gpus[1].uuid}"])
    assert request.source == CDI_SOURCE and request.visible == (gpus[3].uuid, gpus[1].uuid)
    # the container numbers them in the host's order, as under NVIDIA_VISIBLE_DEVICES
    assert [d.uuid for d in resolve_request(request, "0")] == [gpus[1].uuid, gpus[3].uuid]
    assert device_request([*base, "FAKEGPU_CDI_DEVICE_ALL=all", f"FAKEGPU_CDI_DEVICE_0={gpus[0].uuid}"]).visible \
        is None
    # FAKEGPU_DEVICES still decides alone
    assert device_request(["FAKEGPU_DEVICES=t4", *base, "FAKEGPU_CDI_DEVICE_ALL=all"]).spec == "t4"
    with pytest.raises(RequestError, match="without FAKEGPU_CDI_INVENTORY"):
        device_request([f"FAKEGPU_CDI_DEVICE_0={gpus[0].uuid}"])
    with pytest.raises(RequestError, match="at most"):
        device_request([*base, *(f"FAKEGPU_CDI_DEVICE_{i}={gpus[0].uuid}" for i in range(1000))])
    with pytest.raises(RequestError, match="the CDI devices"):
        resolve_request(device_request([*base, "FAKEGPU_CDI_DEVICE_9=GPU-nope"]), "0")


def test_cdi_generate_bad_spec():
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100:0"])
    assert result.exit_code == 2 and "outside 1..64" in result.output


def test_podman_config():
    result = CliRunner().invoke(app, ["hook", "podman-config"])
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert doc["version"] == "1.0.0" and doc["when"] == {"always": True}
    assert doc["hook"]["path"].endswith("fakegpu-hook") and doc["stages"] == ["createContainer", "poststop"]


def test_podman_hook_carries_the_inventory_and_the_nvidia_switch(tmp_path, monkeypatch):
    # podman runs the hook for every container: it must select from the same inventory the runtime would.
    config = tmp_path / "config.json"
    config.write_text('{"inventory": "h100:8"}')
    monkeypatch.setenv("FAKEGPU_CONFIG", str(config))
    args = json.loads(CliRunner().invoke(app, ["hook", "podman-config"]).output)["hook"]["args"]
    assert args[args.index("--inventory") + 1] == "h100:8" and "--ignore-nvidia-env" not in args
    config.write_text('{"inventory": "h100:8", "honour_nvidia_env": false}')
    args = json.loads(CliRunner().invoke(app, ["hook", "podman-config"]).output)["hook"]["args"]
    assert "--ignore-nvidia-env" in args
