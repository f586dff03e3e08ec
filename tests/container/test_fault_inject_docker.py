"""`fakegpu fault inject --container` on the machine's real Docker Engine: from the host, into a running FakeGPU
container, seen by `docker exec nvidia-smi` there (which reads the board in its /run/fakegpu)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import run_cli
from tests.container.conftest import BASE_IMAGE, LABEL, NATIVE, RUNTIME, docker, need

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]


def lost_line(index: int, bus_id: str) -> str:
    # The driver gives the domain in 4 digits, NVML's bus ids in 8.
    return f"Unable to determine the device handle for GPU{index}: {bus_id[4:]}: GPU is lost.  Reboot the system " \
           "to recover this GPU"


@contextmanager
def sleeping(*env: str) -> Iterator[str]:
    """A running FakeGPU container, removed afterwards."""
    need((NATIVE / "bin" / "nvidia-smi").exists(), f"native build missing in {NATIVE} (run `make native`)")
    name = f"fakegpu-test-fault-{os.getpid()}"
    started = docker("run", "-d", "--name", name, "--label", LABEL, f"--runtime={RUNTIME}",
                     *(f"-e{e}" for e in env), BASE_IMAGE, "sleep", "300")
    try:
        assert started.returncode == 0, started.stderr
        yield name
    finally:
        docker("rm", "-f", name)


@pytest.fixture
def container() -> Iterator[str]:
    with sleeping("FAKEGPU_DEVICES=a100:2") as name:
        yield name


def test_xid_79_injected_from_the_host_loses_the_containers_gpu(container):
    before = docker("exec", container, "nvidia-smi", "-L")
    assert before.returncode == 0, before.stderr
    gpu0 = before.stdout.splitlines()[0]
    assert gpu0.startswith("GPU 0: ")
    bus = docker("exec", container, "nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader")
    assert bus.returncode == 0, bus.stderr

    injected = run_cli("fault", "inject", "--container", container, "--xid", "79", "--device", "1")
    assert injected.returncode == 0, injected.stderr
    assert "on GPU 1 " in injected.stdout and f"of container {container}" in injected.stdout

    after = docker("exec", container, "nvidia-smi", "-L")
    assert after.returncode == 15, (after.stdout, after.stderr)
    assert after.stdout.splitlines() == [lost_line(1, bus.stdout.splitlines()[1]), gpu0]
    # Another user of the container reads the board too (created by root on the host).
    other = docker("exec", "-u", "1000:1000", container, "nvidia-smi", "-L")
    assert other.returncode == 15 and other.stdout.splitlines()[1] == gpu0


def test_unknown_and_plain_containers_are_refused(container):
    unknown = run_cli("fault", "inject", "--container", container + "x", "--xid", "79", "--device", "1")
    assert unknown.returncode == 2
    assert f"no container '{container}x'; did you mean {container}?" in unknown.stderr
    name = f"fakegpu-test-plain-{os.getpid()}"
    plain = docker("run", "-d", "--name", name, "--label", LABEL, BASE_IMAGE, "sleep", "300")
    try:
        assert plain.returncode == 0, plain.stderr
        refused = run_cli("fault", "inject", "--container", name, "--xid", "79", "--device", "0")
        assert refused.returncode == 2
        assert f"container {name} is not a FakeGPU container" in refused.stderr
    finally:
        docker("rm", "-f", name)


def test_the_device_is_the_containers_gpu_not_the_hosts(host_inventory):
    inventory = host_inventory("a100:4")
    with sleeping("NVIDIA_VISIBLE_DEVICES=1,3") as name:  # the container's GPU 1 is the host's GPU 3
        injected = run_cli("fault", "inject", "--container", name, "--xid", "79", "--device", "1")
        assert injected.returncode == 0, injected.stderr
        assert f"({inventory[3].uuid})" in injected.stdout
        after = docker("exec", name, "nvidia-smi", "-L")
        assert after.returncode == 15, (after.stdout, after.stderr)
        assert after.stdout.splitlines() == [
            lost_line(1, inventory[3].pci_bus_id),
            f"GPU 0: {inventory[1].profile.name} (UUID: {inventory[1].uuid})"]


def test_a_fault_plan_in_the_containers_env_is_on_its_board_from_the_start():
    """`docker run -e FAKEGPU_FAULTS=PLAN`: the runtime puts the plan on the container's board at create, timed
    from then; a bad plan fails `docker run` with the plan's message and leaves no container behind."""
    plan = '{"faults": [{"xid": 79, "device": 1, "at": "2s"}, {"memory_pressure": "10GiB", "device": 0}]}'
    with sleeping("FAKEGPU_DEVICES=a100:2", f"FAKEGPU_FAULTS={plan}") as name:
        first = docker("exec", name, "nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
        assert first.returncode == 0, first.stderr   # GPU 1 still there: its Xid 79 is 2 s after the create
        assert first.stdout.split() == ["10240", "0"]  # the pressure at once, in no process list
        time.sleep(2.5)
        after = docker("exec", name, "nvidia-smi", "-L")
        assert after.returncode == 15 and "GPU1" in after.stdout.splitlines()[0], after.stdout
    name = f"fakegpu-test-badplan-{os.getpid()}"
    bad = docker("run", "--rm", "--name", name, "--label", LABEL, f"--runtime={RUNTIME}", "-e",
                 "FAKEGPU_DEVICES=a100:2", "-e", 'FAKEGPU_FAULTS={"faults": [{"xid": 79, "device": 2}]}',
                 BASE_IMAGE, "true")
    assert bad.returncode != 0 and "fault on GPU 2: the run has GPUs 0..1" in bad.stderr, bad.stderr
    assert docker("ps", "-aq", "--filter", f"name={name}").stdout.strip() == ""
