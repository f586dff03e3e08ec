"""`docker run --runtime=fakegpu` against the machine's real Docker Engine, including hostile images."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.container.conftest import LABEL, build_image, docker, need, run

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
STATE_ROOT = Path("/run/fakegpu")


def container_state_folders() -> set[str]:
    """The per-container state folders under STATE_ROOT. Host processes using the shims or fakecuda publish
    `<pid>.proc` files in the same folder (the shared NVML state), so only folders say what a start left."""
    return {e.name for e in STATE_ROOT.iterdir() if e.is_dir()} if STATE_ROOT.exists() else set()
NATIVE = REPO / "native" / "build"


def test_devices_table_and_nodes():
    result = run("-e", "FAKEGPU_DEVICES=a100:4", "--",
                 "sh", "-c", "ls /dev/nvidia*; cat /run/fakegpu/devices.tbl; stat -c '%F %t' /dev/nvidia3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for node in ("/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"):
        assert node in out
    assert "/dev/nvidia4" not in out
    assert "count=4" in out and out.count("\nprofile=") == 0 and out.count("device\tindex=") == 4
    assert "character special file c3" in out  # major 195 = 0xc3


def test_without_the_variable_nothing_is_injected():
    result = run("--", "sh", "-c", "ls /dev; ls /run; ls /usr/lib/x86_64-linux-gnu /usr/bin")
    assert result.returncode == 0, result.stderr
    assert "nvidia" not in result.stdout and "fakegpu" not in result.stdout
    void = run("-e", "FAKEGPU_DEVICES=void", "--", "sh", "-c", "ls /dev")
    assert "nvidia" not in void.stdout


def test_stand_in_native_build_is_mounted_and_loadable(site_config, fake_native):
    site_config({"native_lib_dir": str(fake_native)})
    script = ("nvidia-smi; python3 -c \"import ctypes; ctypes.CDLL('libnvidia-ml.so.1'); "
              "ctypes.CDLL('libnvidia-ml.so'); print('loaded')\"; grep -E 'nvidia|fakegpu' /proc/self/mountinfo")
    result = run("-e", "FAKEGPU_DEVICES=a100:2", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "stand-in nvidia-smi" in result.stdout and "loaded" in result.stdout
    mounts = [line for line in result.stdout.splitlines() if " - " in line]
    # One read-only mount of the build folder; the loader reaches it through links in the libc folder.
    assert any(" /usr/lib/x86_64-linux-gnu/fakegpu " in m for m in mounts)
    assert not any("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so" in m for m in mounts)
    assert all(" ro," in m and "nosuid" in m and "nodev" in m for m in mounts if " /run/fakegpu " not in m)


def test_nvidia_smi_from_the_native_build():
    need((NATIVE / "lib" / "libnvidia-ml.so.1").exists() and (NATIVE / "bin" / "nvidia-smi").exists(),
         f"native build missing in {NATIVE} (run `make`)")
    result = run("-e", "FAKEGPU_DEVICES=a100:4", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    assert len(lines) == 4 and all("A100" in line for line in lines)


@pytest.mark.parametrize(("spec", "named"), [
    ("a100:2,bogus-board:1", "bogus-board"),
    ("a100:65", "outside 1..64"),
    ("x" * 5000, "xxxxxxxxxxxxxxxx"),
    ("a100::;rm -rf /", "a100::;rm -rf /"),
])
def test_garbage_spec_fails_the_start_naming_the_part(spec, named):
    before = container_state_folders()
    result = run("-e", f"FAKEGPU_DEVICES={spec}", "--", "true")
    assert result.returncode != 0
    assert named[:60] in result.stderr and "FAKEGPU_DEVICES" in result.stderr
    assert container_state_folders() <= before


INJECTIONS = ["runtime", "hook"]


@pytest.fixture(params=INJECTIONS)
def injection(request, site_config):
    """Each hostile-image test runs with both injections: the default (the runtime prepares the root, runc
    mounts) and the hook."""
    if request.param != "runtime":
        site_config({"injection": request.param})
    return request.param


def test_injection_failure_fails_the_start_and_leaves_nothing(base_image, injection):
    image = build_image("run-is-a-file", "ARG BASE\nFROM $BASE\nRUN rm -rf /run && echo x > /run\n")
    name = f"fakegpu-test-fail-{os.getpid()}"
    result = docker("run", "--name", name, "--label", LABEL, "--runtime=fakegpu",
                    "-e", "FAKEGPU_DEVICES=a100:2", image, "true")
    try:
        assert result.returncode != 0
        who = "fakegpu-hook:" if injection == "hook" else "cannot prepare the container root"
        assert who in result.stderr and "not a directory" in result.stderr
        cid = docker("inspect", "-f", "{{.Id}}", name, check=True).stdout.strip()
        assert not (STATE_ROOT / cid).exists()
        assert cid not in Path("/proc/self/mountinfo").read_text()
    finally:
        docker("rm", "-f", name)


def test_symlinks_pointing_out_of_the_root_leave_the_host_alone(tmp_path, injection):
    host = tmp_path / "host-target"
    host.mkdir()
    (host / "keep").write_text("host file\n")
    dockerfile = (f"ARG BASE\nFROM $BASE\nRUN mkdir -p /run && ln -s {host} /run/fakegpu && "
                  f"ln -s {host}/keep /usr/bin/nvidia-smi\n")
    image = build_image("symlinks-out", dockerfile)
    result = run("-e", "FAKEGPU_DEVICES=a100:2", "--", "sh", "-c", "cat /run/fakegpu/devices.tbl | head -2",
                 image=image)
    assert result.returncode == 0, result.stderr
    assert "count=2" in result.stdout  # the image's link at the folder target was replaced by a folder
    assert sorted(p.name for p in host.iterdir()) == ["keep"]
    assert (host / "keep").read_text() == "host file\n"


def test_image_ld_preload_does_not_reach_fakegpu(injection):
    image = build_image("ld-preload", "ARG BASE\nFROM $BASE\nENV LD_PRELOAD=/nonexistent/evil.so PYTHONPATH=/evil\n")
    name = f"fakegpu-test-preload-{os.getpid()}"
    started = docker("run", "-d", "--name", name, "--label", LABEL, "--runtime=fakegpu",
                     "-e", "FAKEGPU_DEVICES=a100", image, "sleep", "30")
    try:
        assert started.returncode == 0, started.stderr
        cid = started.stdout.strip()
        log = (STATE_ROOT / cid / ("hook.log" if injection == "hook" else "inject.log")).read_text()
        assert "LD_PRELOAD" not in log and "PYTHONPATH" not in log and "1 devices" in log
        if injection == "hook":  # the hook records the environment it was given: the runtime's minimal one
            env_line = next(line for line in log.splitlines() if " environment:" in line)
            assert "PATH" in env_line
    finally:
        docker("rm", "-f", name)
