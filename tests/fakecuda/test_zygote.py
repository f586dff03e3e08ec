"""FAKEGPU_SHARE_TORCH=1: torchrun's workers forked from one zygote that imported torch (fakegpu/fakecuda/
zygote.py). Real torchrun, real fakecuda DDP: each worker runs as `python -u script args` would (argv, sys.path[0],
folder, environment), in a session of its own (torchrun's killpg), with torch's pages shared; a worker's exit
code reaches torchrun; the zygote leaves with its agent; what it cannot run goes to Popen, said once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.fakecuda.zygote import runnable

HERE = Path(__file__).resolve().parent
PROBE = HERE / "scripts" / "zygote_probe.py"


def test_only_what_python_would_run_as_a_script_is_forked():
    assert runnable((sys.executable, "-u", "train.py", "--lr", "1")) is None
    assert runnable((sys.executable, "train.py")) is None
    assert "interpreter options" in runnable((sys.executable, "-u", "-m", "pkg.train"))
    assert "interpreter options" in runnable((sys.executable, "-X", "dev", "train.py"))
    assert "is not this interpreter" in runnable(("/usr/bin/env", "bash", "run.sh"))


def _torchrun(tmp_path: Path, *args: str, share: bool = True, extra: dict[str, str] | None = None,
              nproc: int = 3) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    from tests.fakecuda.test_distributed import free_port, skip_without_libuv_store, worker_env

    skip_without_libuv_store()
    env = worker_env(tmp_path, devices="h100:4")
    env.update(FAKEGPU_SHARE_TORCH="1" if share else "0", **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(HERE.parents[1])])
    torchrun = Path(sys.executable).with_name("torchrun")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cmd = [str(torchrun), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port",
           str(free_port()), *args]
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=240)
    rows = [json.loads(line.split("PROBE ", 1)[1]) for line in proc.stdout.splitlines() if "PROBE {" in line]
    return proc, sorted(rows, key=lambda r: r["rank"])


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether `pid` has ended, waiting up to `within_s`: the zygote notices its agent's end when their socket
    closes, a moment after torchrun returns."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has ended
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.mark.torch
@pytest.mark.slow
def test_workers_forked_from_the_zygote_run_as_torchrun_started_them(tmp_path):
    proc, rows = _torchrun(tmp_path, str(PROBE), "a", "b c")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert [r["rank"] for r in rows] == [0, 1, 2]
    zygote = {r["ppid"] for r in rows}
    assert len(zygote) == 1 and "fakegpu.fakecuda.zygote" in rows[0]["parent"]
    for r in rows:
        assert r["argv"] == [str(PROBE), "a", "b c"] and r["path0"] == str(PROBE.parent)
        assert r["cwd"] == str(tmp_path / "work")
        assert r["sid"] == r["pid"]  # a session leader, as torchrun's Popen(start_new_session=True) makes
        assert r["fakecuda"] and r["devices"] == 4 and r["name"] == "NVIDIA H100 80GB HBM3"
        assert r["threads"] == 1  # OMP_NUM_THREADS=1 from the worker's environment, not the zygote's
        assert r["grads_agree"]
        # torch's pages come from the zygote: far more than one process's own libraries are shared
        assert r["shared_mib"] > 100, r
    assert _gone(zygote.pop())  # it left with torchrun's agent
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("ATEXIT")) == [
        "ATEXIT 0", "ATEXIT 1", "ATEXIT 2"]
    assert "started without the shared torch" not in proc.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_results_equal_plain_torchrun_and_exit_codes_reach_torchrun(tmp_path):
    plain, plain_rows = _torchrun(tmp_path, str(PROBE), share=False, nproc=2)
    shared, shared_rows = _torchrun(tmp_path, str(PROBE), nproc=2, extra={"ZYGOTE_EXIT": "1"})
    assert plain.returncode == 0, plain.stderr[-4000:]
    assert "fakegpu.fakecuda.zygote" not in plain_rows[0]["parent"]
    assert [r["grad_sum"] for r in shared_rows] == [r["grad_sum"] for r in plain_rows]
    assert shared.returncode != 0
    assert "exitcode: 3" in shared.stderr and "local_rank: 1" in shared.stderr, shared.stderr[-4000:]
    assert all(_gone(r["pid"]) for r in shared_rows) and _gone(shared_rows[0]["ppid"])
    raised, _ = _torchrun(tmp_path, str(PROBE), nproc=2, extra={"ZYGOTE_RAISE": "0"})
    assert "RuntimeError: rank failed on purpose" in raised.stderr and "exitcode: 1" in raised.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_a_module_entry_point_is_started_as_usual_and_says_so(tmp_path):
    module = tmp_path / "work" / "probe_mod.py"
    module.parent.mkdir()
    module.write_text(PROBE.read_text())
    proc, rows = _torchrun(tmp_path, "-m", "probe_mod", nproc=2)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert len(rows) == 2 and not any("fakegpu.fakecuda.zygote" in r["parent"] for r in rows)
    assert proc.stderr.count("FAKEGPU_SHARE_TORCH: a worker started without the shared torch") == 1
