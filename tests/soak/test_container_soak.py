"""Many `docker run --runtime=fakegpu` starts at once, mixed specs: each container sees exactly its own devices,
and nothing is left on the host afterwards (mounts, state folders, processes)."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.container.conftest import LABEL, docker, run
from tests.soak.conftest import count

pytestmark = [pytest.mark.soak, pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
STATE_ROOT = Path("/run/fakegpu")
SPECS = ["a100:1", "h100:2", "t4", "a100:2,l4", "h200:4", "a10:1,t4:2", "l40s:3", "a100:8"]


def _state_folders() -> set[str]:
    return {e.name for e in STATE_ROOT.iterdir() if e.is_dir()} if STATE_ROOT.exists() else set()


def _our_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
    return [p for p in out if "fakegpu-create" in p or "fakegpu_hook.runtime" in p]


def _one(i: int) -> tuple[int, str, list[str], str]:
    spec, seed = SPECS[i % len(SPECS)], f"soak-{i}"
    result = run("-e", f"FAKEGPU_DEVICES={spec}", "-e", f"FAKEGPU_SEED={seed}", "--", "nvidia-smi", "-L")
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in result.stdout.splitlines() if "UUID: " in line]
    return i, spec, uuids, result.stderr if result.returncode else ""


def test_parallel_starts_each_see_their_own_devices_and_leave_nothing(soak_record):
    total, width = count(20, 100), count(10, 20)
    before_folders = _state_folders()
    before_mounts = Path("/proc/self/mountinfo").read_text().count("/run/fakegpu/")
    before_containers = set(docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.split())  # other tests
    start = time.monotonic()
    with ThreadPoolExecutor(width) as pool:
        results = list(pool.map(_one, range(total)))
    elapsed = time.monotonic() - start
    failures = [(i, spec, err) for i, spec, _, err in results if err]
    wrong = []
    for i, spec, uuids, err in results:
        if not err:
            expected = [d.uuid for d in resolve_devices(spec, seed=f"soak-{i}")]
            if uuids != expected:
                wrong.append((i, spec, uuids, expected))
    for _ in range(50):  # `docker run --rm` returns before the runtime's delete has always finished
        if _state_folders() <= before_folders:
            break
        time.sleep(0.1)
    leaked_folders = sorted(_state_folders() - before_folders)
    leaked_mounts = Path("/proc/self/mountinfo").read_text().count("/run/fakegpu/") - before_mounts
    leftover = sorted(set(docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.split()) - before_containers)
    soak_record(container_starts=total, parallel=width, failures=len(failures), wrong_devices=len(wrong),
                leaked_state_folders=len(leaked_folders), leaked_mounts=leaked_mounts,
                leftover_containers=len(leftover), leftover_processes=len(_our_processes()),
                seconds=round(elapsed, 1), starts_per_second=round(total / elapsed, 2))
    assert not failures, failures[:3]
    assert not wrong, wrong[:3]
    assert not leaked_folders and leaked_mounts <= 0 and not leftover and not _our_processes()


# Fails `create` after ours has prepared everything; as runc does, it writes the error to --log as a JSON line,
# which is where containerd looks. Every other command goes to the real runc.
FAILING_RUNC = r"""#!/bin/sh
log=; prev=
for a in "$@"; do
  [ "$prev" = --log ] && log=$a
  if [ "$a" = create ]; then
    [ -n "$log" ] && echo '{"level":"error","msg":"runc: injected failure"}' >> "$log"
    exit 1
  fi
  prev=$a
done
exec runc "$@"
"""


def test_a_failing_runc_leaves_no_state(site_config, tmp_path, soak_record):
    """A low-level runtime that fails `create` after ours has prepared everything: docker reports the failure,
    calls delete, and the state folder goes with it."""
    wrapper = tmp_path / "failing-runc"
    wrapper.write_text(FAILING_RUNC)
    wrapper.chmod(0o755)
    tmp_path.chmod(0o755)
    site_config({"low_level_runtime": str(wrapper)})
    before = _state_folders()
    name = f"fakegpu-soak-failrunc-{os.getpid()}"
    result = docker("run", "--name", name, "--label", LABEL, "--runtime=fakegpu", "-e", "FAKEGPU_DEVICES=a100:2",
                    "fakegpu/debian-base:bookworm", "true")
    try:
        assert result.returncode != 0 and "injected failure" in result.stderr, result.stderr
        for _ in range(50):
            if _state_folders() <= before:
                break
            time.sleep(0.1)
        assert _state_folders() <= before
    finally:
        docker("rm", "-f", name)
    soak_record(failing_runc="start failed with runc's message; no state folder left")
