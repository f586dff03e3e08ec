"""FakeGPU's CDI spec applied by a CDI implementation nobody here wrote: podman 4.3 (Debian's), which resolves
`--device fakegpu.dev/gpu=NAME` with its embedded CDI library, as containerd 1.7+ and CRI-O do for the device
plugin's cdi-cri names. The container gets exactly the named GPUs or MIG device; one that names none gets nothing.
podman runs with storage of its own under a temporary folder; the spec goes where podman 4.3 reads specs
(/var/run/cdi; the version has no option for another folder) and is removed afterwards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fakegpu.devices import resolve_devices
from tests.conftest import mounts_under, run_cli
from tests.container.conftest import need

pytestmark = [pytest.mark.docker]

SPEC_PATH = Path("/var/run/cdi/fakegpu.dev-gpu.json")
INVENTORY = "a100:3,a100:1:mig=3g.40gb+2g.20gb"
# This machine's root lacks CAP_SYS_RESOURCE: podman's default rlimits cannot be set.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


@pytest.fixture(scope="module")
def podman(base_image, fakegpu_runtime):
    need(shutil.which("podman") is not None, "podman is needed (Debian's podman; .ci/run installs it)")
    need(not SPEC_PATH.exists(), f"{SPEC_PATH} exists already; not replacing a CDI spec of this machine")
    folder = Path(f"/tmp/fg-podman-{os.getpid()}")
    storage = ["--root", str(folder / "root"), "--runroot", str(folder / "run")]

    def podman(*args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *storage, *args], capture_output=True, text=True, timeout=timeout)

    # The hook refuses a state root that is not a nosuid,nodev,noexec mount, which the runtime makes at its first
    # create: on a host where podman comes first, a user mounts it as the hook's error says; here one Docker start
    # under the runtime does it, whatever ran before this module.
    first = subprocess.run(["docker", "run", "--rm", "--runtime", fakegpu_runtime, "-e", "FAKEGPU_DEVICES=t4:1",
                            base_image, "true"],
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    try:
        save = subprocess.Popen(["docker", "save", base_image], stdout=subprocess.PIPE)
        loaded = subprocess.run(["podman", *storage, "load", "-q"], stdin=save.stdout, capture_output=True,
                                text=True, timeout=300)
        save.stdout.close()
        assert save.wait(timeout=60) == 0 and loaded.returncode == 0, loaded.stderr
        result = run_cli("cdi", "generate", "--devices", INVENTORY, "--output", str(SPEC_PATH))
        assert result.returncode == 0, result.stderr
        yield podman
    finally:
        SPEC_PATH.unlink(missing_ok=True)
        subprocess.run(["podman", *storage, "rm", "-a", "-f"], capture_output=True, timeout=120)
        for point in mounts_under(folder):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_folder_left(podman):
    """Each container's host folder (table, log, shared state) is gone once podman has removed the container:
    the CDI spec's and the hooks.d file's poststop stage removes it, as our runtime does at `delete`."""
    from fakegpu_hook.settings import load_settings

    root = Path(load_settings().state_root)
    before = set(os.listdir(root))
    yield
    assert set(os.listdir(root)) - before == set()


def _listed(podman, base_image, *devices: str) -> list[str]:
    flags = [a for d in devices for a in ("--device", f"fakegpu.dev/gpu={d}")]
    result = podman("run", "--rm", *LIMITS, *flags, base_image, "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    return re.findall(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)\)", result.stdout)


def test_cdi_devices_by_uuid_and_index_are_the_containers_gpus(podman, base_image):
    gpus = resolve_devices(INVENTORY, seed="0")
    assert _listed(podman, base_image, gpus[2].uuid, "0") == [gpus[0].uuid, gpus[2].uuid]
    # a GPU named twice, by index and by UUID, comes once
    assert _listed(podman, base_image, "1", gpus[1].uuid) == [gpus[1].uuid]
    assert _listed(podman, base_image, "all") == [u for g in gpus for u in (g.uuid, *(m.uuid for m in g.mig or ()))]


def test_a_cdi_mig_device_is_the_containers_only_slice(podman, base_image):
    board = resolve_devices(INVENTORY, seed="0")[3]
    assert _listed(podman, base_image, "3:1") == [board.uuid, board.mig[1].uuid]
    assert _listed(podman, base_image, board.mig[0].uuid) == [board.uuid, board.mig[0].uuid]


def test_a_container_naming_no_cdi_device_gets_nothing(podman, base_image):
    result = podman("run", "--rm", *LIMITS, base_image, "sh", "-c", "command -v nvidia-smi; ls /dev | grep -c nvidia")
    assert result.stdout.split() == ["0"], (result.stdout, result.stderr)


def test_kube_play_of_the_rendered_podman_pod_shows_its_gpus(podman, base_image, host_inventory, tmp_path,
                                                              monkeypatch):
    """`podman kube play` (4.3 has no device plugin and ignores extended resources and RuntimeClasses) of the Pod
    `fakegpu k8s render` writes for podman: its container names its GPUs by index, and FakeGPU's hooks.d file,
    which podman runs for every container, gives it exactly those from the host's inventory."""
    # the node's inventory, as render's setup.sh would write it: the hooks.d file carries it to the hook
    host = host_inventory("a100:8")
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    result = run_cli("hook", "podman-config", "--output", str(hooks / "fakegpu.json"))
    assert result.returncode == 0, result.stderr
    result = run_cli("k8s", "render", "--out", str(tmp_path / "k8s"), "--devices", "a100:8")
    assert result.returncode == 0, result.stderr
    pod_file = tmp_path / "k8s" / "examples" / "pod-podman.yaml"
    pod = yaml.safe_load(pod_file.read_text())
    container = pod["spec"]["containers"][0]
    # the rendered image (debian:bookworm-slim) cannot be pulled here; any image does, the hook brings nvidia-smi
    container["image"] = base_image
    pod_file.write_text(yaml.safe_dump(pod))
    asked = [int(i) for i in container["env"][0]["value"].split(",")]
    # kube play takes no --ulimit; podman reads default ulimits from containers.conf
    conf = tmp_path / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    name = f"{pod['metadata']['name']}-{container['name']}"
    try:
        played = podman("--hooks-dir", str(hooks), "kube", "play", str(pod_file))
        assert played.returncode == 0, played.stderr
        assert podman("wait", name).stdout.split() == ["0"]
        logs = podman("logs", name)
    finally:
        podman("kube", "down", str(pod_file))
    uuids = [host[i].uuid for i in asked]
    assert len(asked) == 2
    assert re.findall(r"UUID: (GPU-[0-9a-f-]+)\)", logs.stdout + logs.stderr) == uuids
