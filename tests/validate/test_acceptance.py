"""Issue 18's acceptance points for `fakegpu validate`, as a user meets them: a 3 cases x 3 device specs x 2 modes
matrix plus a container case (an image through --runtime=fakegpu, on each device spec) run with -j 2 writing
JSON, Markdown and JUnit XML, failing on one expectation and naming the case, its axis values and the check; and
a hanging `torchrun --nproc-per-node 2` ended at its timeout with nothing left behind in the process table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from fakegpu import reports
from tests.container.conftest import base_image, fakegpu_runtime  # noqa: F401  (fixtures)

pytestmark = pytest.mark.native


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}


# Light cases on purpose: nvidia-smi and Python without torch. -I keeps fakecuda's start hook (which imports
# torch, 2 s a process) out of the Python ones; fakecuda's NVML is there all the same (the launcher puts it on the
# library path), and its environment is what the `env` case reads.
MATRIX = """\
defaults: {timeout: 120}
matrix:
  profile: [t4, "a100:2", "h100:8"]
  mode: [fakecuda, native]
  include:
    - {profile: t4, board: Tesla T4, mib: 15360, count: 1}
    - {profile: "a100:2", board: NVIDIA A100-SXM4-80GB, mib: 81920, count: 2}
    - {profile: "h100:8", board: NVIDIA H100 80GB HBM3, mib: 81559, count: 8}
    - {mode: fakecuda, runtime: fakecuda}
    - {mode: native, runtime: none}
    - {profile: "a100:2", mode: native, count: 3}  # the one wrong expectation
cases:
  - name: smi
    command: [nvidia-smi, "--query-gpu=name,memory.total", "--format=csv,noheader"]
    expect:
      stdout_matches: '^{board}, {mib} MiB$'
  - name: nvml
    command: ["{python}", -I, -c, "import json, pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0);
               print(json.dumps({{'count': n.nvmlDeviceGetCount(), 'name': n.nvmlDeviceGetName(h)}}))"]
    expect:
      json:
        - {pointer: /count, eq: "{count}"}
        - {pointer: /name, eq: "{board}"}
  - name: env
    command: ["{python}", -I, -c, "import json, os; print(json.dumps({{k: os.environ.get(k, 'none') for k in
               ('FAKEGPU_DEVICES', 'FAKEGPU_RUNTIME')}}))"]
    expect:
      json:
        - {pointer: /FAKEGPU_DEVICES, eq: "{profile}"}
        - {pointer: /FAKEGPU_RUNTIME, eq: "{runtime}"}
"""
# The container case: nvidia-smi as the runtime puts it into a container of an image that has none (the case pins
# its mode, so it runs once per device spec, not once per mode).
CONTAINER_CASE = """\
  - name: in-container
    mode: container
    command: [nvidia-smi, "--query-gpu=name", "--format=csv,noheader"]
    expect:
      stdout_contains: "{board}"
"""


@pytest.mark.docker
def test_a_3x3x2_matrix_and_a_container_case_with_j2_write_json_markdown_junit_and_name_the_one_failure(
        tmp_path: Path, base_image, fakegpu_runtime) -> None:  # noqa: F811
    manifest = MATRIX.replace("defaults: {timeout: 120}", f'defaults: {{timeout: 120, image: "{base_image}"}}')
    (tmp_path / "validate.yaml").write_text(manifest + CONTAINER_CASE)
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "-j", "2", "--out", "out",
                           "--junit", "junit.xml", "--markdown", "summary.md"],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 22 and lines[-1].startswith("21 cases: 20 passed, 1 failed in "), proc.stdout
    [failed] = [line for line in lines if " FAILED " in line]
    # the case, its axis values and the failed check, with what was found
    assert " nvml[profile=a100:2,mode=native] " in failed and failed.endswith(": stdout /count eq 3: value is 2")

    report = json.loads((tmp_path / "out" / "report.json").read_text())
    reports.validate(report, "validate")
    assert report["summary"] == {"total": 21, "passed": 20, "failed": 1, "timeout": 0, "error": 0, "skipped": 0}
    profiles = ("t4", "a100:2", "h100:8")
    assert {(c["name"], c["values"]["profile"], c["mode"]) for c in report["cases"]} == {
        (n, p, m) for n in ("smi", "nvml", "env") for p in profiles for m in ("fakecuda", "native")} | {
        ("in-container", p, "container") for p in profiles}
    for case in report["cases"]:
        if case["mode"] == "container":
            assert case["status"] == "passed" and case["image"] == base_image, case

    [suite] = list(JUnitXml.fromfile(str(tmp_path / "junit.xml")))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (21, 1, 0, 0)
    [(case, failure)] = [(c, r) for c in suite for r in c.result]
    assert (case.classname, case.name) == ("nvml", "nvml[profile=a100:2,mode=native]")
    assert isinstance(failure, Failure) and failure.message == "stdout /count eq 3: value is 2"
    assert "axis values: profile=a100:2, mode=native, board=NVIDIA A100-SXM4-80GB" in failure.text

    summary = (tmp_path / "summary.md").read_text()
    assert "**21 cases: 20 passed, 1 failed in " in summary
    [row] = [line for line in summary.splitlines() if line.startswith("| ❌")]
    assert row.startswith("| ❌ failed | nvml | profile=a100:2, mode=native, board=NVIDIA A100-SXM4-80GB")
    assert row.endswith(" | stdout /count eq 3: value is 2 |")


# A worker of torchrun's that hangs; it leaves its pid and its parent's (torchrun's agent) for the test.
WORKER = """\
import os, sys, time
with open(os.path.join(sys.argv[1], f"pid-{os.environ['RANK']}"), "w") as f:
    f.write(f"{os.getpid()} {os.getppid()}")
time.sleep(600)
"""


def _processes_running(marker: str) -> list[str]:
    """Every live process whose command line mentions `marker`: the process table, not only the pids we know."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker in cmdline and stat[stat.rindex(")") + 2] != "Z":
            found.append(f"{entry}: {cmdline}")
    return found


@pytest.mark.torch
@pytest.mark.slow
def test_a_hanging_torchrun_is_ended_at_its_timeout_with_its_workers(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    assert torchrun.exists(), "torch's torchrun beside the interpreter"
    marker = f"hang-worker-{os.getpid()}-{time.monotonic_ns()}.py"
    (tmp_path / marker).write_text(WORKER)
    (tmp_path / "validate.yaml").write_text(f"""\
matrix: {{profile: ["a100:2"]}}
cases:
  - name: ddp
    timeout: 20
    command: [{torchrun}, --nproc-per-node, "2", --master-port, "0", {marker}, "{{case_dir}}"]
""")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out"],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - started < 120
    [case] = json.loads((tmp_path / "out" / "report.json").read_text())["cases"]
    assert case["status"] == "timeout", case
    case_dir = tmp_path / "out" / "cases" / "ddp_profile=a100_2_"
    pids = [[int(p) for p in (case_dir / f"pid-{rank}").read_text().split()] for rank in (0, 1)]
    assert len({parent for _, parent in pids}) == 1, "both workers are the one agent's"
    # torchrun (the workers' parent, the case's own process) and both workers ended, and it says so
    assert case["message"].startswith(f"ran past its timeout of 20 s; ended it (pid {pids[0][1]} and 2 processes "
                                      "it started: SIGTERM, SIGKILL after 2 s)")
    # nothing of the run is left: not the workers, not torchrun's agent, nothing naming the script or the case
    for pid in {p for pair in pids for p in pair}:
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    assert _processes_running(marker) == [] and _processes_running(str(case_dir)) == []
