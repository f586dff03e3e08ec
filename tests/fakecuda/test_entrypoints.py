"""How programs switch fakecuda on: the auto import, the environment hook, the `fakegpu demo` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

PROBE = ("import torch; x = torch.ones(3, device='cuda'); "
         "print(torch.cuda.device_count(), torch.cuda.get_device_name(0), x.device, torch.cuda.memory_allocated())")


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_auto_import_activates_devices_from_the_environment():
    out = python("import fakegpu.fakecuda.auto; " + PROBE, FAKEGPU_DEVICES="a100:3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "3" and "cuda:0 512" in out.stdout


def test_env_hook_acts_only_under_fakegpu_runtime():
    on = python("import fakegpu.fakecuda.envhook; " + PROBE, FAKEGPU_RUNTIME="fakecuda", FAKEGPU_DEVICES="a100")
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith("1 NVIDIA A100")
    off = python("import sys, fakegpu.fakecuda.envhook; print('torch' in sys.modules)", FAKEGPU_RUNTIME="native")
    assert off.stdout.strip() == "False"


def test_importing_fakegpu_stays_light():
    out = python("import sys, fakegpu, fakegpu.fakecuda; print('torch' in sys.modules)")
    assert out.stdout.strip() == "False"


def test_demo_command_json():
    result = run_cli("demo", "--devices", "a100:2", "--steps", "2", "--json")
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["command"] == "demo" and envelope["status"] == "ok"
    data = envelope["data"]
    assert [d["index"] for d in data["devices"]] == [0, 1]
    assert len(data["losses"]) == 2 and data["mode"] == "fakecuda"
    assert data["memory"][0]["peak_allocated_bytes"] > 0


def test_demo_rejects_a_bad_spec():
    result = run_cli("demo", "--devices", "nonesuch")
    assert result.returncode == 2 and "unknown profile 'nonesuch'" in result.stderr
