"""Issue 21, point 4: `docker run --gpus` and compose's `driver: nvidia` reservations, opt-in through `fakegpu
runtime install --gpus`. dockerd registers its NVIDIA driver only when nvidia-container-runtime-hook is on its
PATH at start, so these tests start a PRIVATE dockerd (own data root, exec root, socket, pid file, own network
namespace, no bridge, no iptables; PATH holding the test's hook folder; settings from FAKEGPU_* in its
environment, which the hook inherits) and never touch the machine's daemon beyond `docker save` of the base
image. Plain runc is the runtime: only our hook runs. Expected UUIDs come from `fakegpu.devices`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from fakegpu.devices import DEFAULT_SEED, resolve_devices
from tests.conftest import REPO, mounts_under, run_cli
from tests.container.conftest import BASE_IMAGE, RUN_ID, need

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NATIVE = REPO / "native" / "build"
# Mixed, so that `all` (5) differs from compose's count (4) and the UUIDs say which GPUs came.
SPEC = "a100:3,h100:2"
UUIDS = [d.uuid for d in resolve_devices(SPEC, seed=DEFAULT_SEED)]
UUID_RE = re.compile(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)$")


def _our_processes(folder: str) -> list[int]:
    """Processes whose command line names the private daemon's folder: dockerd, its containerd, the shims."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if folder.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


class PrivateDockerd:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.host = f"unix://{folder / 'd.sock'}"
        self.state_root = folder / "state"
        self.process: subprocess.Popen | None = None

    def docker(self, *args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, timeout=timeout)

    def start(self, hook_dir: Path, config: Path, daemon_json: Path) -> None:
        for name in ("data", "exec"):
            (self.folder / name).mkdir()
        env = {**os.environ, "PATH": f"{hook_dir}:{os.environ['PATH']}", "FAKEGPU_CONFIG": str(config),
               "FAKEGPU_STATE_ROOT": str(self.state_root)}
        log = open(self.folder / "dockerd.log", "wb")  # dockerd holds its own descriptor until it stops
        # In a network namespace of its own: a dockerd started with --bridge=none deletes the host's docker0 at
        # start (moby removes the default bridge's link when the bridge is disabled), which breaks every
        # container on the machine's own daemon. unshare execs dockerd, so the pid stays the daemon's.
        self.process = subprocess.Popen(
            ["unshare", "--net", "--", "dockerd", "--data-root", str(self.folder / "data"),
             "--exec-root", str(self.folder / "exec"),
             "-H", self.host, "--pidfile", str(self.folder / "d.pid"), "--config-file", str(daemon_json),
             "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"private dockerd exited ({self.process.returncode}):\n{self.log_tail()}")
            if self.docker("version", timeout=10).returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"private dockerd did not answer in 90 s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return "\n".join((self.folder / "dockerd.log").read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""

    def load(self, image: str) -> None:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", self.host, "load"], stdin=save.stdout, capture_output=True, text=True,
                              timeout=300)
        save.stdout.close()
        assert save.wait(timeout=60) == 0 and load.returncode == 0, load.stderr

    def stop(self) -> list[str]:
        """Everything down and away whatever state it is in; what could not be cleaned (for the teardown)."""
        problems = []
        if self.process is not None and self.process.poll() is None:
            listed = self.docker("ps", "-aq", timeout=30).stdout.split()
            if listed:
                self.docker("rm", "-f", *listed, timeout=120)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        for pid in _our_processes(str(self.folder)):  # containerd and shims it left, by id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while _our_processes(str(self.folder)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _our_processes(str(self.folder)):
            problems.append(f"processes left: {_our_processes(str(self.folder))}")
        # The data root may hold overlay mounts, the state root is the tmpfs the hook mounted on the host.
        for point in mounts_under(self.folder):
            subprocess.run(["umount", "-l", point], check=False)
        if mounts_under(self.folder):
            problems.append(f"mounts left: {mounts_under(self.folder)}")
        else:
            shutil.rmtree(self.folder, ignore_errors=True)
            if self.folder.exists():
                problems.append(f"{self.folder} could not be removed")
        return problems


@pytest.fixture(scope="module")
def dockerd(base_image):
    need(os.geteuid() == 0, "a private dockerd needs root")
    need(shutil.which("dockerd") is not None, "dockerd is not installed")
    need((NATIVE / "lib" / "libnvidia-ml.so.1").exists() and (NATIVE / "bin" / "nvidia-smi").exists(),
         f"native build missing in {NATIVE} (run `make native`)")
    # Short: containerd's sockets live under the exec root, and a unix socket path has 108 bytes.
    folder = Path(tempfile.mkdtemp(prefix="fgd-", dir="/tmp"))
    daemon = PrivateDockerd(folder)
    host_links = sorted(os.listdir("/sys/class/net"))
    try:
        hook_dir, config, daemon_json = folder / "hooks", folder / "fakegpu.json", folder / "daemon.json"
        # The user's command, pointed at the test's folder: the hook, the inventory, a daemon.json (with the
        # runtime too, which these tests do not use) for the private daemon only.
        result = run_cli("runtime", "install", "--gpus", "--hook-dir", str(hook_dir), "--devices", SPEC,
                         "--config", str(daemon_json), "--no-reload",
                         env={"FAKEGPU_FRONT_DIR": str(folder / "front"), "FAKEGPU_CONFIG": str(config)})
        assert result.returncode == 0, result.stderr
        assert "restart" in result.stdout and (hook_dir / "nvidia-container-runtime-hook").exists()
        daemon.start(hook_dir, config, daemon_json)
        daemon.load(base_image)
        yield daemon
    finally:
        problems = daemon.stop()
        assert not problems, problems
        # The machine's networking is not the private daemon's to change (docker0 above all).
        # (veth* and br-* belong to containers and networks of other tests, which may come and go meanwhile.)
        left = [n for n in host_links if not n.startswith(("veth", "br-"))]
        assert [n for n in left if not os.path.exists(f"/sys/class/net/{n}")] == [], "host links removed"


def gpus_of(result: subprocess.CompletedProcess[str]) -> list[tuple[int, str]]:
    assert result.returncode == 0, result.stderr
    found = [UUID_RE.match(line) for line in result.stdout.splitlines() if line.strip()]
    assert all(found), result.stdout
    return [(int(m.group(1)), m.group(2)) for m in found]


def run_gpus(dockerd: PrivateDockerd, gpus: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return dockerd.docker("run", "--rm", "--gpus", gpus, BASE_IMAGE, *(cmd or ("nvidia-smi", "-L")))


def test_gpus_count(dockerd):
    assert gpus_of(run_gpus(dockerd, "2")) == [(0, UUIDS[0]), (1, UUIDS[1])]


def test_gpus_device_ids(dockerd):
    # Host GPUs 0 and 2, renumbered from 0 as under NVIDIA's runtime, each with its own UUID.
    assert gpus_of(run_gpus(dockerd, '"device=0,2"')) == [(0, UUIDS[0]), (1, UUIDS[2])]


def test_gpus_all(dockerd):
    assert gpus_of(run_gpus(dockerd, "all")) == list(enumerate(UUIDS))


def test_gpus_nodes_and_capabilities(dockerd):
    result = run_gpus(dockerd, '"device=1,3","capabilities=utility"', "sh", "-c", "ls /dev; nvidia-smi -L")
    assert result.returncode == 0, result.stderr
    names = result.stdout.split()
    assert {"nvidia1", "nvidia3", "nvidiactl"} <= set(names) and "nvidia0" not in names
    assert "nvidia-uvm" not in names  # utility alone: no compute, no UVM nodes
    assert [u for u in UUIDS if u in result.stdout] == [UUIDS[1], UUIDS[3]]


def test_bad_device_fails_the_start_with_one_clear_line(dockerd):
    result = run_gpus(dockerd, '"device=0,7"')
    assert result.returncode != 0
    assert "fakegpu-hook: NVIDIA_VISIBLE_DEVICES: device '7': no GPU has this index (they are 0..4)" in result.stderr


def test_compose_nvidia_reservation_unchanged(dockerd, tmp_path):
    """compose/nvidia-gpus.yaml as written for NVIDIA (driver: nvidia, count: 4). The override only keeps the
    service off networks, so that the private daemon makes no bridge on the machine."""
    from tests.cluster.test_compose_docker import compose_cmd

    override = tmp_path / "no-network.yaml"
    override.write_text("services:\n  test:\n    network_mode: none\n")
    base = [*compose_cmd(), "-p", f"fgtest-gpus-{RUN_ID}", "-f", str(REPO / "compose" / "nvidia-gpus.yaml"),
            "-f", str(override)]
    env = {**os.environ, "DOCKER_HOST": dockerd.host, "IMAGE": BASE_IMAGE}
    try:
        result = subprocess.run([*base, "up", "--abort-on-container-exit", "--no-color"], capture_output=True,
                                text=True, env=env, timeout=300)
    finally:
        subprocess.run([*base, "down", "-v"], capture_output=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.findall(r"GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)", result.stdout)
    assert [(int(i), u) for i, u in found] == list(enumerate(UUIDS[:4])), result.stdout


def test_state_of_stopped_containers_is_swept(dockerd):
    """Under plain runc nothing of ours runs at delete: each start removes the folders of stopped containers,
    so after a start only the newest is left."""
    gpus_of(run_gpus(dockerd, "1"))
    gpus_of(run_gpus(dockerd, "1"))
    assert len(os.listdir(dockerd.state_root)) == 1
