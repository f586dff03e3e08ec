"""Hostile containers against the real engine, each checked from the host afterwards: what a container plants
must never be usable by the host, hostile values cost nothing and say so, and folder targets are never followed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.container.conftest import BASE_IMAGE, LABEL, build_image, docker, need, run

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
STATE_ROOT = Path("/run/fakegpu")
NOBODY = 65534


def as_nobody(*cmd: str) -> subprocess.CompletedProcess[str]:
    """A command as an unprivileged host user (uid/gid 65534, no supplementary groups)."""
    setpriv = shutil.which("setpriv")
    need(setpriv is not None, "setpriv (util-linux) is needed to act as an unprivileged host user")
    return subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd],
                          capture_output=True, text=True, timeout=30)


def start(name: str, *opts: str, cmd: tuple[str, ...] = ("sleep", "60")) -> str:
    started = docker("run", "-d", "--name", name, "--label", LABEL, "--runtime=fakegpu", *opts, BASE_IMAGE, *cmd)
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def test_what_a_container_plants_is_useless_to_the_host():
    """A setuid shell and a device node written from inside the container: the host folder they land in is on a
    nosuid,nodev,noexec tmpfs that only root can enter, so an unprivileged host user can neither reach nor use
    them, and even root's exec of the planted binary fails."""
    name = f"fakegpu-test-plant-{os.getpid()}"
    plant = ("cp /bin/bash /run/fakegpu/rootsh && chmod 4755 /run/fakegpu/rootsh && "
             "mknod -m 666 /run/fakegpu/kmsg c 1 11 && ls -l /run/fakegpu")
    cid = start(name, "-e", "FAKEGPU_DEVICES=a100", cmd=("sh", "-c", plant + " && sleep 60"))
    try:
        planted = STATE_ROOT / cid / "state"
        for _ in range(50):
            if (planted / "kmsg").exists():
                break
            subprocess.run(["sleep", "0.1"])
        assert (planted / "rootsh").exists() and (planted / "kmsg").exists()
        flags = os.statvfs(planted).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV and flags & os.ST_NOEXEC
        assert STATE_ROOT.stat().st_mode & 0o077 == 0 and (STATE_ROOT / cid).stat().st_mode & 0o077 == 0
        # An unprivileged user cannot even reach the folder, let alone run the shell or write the node.
        shell = as_nobody(str(planted / "rootsh"), "-p", "-c", "id -u")
        assert shell.returncode != 0 and "0" != shell.stdout.strip()
        node = as_nobody("sh", "-c", f"echo hi > {planted / 'kmsg'}")
        assert node.returncode != 0
        # Root itself cannot run it (noexec) or open the node as a device (nodev).
        with pytest.raises(PermissionError):
            subprocess.run([str(planted / "rootsh"), "-c", "true"], capture_output=True)
        with pytest.raises(PermissionError):
            open(planted / "kmsg", "w").close()
    finally:
        docker("rm", "-f", name)
    assert not (STATE_ROOT / cid).exists()


def test_the_log_and_table_stay_on_the_host():
    result = run("-e", "FAKEGPU_DEVICES=a100:2", "--", "ls", "-a", "/run/fakegpu")
    assert result.returncode == 0, result.stderr
    listing = result.stdout.split()
    assert "inject.log" not in listing and "hook.log" not in listing
    assert "devices.tbl" in listing  # the container's own table, mounted read-only


@pytest.mark.parametrize("size", [20_000, 1_000_000])
def test_a_huge_device_spec_is_refused_at_once_with_a_short_message(size, docker_client):
    """Through the API (a command line or env file holds far less than 1 MB per value). The runtime is dockerd's
    child, so its CPU time is measured in tests/hook/test_limits.py; here the value must be refused with a message
    that reaches the client and never echoes it back."""
    import docker as docker_sdk

    value = "x" * size if size < 100_000 else "a100:2" + " " * (size - 6)
    with pytest.raises(docker_sdk.errors.APIError) as exc:
        docker_client.containers.run(BASE_IMAGE, "true", runtime="fakegpu", remove=True,
                                     labels=dict([LABEL.split("=", 1)]), environment=[f"FAKEGPU_DEVICES={value}"])
    message = str(exc.value)
    for c in docker_client.containers.list(all=True, filters={"label": LABEL, "status": "created"}):
        c.remove(force=True)  # the API created it before the start failed
    assert "at most 1024" in message and len(message) < 2000, message[:3000]


def test_long_seeds_keep_distinct_identities_and_too_long_ones_are_refused():
    seed = "s" * 128  # the longest accepted: every device still hashes its own index and profile
    ok = run("-e", "FAKEGPU_DEVICES=a100:3", "-e", f"FAKEGPU_SEED={seed}", "--", "nvidia-smi", "-L")
    assert ok.returncode == 0, ok.stderr
    uuids = [line.split("UUID: ")[1] for line in ok.stdout.splitlines() if "UUID: " in line]
    assert len(uuids) == 3 and len(set(uuids)) == 3
    refused = run("-e", "FAKEGPU_DEVICES=a100:3", "-e", f"FAKEGPU_SEED={'s' * 9000}", "--", "true")
    assert refused.returncode != 0
    assert "FAKEGPU_SEED" in refused.stderr and "at most 128" in refused.stderr and len(refused.stderr) < 2000


@pytest.mark.parametrize("link", ["/etc", "/proc/self/root/etc"])
def test_a_link_at_a_folder_target_is_replaced_not_followed(link):
    dockerfile = (f"ARG BASE\nFROM $BASE\nRUN mkdir -p /run && rm -rf /run/fakegpu && ln -s {link} /run/fakegpu && "
                  f"ln -s {link} /usr/lib/x86_64-linux-gnu/fakegpu\n")
    image = build_image(f"folder-links-{abs(hash(link))}", dockerfile)
    result = run("-e", "FAKEGPU_DEVICES=a100:2", "--", "sh", "-c",
                 "test -f /etc/passwd && test ! -e /etc/devices.tbl && test -d /run/fakegpu && "
                 "test ! -L /run/fakegpu && test ! -L /usr/lib/x86_64-linux-gnu/fakegpu && "
                 "grep -c ' /etc ' /proc/self/mountinfo; nvidia-smi -L", image=image)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "0"  # nothing mounted over the container's /etc
    assert "GPU 1:" in result.stdout


def test_a_volume_over_the_library_folder_fails_the_start_with_a_message():
    image = build_image("volume-libdir", 'ARG BASE\nFROM $BASE\nVOLUME ["/usr/lib/x86_64-linux-gnu"]\n')
    before = {e.name for e in STATE_ROOT.iterdir()} if STATE_ROOT.exists() else set()
    name = f"fakegpu-test-volume-{os.getpid()}"
    result = docker("run", "--name", name, "--label", LABEL, "--runtime=fakegpu", "-e", "FAKEGPU_DEVICES=a100",
                    image, "true")
    try:
        assert result.returncode != 0
        assert "covers" in result.stderr and "/usr/lib/x86_64-linux-gnu" in result.stderr, result.stderr
        after = {e.name for e in STATE_ROOT.iterdir()} if STATE_ROOT.exists() else set()
        assert after <= before  # no state folder left behind
    finally:
        docker("rm", "-f", "-v", name)
    # A fresh tmpfs over /run holds nothing to follow: the start works and the state folder lands in it.
    ok = run("--tmpfs", "/run", "-e", "FAKEGPU_DEVICES=a100", "--", "sh", "-c", "cat /run/fakegpu/devices.tbl")
    assert ok.returncode == 0 and "count=1" in ok.stdout, ok.stderr


def test_a_fifo_at_a_library_name_is_replaced_and_a_folder_fails_the_start():
    fifo = build_image("fifo-soname", "ARG BASE\nFROM $BASE\nRUN mkfifo /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n")
    result = run("-e", "FAKEGPU_DEVICES=a100", "--", "timeout", "20", "nvidia-smi", "-L", image=fifo)
    assert result.returncode == 0 and "GPU 0:" in result.stdout, result.stderr
    folder = build_image("dir-soname", "ARG BASE\nFROM $BASE\nRUN mkdir /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n")
    failed = run("-e", "FAKEGPU_DEVICES=a100", "--", "true", image=folder)
    assert failed.returncode != 0 and "is a directory where FakeGPU links a library" in failed.stderr
