"""A real Prometheus server (Debian's package) scrapes `fakegpu metrics` running inside `fakegpu run` beside a
PyTorch job, and PromQL through its HTTP API sees DCGM_FI_DEV_FB_USED of each device move when the job
allocates on cuda:1 and only there."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.native.conftest import IN_CI

pytestmark = [pytest.mark.native, pytest.mark.torch, pytest.mark.slow]

# The job: CUDA up on cuda:0 first (its context is part of the baseline), then 1 GiB on cuda:1 when told.
JOB = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    work = Path(sys.argv[1])
    exporter = subprocess.Popen([sys.argv[2], "metrics", "--address", "127.0.0.1", "--port", "0"],
                                stdout=subprocess.PIPE, text=True)
    (work / "port").write_text(exporter.stdout.readline().rsplit(":", 1)[1].split("/")[0])
    import torch
    a = torch.ones(1, device="cuda:0")
    (work / "baseline").touch()
    while not (work / "go").exists():
        time.sleep(0.1)
    b = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:1")
    (work / "allocated").touch()
    while not (work / "done").exists():
        time.sleep(0.1)
    exporter.terminate()
    sys.exit(exporter.wait())
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited with {proc.returncode} before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.2)


def fb_used(prom: int) -> dict[str, float]:
    query = urllib.parse.urlencode({"query": "DCGM_FI_DEV_FB_USED"})
    with urllib.request.urlopen(f"http://127.0.0.1:{prom}/api/v1/query?{query}", timeout=10) as r:
        reply = json.load(r)
    assert reply["status"] == "success"
    return {s["metric"]["gpu"]: float(s["value"][1]) for s in reply["data"]["result"]}


def poll(prom: int, done, timeout: float = 60) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        seen = fb_used(prom)
        if done(seen):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"PromQL still answers {seen}")


def test_prometheus_scrapes_fb_used_per_device_moving_with_an_allocation(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        if IN_CI:
            pytest.fail("prometheus is not installed (.ci/run installs Debian's package)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    fakegpu = str(Path(sys.executable).with_name("fakegpu"))
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    job = subprocess.Popen([fakegpu, "run", "--devices", "a100:2", "--mode", "fakecuda", "--",
                            sys.executable, str(tmp_path / "job.py"), str(tmp_path), fakegpu],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)  # its exporter and job die with it if the test fails
    server = None
    log = open(tmp_path / "prometheus.log", "w")
    try:
        wait_for(tmp_path / "port", job)
        exporter = int((tmp_path / "port").read_text())
        (tmp_path / "prometheus.yml").write_text(textwrap.dedent(f"""
            global: {{scrape_interval: 1s, evaluation_interval: 1s}}
            scrape_configs:
              - job_name: fakegpu
                static_configs: [{{targets: ["127.0.0.1:{exporter}"]}}]
        """))
        prom = free_port()
        server = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{prom}"],
                                  stdout=subprocess.DEVNULL, stderr=log)
        wait_for(tmp_path / "baseline", job)
        # A scrape taken after cuda:0's context exists: both GPUs, one series each.
        time.sleep(2.5)
        base = poll(prom, lambda s: set(s) == {"0", "1"})
        (tmp_path / "go").touch()
        wait_for(tmp_path / "allocated", job)
        moved = poll(prom, lambda s: s.get("1", 0) >= base["1"] + 1024)
        assert moved["0"] == base["0"]
        (tmp_path / "done").touch()
        assert job.wait(timeout=60) == 0, job.stdout.read()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        log.close()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
