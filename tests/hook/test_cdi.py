"""CDI spec and podman hooks.d generation."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fakegpu.cli.main import app


def test_cdi_generate(tmp_path):
    out = tmp_path / "cdi" / "fakegpu.json"
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100:2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    spec = json.loads(out.read_text())
    assert spec["kind"] == "fakegpu.dev/gpu" and spec["cdiVersion"]
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "all"]
    assert all(d["containerEdits"] for d in spec["devices"])
    edits = spec["containerEdits"]
    assert "FAKEGPU_DEVICES=a100:2" in edits["env"]
    hook = edits["hooks"][0]
    assert hook["hookName"] == "createContainer" and hook["path"].endswith("fakegpu-hook")
    assert not any(e.startswith("LD_") for e in hook["env"])


def test_cdi_generate_bad_spec():
    result = CliRunner().invoke(app, ["cdi", "generate", "--devices", "a100:0"])
    assert result.exit_code == 2 and "outside 1..64" in result.output


def test_podman_config():
    result = CliRunner().invoke(app, ["hook", "podman-config"])
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert doc["version"] == "1.0.0" and doc["when"] == {"always": True}
    assert doc["hook"]["path"].endswith("fakegpu-hook") and doc["stages"] == ["createContainer"]


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
