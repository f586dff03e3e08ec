"""Memory expectations end to end: PyTorch's peaks and preflight's verdict from FakeGPU's own reports of a
case's processes, in fakecuda and in native mode, gathered as `fakegpu preflight` gathers them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu import reports

pytestmark = [pytest.mark.torch, pytest.mark.native]

ALLOC = """\
import sys, torch
x = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
print(torch.cuda.max_memory_allocated())
"""

MANIFEST = """\
defaults: {timeout: 120}
matrix:
  profile: [t4]
  mode: [fakecuda, native]
cases:
  - name: alloc
    command: ["{python}", alloc.py, "1"]
    expect:
      memory: {peak_allocated: "== 1GiB", peak_reserved: ">= 1GiB", headroom: "> 12GiB"}
      preflight: fits
  - name: oom
    mode: native
    command: ["{python}", alloc.py, "100"]
    expect: {preflight: oom, stderr_contains: "CUDA out of memory"}
  - name: over
    mode: fakecuda
    command: ["{python}", alloc.py, "1"]
    expect:
      memory: {peak_allocated: "< 512MiB", device: 0}
"""


def test_memory_and_preflight_expectations_in_both_modes(tmp_path: Path) -> None:
    (tmp_path / "alloc.py").write_text(ALLOC)
    (tmp_path / "validate.yaml").write_text(MANIFEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out", "-j", "2"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    reports.validate(report, "validate")
    status = {c["id"]: c["status"] for c in report["cases"]}
    assert status == {"alloc[profile=t4,mode=fakecuda]": "passed", "alloc[profile=t4,mode=native]": "passed",
                      "oom[profile=t4,mode=native]": "passed", "over[profile=t4,mode=fakecuda]": "failed"}, proc.stdout
    by_id = {c["id"]: c for c in report["cases"]}
    native = by_id["alloc[profile=t4,mode=native]"]
    assert [c["check"] for c in native["checks"]] == [
        "exit code 0", "memory peak_allocated == 1GiB on every device", "memory peak_reserved >= 1GiB on every device",
        "memory headroom > 12GiB on every device", "preflight verdict fits (PASS_FIT)"]
    [device] = native["memory"]["devices"]
    assert native["memory"]["verdict"] == "PASS_FIT" and device["peak_allocated_bytes"] == 1 << 30
    assert device["peak_used_bytes"] > device["peak_reserved_bytes"]  # native mode: the CUDA context counted too
    assert by_id["oom[profile=t4,mode=native]"]["memory"]["verdict"] == "FAIL_OOM"
    [line] = [x for x in proc.stdout.splitlines() if "FAILED" in x]
    assert line.startswith("[") and "over[profile=t4,mode=fakecuda]" in line
    # sizes as PyTorch prints them (its format_size), and exactly
    assert line.endswith("memory peak_allocated < 512MiB on cuda:0: cuda:0 (Tesla T4): 1024.00 MiB (1073741824 bytes)")
