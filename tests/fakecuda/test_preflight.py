"""`fakegpu preflight`: run a command under fakecuda, report peaks per device, verdict and exit status."""

from __future__ import annotations

import json

import pytest

from fakegpu.fakecuda.preflight import verdict
from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.conftest import run_cli

GiB = 1 << 30

# A model whose weights alone overflow a T4 but fit an A100: 15 x 1 GiB float32 layers. to_empty allocates
# without initializing, so the host never touches those pages: the run costs this machine next to nothing.
BIG_MODEL = """
import torch
from torch import nn
layers = [nn.Linear(16384, 16384, bias=False, device="meta") for _ in range({layers})]
model = nn.Sequential(*layers).to_empty(device="cuda")
print("loaded", sum(p.numel() * p.element_size() for p in model.parameters()) >> 30, "GiB")
"""


def preflight(tmp_path, devices: str, code: str, *extra: str, env: dict[str, str] | None = None):
    script = tmp_path / "train.py"
    script.write_text(code)
    import sys

    result = run_cli("preflight", "--devices", devices, "--json", *extra, "--", sys.executable, str(script), env=env)
    envelope = json.loads(result.stdout)
    return result, envelope


def test_profile_sizes_make_the_acceptance_model_meaningful():
    catalog = load_catalog()
    assert catalog.get("t4").cuda_total_bytes < 15 * GiB < catalog.get("a100").cuda_total_bytes


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(("devices", "verdict_name", "code"), [("t4", "FAIL_OOM", 2), ("a100", "PASS_FIT", 0)])
def test_model_overflows_a_t4_but_fits_an_a100(tmp_path, devices, verdict_name, code):
    pytest.importorskip("torch")
    result, envelope = preflight(tmp_path, devices, BIG_MODEL.format(layers=15))
    assert result.returncode == code, result.stderr[-2000:]
    doc = envelope["data"]
    validate(doc)
    assert envelope["command"] == "preflight" and envelope["exit_code"] == code
    assert doc["verdict"] == verdict_name and doc["mode"] == "fakecuda" and len(doc["processes"]) == 1
    device = doc["devices"][0]
    assert device["capacity_bytes"] == load_catalog().get(devices).cuda_total_bytes
    if verdict_name == "FAIL_OOM":
        assert doc["oom"]["occurred"] and doc["oom"]["message"].startswith("CUDA out of memory. Tried to allocate")
        assert doc["processes"][0]["uncaught_exception"] == "OutOfMemoryError"
        assert device["peak_allocated_bytes"] < 15 * GiB
    else:
        assert not doc["oom"]["occurred"] and "loaded 15 GiB" in result.stderr
        assert device["peak_allocated_bytes"] == 15 * GiB
        assert device["headroom_bytes"] == device["capacity_bytes"] - device["peak_used_bytes"] > 0


@pytest.mark.torch
def test_runtime_error_and_human_summary(tmp_path):
    pytest.importorskip("torch")
    result, envelope = preflight(tmp_path, "a100", "import torch; torch.ones(4, device='cuda'); raise SystemExit(3)")
    assert result.returncode == 1 and envelope["data"]["verdict"] == "RUNTIME_ERROR"
    validate(envelope["data"])
    script = tmp_path / "ok.py"
    script.write_text("import torch\nx = torch.ones(1 << 20, device='cuda')\n")
    import sys

    human = run_cli("preflight", "--devices", "a100:2", "--", sys.executable, str(script))
    assert human.returncode == 0, human.stderr
    assert "verdict: PASS_FIT (fits) on a100:2 [fakecuda]" in human.stdout
    assert "PEAK ALLOCATED" in human.stdout and "4.00 MiB" in human.stdout


@pytest.mark.torch
def test_start_hook_chains_to_an_existing_sitecustomize(tmp_path):
    pytest.importorskip("torch")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    code = ("import os, torch\nassert os.environ.get('THEIR_SITECUSTOMIZE') == 'ran'\n"
            "assert torch.cuda.is_available() and torch.ones(1, device='cuda').is_cuda\n")
    result, envelope = preflight(tmp_path, "a100", code, env={"PYTHONPATH": str(theirs)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert envelope["data"]["verdict"] == "PASS_FIT"


def test_bad_device_spec():
    result = run_cli("preflight", "--devices", "nonesuch", "--", "true")
    assert result.returncode == 2 and "unknown profile 'nonesuch'" in result.stderr


def test_verdicts():
    oom = {"oom": {"occurred": True}, "uncaught_exception": None}
    clean = {"oom": {"occurred": False}, "uncaught_exception": None}
    assert verdict(0, [clean])[0] == "PASS_FIT"
    assert verdict(1, [oom])[0] == "FAIL_OOM"
    assert verdict(0, [{**oom, "uncaught_exception": "OutOfMemoryError"}])[0] == "FAIL_OOM"
    assert verdict(0, [oom]) == ("PASS_FIT", ["an out-of-memory error was raised and handled by the program; "
                                              "it then finished"])
    assert verdict(1, [clean])[0] == "RUNTIME_ERROR"
    assert verdict(0, [])[0] == "RUNTIME_ERROR"


@pytest.mark.torch
def test_uncertain_ops_are_listed_with_the_verdict(tmp_path):
    pytest.importorskip("torch")
    code = ("import torch\nx = torch.randn(4096, device='cuda')\n"
            "for _ in range(3):\n    v, i = torch.sort(x)\n"
            "y = (x * 2).sum()\n")  # elementwise and reductions: modeled, not listed
    result, envelope = preflight(tmp_path, "a100", code)
    assert result.returncode == 0, result.stderr[-2000:]
    doc = envelope["data"]
    validate(doc)
    assert doc["uncertainty"] == [{"op": "aten.sort", "calls": 3, "direction": "low",
                                   "why": doc["uncertainty"][0]["why"]}]
    assert "cub" in doc["uncertainty"][0]["why"] and doc["processes"][0]["uncertainty"] == doc["uncertainty"]
    assert any("aten.sort" in note and "--mode native" in note for note in doc["notes"])
    human = run_cli("preflight", "--devices", "a100", "--", *doc["command"])
    assert "uncertain: aten.sort x3 (low)" in human.stdout


def test_uncertainty_merges_processes_and_knows_only_listed_ops():
    from fakegpu.fakecuda.fidelity import gap, uncertainty
    from fakegpu.fakecuda.preflight import merge_uncertainty

    assert gap("add") is None and gap("sum") is None and gap("sort").direction == "low"
    # _linalg_svd was unchecked until a real H200 measured it low (tests/data/gpu/h200/mem_opdb.json)
    assert gap("_linalg_eigh").direction == "unchecked" and gap("cumprod").direction == "high"
    assert gap("_linalg_svd").direction == "low"
    rows = uncertainty({"add": 9, "sort": 2, "_fft_r2c": 5})
    assert [r["op"] for r in rows] == ["aten._fft_r2c", "aten.sort"]
    merged = merge_uncertainty([{"uncertainty": rows}, {"uncertainty": uncertainty({"sort": 4})}, {}])
    assert [(r["op"], r["calls"]) for r in merged] == [("aten.sort", 6), ("aten._fft_r2c", 5)]
