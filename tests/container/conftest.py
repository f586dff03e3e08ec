"""Docker integration fixtures: the offline base image (built once, reused), the runtime registered for real
through the CLI, and cleanup by label (no Ryuk here)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import IN_CI, REPO, run_cli

BASE_IMAGE = os.environ.get("FAKEGPU_BASE_IMAGE", "fakegpu/debian-base:bookworm")
RUN_ID = uuid.uuid4().hex[:10]
LABEL = f"org.fakegpu.test={RUN_ID}"
RUNTIME = "fakegpu"
SITE_CONFIG = Path("/etc/fakegpu/config.json")


def need(condition: bool, reason: str) -> None:
    """Skip on a developer machine, fail under CI, where every prerequisite must be present."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def docker(*args: str, check: bool = False, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def run(*args: str, image: str = BASE_IMAGE, runtime: str | None = RUNTIME) -> subprocess.CompletedProcess[str]:
    """`docker run --rm` with our label; args before '--' are options, after it the command."""
    i = args.index("--") if "--" in args else len(args)
    opts, cmd = list(args[:i]), list(args[i + 1:])
    rt = [f"--runtime={runtime}"] if runtime else []
    return docker("run", "--rm", "--label", LABEL, *rt, *opts, image, *cmd)


@pytest.fixture(scope="session")
def base_image(docker_client):
    need(os.geteuid() == 0, "building the base image (debootstrap) needs root")
    result = subprocess.run([str(REPO / "images" / "bootstrap-base.sh"), BASE_IMAGE], capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, f"images/bootstrap-base.sh failed:\n{result.stdout}\n{result.stderr}"
    return BASE_IMAGE


def _registered(docker_client) -> bool:
    return RUNTIME in docker_client.info().get("Runtimes", {})


DAEMON_JSON = Path("/etc/docker/daemon.json")


@pytest.fixture(scope="session")
def fakegpu_runtime(docker_client, base_image):
    """Register this checkout's runtime with the machine's daemon via `fakegpu runtime install`; afterwards
    uninstall it if this session added it, or put back the daemon.json it found (e.g. another checkout's
    registration)."""
    need(os.geteuid() == 0, "registering a runtime edits /etc/docker/daemon.json and needs root")
    added = not _registered(docker_client)
    found = DAEMON_JSON.read_bytes() if DAEMON_JSON.exists() else None
    result = run_cli("runtime", "install", "--name", RUNTIME)
    assert result.returncode == 0, result.stderr
    for _ in range(50):
        if _registered(docker_client):
            break
        time.sleep(0.2)
    assert _registered(docker_client), "dockerd did not pick up the runtime after SIGHUP"
    state_root = _state_root()
    before = _folders(state_root)
    yield RUNTIME
    _cleanup(docker_client)
    _assert_no_folder_left(state_root, before)
    if added:
        run_cli("runtime", "uninstall", "--name", RUNTIME)
    elif found is not None and DAEMON_JSON.read_bytes() != found:
        from fakegpu_hook import daemon_json

        tmp = DAEMON_JSON.with_name(".daemon.json.fakegpu-test")
        tmp.write_bytes(found)
        os.chmod(tmp, DAEMON_JSON.stat().st_mode & 0o7777)
        tmp.replace(DAEMON_JSON)
        daemon_json.reload_daemon()


def _state_root() -> Path:
    from fakegpu_hook.settings import load_settings

    return Path(load_settings().state_root)


def _folders(root: Path) -> set[str]:
    return set(os.listdir(root)) if root.is_dir() else set()


def _assert_no_folder_left(root: Path, before: set[str]) -> None:
    """Every container the session started is gone, so is its folder under the state root: our runtime removes
    it at `delete`, the CDI / hooks.d hook at poststop. Only the NVIDIA-named hook's folders (with an owner
    file) wait for the next start to sweep them, by design (statedir.py)."""
    left = sorted(name for name in _folders(root) - before if not (root / name / "owner").exists())
    assert left == [], f"state folders left under {root} by containers this session removed: {left}"


NATIVE = REPO / "native" / "build"


@pytest.fixture
def host_inventory():
    """Set the host's inventory the way a user sets it (`fakegpu runtime install --devices SPEC`) for one test,
    and take it out again afterwards. Returns the inventory's devices (seed 0), to derive expected values."""
    from fakegpu.devices import resolve_devices

    set_any = []

    def set_inventory(spec: str):
        need((NATIVE / "lib" / "libnvidia-ml.so.1").exists() and (NATIVE / "bin" / "nvidia-smi").exists(),
             f"native build missing in {NATIVE} (run `make native`)")
        need(bool(set_any) or not SITE_CONFIG.exists(), f"{SITE_CONFIG} exists; not overwriting a real configuration")
        result = run_cli("runtime", "install", "--name", RUNTIME, "--devices", spec)
        assert result.returncode == 0, result.stderr
        set_any.append(spec)
        assert json.loads(SITE_CONFIG.read_text()) == {"inventory": spec}
        return resolve_devices(spec, seed="0")

    yield set_inventory
    if set_any:
        from fakegpu_hook.settings import update_config

        update_config(str(SITE_CONFIG), {"inventory": None, "injection": None})
        try:
            SITE_CONFIG.parent.rmdir()
        except OSError:
            pass


def _cleanup(client) -> None:
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        c.remove(force=True)
    for img in client.images.list(filters={"label": LABEL}):
        client.images.remove(img.id, force=True)


@pytest.fixture
def site_config():
    """Write /etc/fakegpu/config.json (the runtime reads it under dockerd's environment) for one test."""
    written = []

    def write(settings: dict) -> None:
        need(not SITE_CONFIG.exists() or written, f"{SITE_CONFIG} exists; not overwriting a real configuration")
        SITE_CONFIG.parent.mkdir(parents=True, exist_ok=True)
        SITE_CONFIG.write_text(json.dumps(settings))
        written.append(SITE_CONFIG)

    yield write
    for path in written:
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass


@pytest.fixture
def fake_native(tmp_path):
    """A stand-in native build: a real shared object under the NVML name and a shell nvidia-smi, so the mount
    and loader mechanics are tested whether or not native/ has been built."""
    lib, bin_ = tmp_path / "native" / "lib", tmp_path / "native" / "bin"
    lib.mkdir(parents=True)
    bin_.mkdir()
    candidates = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("libz.so.1.*")) + sorted(Path("/lib").glob("libz.so.1*"))
    need(bool(candidates), "no libz on the host to stand in for a shim")
    (lib / "libnvidia-ml.so.1").write_bytes(candidates[0].read_bytes())
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in nvidia-smi'\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    tmp_path.chmod(0o755)
    return lib


def build_image(name: str, dockerfile: str, base: str = BASE_IMAGE) -> str:
    tag = f"fakegpu-test/{name}:{RUN_ID}"
    proc = subprocess.run(["docker", "build", "-q", "--label", LABEL, "--build-arg", f"BASE={base}", "-t", tag, "-"],
                          input=dockerfile, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tag
