"""Container cases: the command in a container of the case's image with --runtime=fakegpu (the runtime registered
for real, as the container tests do), its devices the case's profile; a timeout stops the container, an
interrupted run removes every container it made (by label), and a missing image is the case's error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu import reports
from tests.container.conftest import base_image, fakegpu_runtime  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.docker, pytest.mark.native]
LABEL = "fakegpu.validate"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}


def _ours(docker_client, tmp_path: Path) -> list:
    """Containers of a validate run that mount this test's folder (a run's label value is its own)."""
    return [c for c in docker_client.containers.list(all=True, filters={"label": LABEL})
            if any(str(tmp_path) in (m.get("Source") or "") for m in c.attrs.get("Mounts", []))]


def test_container_cases_beside_local_ones(tmp_path: Path, docker_client, base_image, fakegpu_runtime) -> None:  # noqa: F811
    (tmp_path / "validate.yaml").write_text(f"""\
defaults: {{timeout: 60, image: "{base_image}"}}
matrix:
  profile: [t4, "a100:2"]
  mode: [native, container]
  include:
    - {{profile: t4, board: Tesla T4, count: 1}}
    - {{profile: "a100:2", board: NVIDIA A100-SXM4-80GB, count: 2}}
cases:
  - name: smi
    command: [nvidia-smi, --query-gpu=name, "--format=csv,noheader"]
    expect:
      stdout_matches: '^{{board}}$'
  - name: writes
    mode: container
    command: [sh, -c, 'nvidia-smi -L | wc -l > {{case_dir}}/n; echo "{{{{\\"n\\": $(cat {{case_dir}}/n)}}}}"']
    expect:
      json: [{{pointer: /n, eq: "{{count}}"}}]
  - name: hang
    mode: container
    timeout: 3
    command: [sleep, "300"]
  - name: no-image
    mode: container
    image: fakegpu/no-such-image:none
    command: ["true"]
""")
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out", "-j", "2",
                           "--junit", "j.xml", "-k", "smi", "-k", "writes[profile=a100:2,", "-k", "hang[profile=t4,",
                           "-k", "no-image[profile=t4,"],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    reports.validate(report, "validate")
    by_id = {c["id"]: c for c in report["cases"]}
    status = {k: c["status"] for k, c in by_id.items()}
    assert status == {
        "smi[profile=t4,mode=native]": "passed", "smi[profile=t4,mode=container]": "passed",
        "smi[profile=a100:2,mode=native]": "passed", "smi[profile=a100:2,mode=container]": "passed",
        "writes[profile=a100:2,mode=container]": "passed", "hang[profile=t4,mode=container]": "timeout",
        "no-image[profile=t4,mode=container]": "error"}, proc.stdout
    container_smi = by_id["smi[profile=a100:2,mode=container]"]
    assert container_smi["image"] == base_image and container_smi["mode"] == "container"
    assert Path(container_smi["stdout_log"]).read_text() == "NVIDIA A100-SXM4-80GB\n" * 2
    assert by_id["hang[profile=t4,mode=container]"]["message"].startswith(
        "ran past its timeout of 3 s; stopped its container ")
    assert by_id["no-image[profile=t4,mode=container]"]["message"] == (
        "image 'fakegpu/no-such-image:none' is not on this Docker Engine; pull or build it first (FakeGPU's own: "
        "images/build.sh)")
    assert _ours(docker_client, tmp_path) == []  # each removed when its case ended


def test_an_interrupted_run_removes_its_containers(tmp_path: Path, docker_client, base_image,  # noqa: F811
                                                   fakegpu_runtime) -> None:  # noqa: F811
    (tmp_path / "validate.yaml").write_text(f"""\
matrix: {{profile: [t4, a100]}}
cases:
  - name: hang
    mode: container
    image: "{base_image}"
    command: [sh, -c, "touch {{case_dir}}/started; sleep 300"]
""")
    # started as a shell starts a background job, with SIGINT ignored: validate still takes a supervisor's SIGINT
    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out", "-j", "2"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    started = [tmp_path / "out" / "cases" / f"hang_profile={p}_" / "started" for p in ("t4", "a100")]
    try:
        deadline = time.monotonic() + 120
        while not all(s.exists() for s in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(s.exists() for s in started), proc.stdout
        assert len(_ours(docker_client, tmp_path)) == 2
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed test leaves no validate behind (its containers go by label)
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted; the running cases were ended" in err and "Traceback" not in err
    assert _ours(docker_client, tmp_path) == []
