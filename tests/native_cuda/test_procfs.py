"""fakegpu-procfs: /proc/driver/nvidia as NVIDIA's kernel module publishes it, for FakeGPU's devices.

The layout checked here is the driver's (open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c, and captures
of real hosts): `version` is two lines, "NVRM version: NVIDIA UNIX <arch> Kernel Module  <version>  <stamp>"
and "GCC version:  gcc version ..."; `gpus/<dddd:bb:dd.f>/information` has the lines in the driver's order with
its tab layout ("Model: \\t\\t ", "GPU Excluded:\\t "), the VBIOS in lower-case hex, the 4-digit domain in lower
case; `params` has "Name: value" lines, the device-file keys first, strings quoted; `registry` is `Binary: ""`.

Mounting needs root and a kernel that lets us unshare a mount namespace; without them those tests skip.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import write_table
from tests.native.conftest import NATIVE_DRIVER_VERSION
from tests.native_cuda.conftest import IN_CI, REPO, run_fakegpu

pytestmark = pytest.mark.native

BIN = REPO / "native" / "build" / "bin"
PROCFS = BIN / "fakegpu-procfs"
SMI = BIN / "nvidia-smi"
# What scripts grep for a driver version in /proc/driver/nvidia/version.
VERSION_GREP = re.compile(r"[0-9]{3}(\.[0-9]{1,3}){0,2}")
INFORMATION_KEYS = ("Model", "IRQ", "GPU UUID", "Video BIOS", "Bus Type", "DMA Size", "DMA Mask", "Bus Location",
                    "Device Minor", "GPU Firmware", "GPU Excluded")
# The driver's own spacing between each key's colon and its value.
INFORMATION_SEPARATORS = {"Model": ": \t\t ", "IRQ": ":   \t\t ", "GPU Excluded": ":\t "}


@pytest.fixture(scope="session")
def procfs_bin() -> Path:
    if not PROCFS.is_file() or not SMI.is_file():
        reason = "fakegpu-procfs or nvidia-smi not built; run `make native`"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return PROCFS


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    env.update(FAKEGPU_STATE_DIR=str(state), **extra)
    return env


def _render(tmp_path: Path, devices: str, *args: str) -> Path:
    out = tmp_path / "render"
    out.mkdir(parents=True)
    proc = subprocess.run([str(PROCFS), "--render", str(out), *args], capture_output=True, text=True,
                          env=_clean_env(tmp_path, FAKEGPU_DEVICES=devices), timeout=30)
    assert proc.returncode == 0, proc.stderr
    return out / "nvidia"


def _smi(tmp_path: Path, devices: str, fields: str) -> list[list[str]]:
    proc = subprocess.run([str(SMI), f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                          text=True, env=_clean_env(tmp_path, FAKEGPU_DEVICES=devices), timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [[v.strip() for v in line.split(",")] for line in proc.stdout.splitlines()]


def _procfs_bus(nvml_bus_id: str) -> str:
    """00000000:2A:00.0 (NVML) -> 0000:2a:00.0 (the kernel driver's folder name)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _parse_information(text: str) -> dict[str, str]:
    """As inventory tools read it: split each line at the first colon, strip the value."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


# ---------------------------------------------------------------- the rendered text


@pytest.mark.parametrize("driver", [None, "550.127.08"])
def test_version_file(procfs_bin: Path, tmp_path: Path, driver: str | None) -> None:
    tree = _render(tmp_path, "a100:1", *(["--driver", driver] if driver else []))
    want = driver or NATIVE_DRIVER_VERSION
    text = (tree / "version").read_text()
    lines = text.split("\n")
    assert len(lines) == 3 and lines[2] == "", repr(text)
    assert re.fullmatch(r"NVRM version: NVIDIA UNIX (x86_64|aarch64) Kernel Module  \S+  \S.*\S", lines[0]), lines[0]
    assert lines[1].startswith("GCC version:  gcc version ")
    # the two ways scripts take the version: the word after "Module", the first NNN.NN[.NN]
    words = lines[0].split()
    assert words[words.index("Module") + 1] == want
    assert VERSION_GREP.search(text)[0] == want


def test_information_matches_nvml(procfs_bin: Path, tmp_path: Path) -> None:
    devices = "a100:2,h100,v100"
    tree = _render(tmp_path, devices)
    rows = _smi(tmp_path, devices, "index,name,uuid,pci.bus_id,vbios_version")
    folders = sorted(p.name for p in (tree / "gpus").iterdir())
    assert folders == sorted(_procfs_bus(r[3]) for r in rows)
    archs = {d.index: d.profile.architecture for d in resolve_devices(devices, seed="0")}
    minors = {d.index: d.minor_number for d in resolve_devices(devices, seed="0")}
    for index, name, uuid, bus_id, vbios in rows:
        bus = _procfs_bus(bus_id)
        text = (tree / "gpus" / bus / "information").read_text()
        fields = _parse_information(text)
        gsp = archs[int(index)] not in ("maxwell", "pascal", "volta")
        assert list(fields) == [k for k in INFORMATION_KEYS if gsp or k != "GPU Firmware"], text
        for line in text.splitlines():
            key = line.partition(":")[0]
            sep = INFORMATION_SEPARATORS.get(key, ": \t ")
            assert line.startswith(key + sep) and not line[len(key + sep):].startswith((" ", "\t")), repr(line)
        assert fields["Model"] == name and fields["GPU UUID"] == uuid
        assert fields["Video BIOS"] == vbios.lower() and re.fullmatch(r"([0-9a-f]{2}\.){4}[0-9a-f]{2}", vbios.lower())
        assert fields["Bus Location"] == bus and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bus)
        assert fields["Device Minor"] == str(minors[int(index)])
        assert fields["Bus Type"] == "PCIe" and fields["GPU Excluded"] == "No"
        assert fields["IRQ"].isdigit()
        bits = 52 if archs[int(index)] in ("hopper", "blackwell") else 47
        assert fields["DMA Size"] == f"{bits} bits" and fields["DMA Mask"] == hex((1 << bits) - 1)
        if gsp:
            assert fields["GPU Firmware"] == NATIVE_DRIVER_VERSION
        assert (tree / "gpus" / bus / "registry").read_text() == 'Binary: ""\n'


def test_params_and_registry(procfs_bin: Path, tmp_path: Path) -> None:
    tree = _render(tmp_path, "a100:1")
    lines = (tree / "params").read_text().splitlines()
    pairs = [line.split(": ", 1) for line in lines]
    assert all(len(p) == 2 and re.fullmatch(r"[A-Za-z0-9]+", p[0]) for p in pairs), lines
    params = dict(pairs)
    assert len(params) == len(pairs) >= 40
    # nvidia-modprobe stops reading at the first long name: the device-file keys come first, as on a real host
    assert [p[0] for p in pairs[:6]] == ["ResmanDebugLevel", "RmLogonRC", "ModifyDeviceFiles", "DeviceFileUID",
                                         "DeviceFileGID", "DeviceFileMode"]
    assert params["ModifyDeviceFiles"] == "1" and params["DeviceFileMode"] == "438"  # 0666
    assert params["DeviceFileUID"] == params["DeviceFileGID"] == "0"
    assert params["ResmanDebugLevel"] == "4294967295" and params["EnableMSI"] == "1"
    numbers = [k for k, v in pairs if not v.startswith('"')]
    strings = [k for k, v in pairs if v.startswith('"')]
    assert [k for k, _ in pairs] == numbers + strings  # the driver prints its numbers first, then the strings
    assert params["RegistryDwords"] == '""' and params["TemporaryFilePath"] == '"/var/tmp"'
    assert (tree / "registry").read_text() == 'Binary: ""\n'


def test_tree_modes_and_no_gpus(procfs_bin: Path, tmp_path: Path) -> None:
    tree = _render(tmp_path, "void")
    assert sorted(p.name for p in tree.iterdir()) == ["gpus", "params", "patches", "registry", "version",
                                                      "warnings"]
    assert list((tree / "gpus").iterdir()) == []
    tree = _render(tmp_path / "second", "l4:2")
    for path in [tree, *tree.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o555 if path.is_dir() else 0o444), (path, oct(mode))


def test_bad_arguments(procfs_bin: Path, tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    for args in ([], ["--pid"], ["--pid", "1"], ["--table", "x"], ["--bogus", "1"], ["--"], ["--pid", "1", "--"]):
        assert subprocess.run([str(PROCFS), *args], capture_output=True, env=env).returncode == 2, args
    proc = subprocess.run([str(PROCFS), "--render", str(tmp_path), "--driver", "5$(id)"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 1 and proc.stderr.startswith("fakegpu-procfs: ") and not (tmp_path / "nvidia").exists()


# ---------------------------------------------------------------- mounting (root)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


needs_root = pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare(CLONE_NEWNS)")


def _mountinfo(pid: int | str = "self") -> list[str]:
    return Path(f"/proc/{pid}/mountinfo").read_text().splitlines()


def _host_proc_mounts() -> list[str]:
    """The host's mounts at or under /proc, and any tmpfs of ours anywhere: what a leak would change. (Other
    mounts come and go with whatever else runs on the machine.)"""
    return [line for line in _mountinfo()
            if line.split()[4].startswith("/proc") or "nr_inodes=1024,mode=555" in line]


def _ns(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


class Namespace:
    """A process in a mount namespace of its own (private propagation), as a container's init waits in one."""

    def __init__(self, script: str = "exec sleep 60") -> None:
        self.proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                comm = Path(f"/proc/{self.proc.pid}/comm").read_text().strip()
                if _ns(self.proc.pid) != _ns("self") and comm == "sleep":
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"no namespace for {script!r}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self, path: str) -> str:
        return Path(f"/proc/{self.pid}/root{path}").read_text()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    ns = Namespace()
    yield ns
    ns.close()


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "devices.tbl"
    write_table(path, resolve_devices("a100:2", seed="0"), "a100:2", "0")
    return path


def _attach(pid: int | str, table: Path | str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROCFS), "--pid", str(pid), "--table", str(table)], capture_output=True, text=True,
                          env=_clean_env(tmp_path, **extra), timeout=30)


@needs_root
@pytest.mark.parametrize("classic", [False, True], ids=["mount-api", "mount(2)"])
def test_pid_mode_mounts_into_the_namespace(procfs_bin: Path, namespace: Namespace, table: Path, tmp_path: Path,
                                            classic: bool) -> None:
    host_before, driver_before = _host_proc_mounts(), sorted(os.listdir("/proc/driver"))
    proc = _attach(namespace.pid, table, tmp_path, **({"FAKEGPU_PROCFS_CLASSIC": "1"} if classic else {}))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert VERSION_GREP.search(namespace.read("/proc/driver/nvidia/version"))[0] == NATIVE_DRIVER_VERSION
    buses = sorted(os.listdir(f"/proc/{namespace.pid}/root/proc/driver/nvidia/gpus"))
    assert buses == sorted(_procfs_bus(r[0]) for r in _smi(tmp_path, "a100:2", "pci.bus_id"))
    mount = [line for line in _mountinfo(namespace.pid) if line.split()[4] == "/proc/driver"]
    assert len(mount) == 1, mount
    options, fstype = mount[0].split()[5].split(","), mount[0].split(" - ")[1].split()[0]
    assert fstype == "tmpfs" and {"ro", "nosuid", "nodev", "noexec"} <= set(options), mount[0]
    # what the container gets cannot be changed from inside
    write = subprocess.run(["nsenter", "-m", "-t", str(namespace.pid), "sh", "-c",
                            "echo x > /proc/driver/nvidia/version || touch /proc/driver/nvidia/new"],
                           capture_output=True, text=True)
    assert write.returncode != 0 and "Read-only" in write.stderr
    assert _host_proc_mounts() == host_before and sorted(os.listdir("/proc/driver")) == driver_before


@needs_root
def test_pid_mode_refuses_without_mounting(procfs_bin: Path, namespace: Namespace, table: Path,
                                           tmp_path: Path) -> None:
    host_before, theirs_before = _host_proc_mounts(), _mountinfo(namespace.pid)
    dead = subprocess.Popen(["true"])
    dead.wait()
    cases = [
        (dead.pid, table, "no such process"),
        ("12abc", table, "is not a process id"),
        (namespace.pid, tmp_path / "missing.tbl", "cannot load the device table"),
        (namespace.pid, REPO / "fakegpu" / "data" / "catalog.tbl", "cannot load the device table"),
        (os.getpid(), table, "refusing to mount over the host's /proc/driver"),
    ]
    for pid, path, message in cases:
        proc = _attach(pid, path, tmp_path)
        assert proc.returncode == 1, (pid, path, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("fakegpu-procfs: ") and message in proc.stderr
        assert _host_proc_mounts() == host_before and _mountinfo(namespace.pid) == theirs_before
    # once served, a second attach does not stack a second tree
    assert _attach(namespace.pid, table, tmp_path).returncode == 0
    served = _mountinfo(namespace.pid)
    proc = _attach(namespace.pid, table, tmp_path)
    assert proc.returncode == 1 and "/proc/driver is not procfs" in proc.stderr
    assert _mountinfo(namespace.pid) == served


@needs_root
@pytest.mark.parametrize("script, message", [
    ("mount -t tmpfs tmpfs /proc/driver", "/proc/driver is not procfs"),
    ("mkdir -p /tmp/fgp-bind && mount --bind /tmp/fgp-bind /proc/driver", "/proc/driver is not procfs"),
    ("mount -t tmpfs tmpfs /proc && mkdir /proc/driver", "/proc is not procfs"),
], ids=["tmpfs-on-driver", "bind-on-driver", "tmpfs-on-proc"])
def test_pid_mode_refuses_a_replaced_proc(procfs_bin: Path, table: Path, tmp_path: Path, script: str,
                                          message: str) -> None:
    ns = Namespace(f"{script} && exec sleep 60")
    try:
        before = _mountinfo(ns.pid)
        proc = _attach(ns.pid, table, tmp_path)
        assert proc.returncode == 1 and message in proc.stderr, proc.stderr
        assert _mountinfo(ns.pid) == before
    finally:
        ns.close()


@needs_root
def test_pid_mode_never_follows_an_image_symlink(procfs_bin: Path, table: Path, tmp_path: Path) -> None:
    # A container root whose /proc is a link to a folder of the image's: the tree must not land there.
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    (root / "evil" / "driver").mkdir(parents=True)
    for name in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{name}"):
            (root / name).symlink_to(os.readlink(f"/{name}"))
        elif os.path.isdir(f"/{name}"):
            (root / name).mkdir()
    (root / "proc").symlink_to("/evil")
    binds = " && ".join(f"mount --bind /{n} {root}/{n}" for n in ("usr", "bin", "lib", "lib64", "sbin")
                        if (root / n).is_dir() and not (root / n).is_symlink())
    ns = Namespace(f"{binds} && exec chroot {root} sleep 60")
    try:
        before = _mountinfo(ns.pid)
        proc = _attach(ns.pid, table, tmp_path)
        assert proc.returncode == 1 and "open /proc: Not a directory" in proc.stderr, proc.stderr
        assert _mountinfo(ns.pid) == before and list((root / "evil" / "driver").iterdir()) == []
    finally:
        ns.close()


@needs_root
@pytest.mark.parametrize("driver", [None, "550.127.08"])
def test_fakegpu_run_sees_the_tree(cuda_build: Path, procfs_bin: Path, driver: str | None) -> None:
    host_before, driver_before = _host_proc_mounts(), sorted(os.listdir("/proc/driver"))
    pick = ["--driver", driver] if driver else []
    version = run_fakegpu(["--devices", "a100:2", *pick, "--", "cat", "/proc/driver/nvidia/version"], timeout=60)
    assert version.returncode == 0, version.stderr
    assert VERSION_GREP.search(version.stdout)[0] == (driver or NATIVE_DRIVER_VERSION)
    listing = run_fakegpu(["--devices", "a100:2", *pick, "--", "ls", "/proc/driver/nvidia/gpus"], timeout=60)
    smi = run_fakegpu(["--devices", "a100:2", *pick, "--", "nvidia-smi", "--query-gpu=pci.bus_id,driver_version",
                       "--format=csv,noheader"], timeout=60)
    assert listing.returncode == 0 and smi.returncode == 0, listing.stderr + smi.stderr
    rows = [[v.strip() for v in line.split(",")] for line in smi.stdout.splitlines()]
    assert listing.stdout.split() == sorted(_procfs_bus(bus) for bus, _ in rows) and len(rows) == 2
    assert {d for _, d in rows} == {driver or NATIVE_DRIVER_VERSION}
    fakecuda = run_fakegpu(["--devices", "a100:2", "--mode", "fakecuda", "--", "ls", "/proc/driver/nvidia/gpus"])
    assert fakecuda.stdout == listing.stdout
    # nothing leaked onto the host: not the mount, not a change to its /proc/driver
    assert _host_proc_mounts() == host_before and sorted(os.listdir("/proc/driver")) == driver_before


@needs_root
def test_fakegpu_run_behaves_as_before(cuda_build: Path, procfs_bin: Path, tmp_path: Path) -> None:
    assert run_fakegpu(["--devices", "a100:1", "--", "sh", "-c", "exit 7"]).returncode == 7
    missing = run_fakegpu(["--", "no-such-command-fgp"])
    assert missing.returncode == 1 and "command not found: no-such-command-fgp" in missing.stderr
    plain = tmp_path / "plain"
    plain.write_text("x")
    refused = run_fakegpu(["--", str(plain)])
    assert refused.returncode == 1 and "permission denied" in refused.stderr
    timed = run_fakegpu(["--timeout", "30", "--", "sh", "-c", "cat /proc/driver/nvidia/version; exit 3"])
    assert timed.returncode == 3 and NATIVE_DRIVER_VERSION in timed.stdout


needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")


@needs_setpriv
@pytest.mark.parametrize("drop, reason", [
    (["--reuid=65534", "--regid=65534", "--clear-groups"], "not root"),
    (["--bounding-set=-sys_admin", "--inh-caps=-sys_admin"], "unshare: Operation not permitted"),
], ids=["not-root", "no-cap-sys-admin"])
def test_exec_mode_never_stands_in_the_way(procfs_bin: Path, tmp_path: Path, drop: list[str], reason: str) -> None:
    # Where the tree cannot be mounted the command runs unchanged, saying why only when asked (FAKEGPU_DEBUG).
    cmd = ["setpriv", *drop, "--", str(PROCFS), "--", "sh", "-c", "echo ran; ls /proc/driver; exit 5"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(tmp_path, FAKEGPU_DEVICES="a100:1"))
    assert quiet.returncode == 5 and quiet.stdout.split()[0] == "ran" and "nvidia" not in quiet.stdout
    assert quiet.stderr == ""
    told = subprocess.run(cmd, capture_output=True, text=True,
                          env=_clean_env(tmp_path, FAKEGPU_DEVICES="a100:1", FAKEGPU_DEBUG="1"))
    assert told.returncode == 5 and told.stderr == f"fakegpu: /proc/driver/nvidia not provided: {reason}\n"


def test_launcher_prefixes_only_as_root(procfs_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakegpu import launcher

    env = {"PATH": os.environ.get("PATH", os.defpath)}
    lib = REPO / "native" / "build" / "lib"
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 0)
    assert launcher._with_procfs(["true"], env, lib) == [str(PROCFS), "--", "true"]
    # a command that does not resolve is left to fail as before, with the launcher's own message
    assert launcher._with_procfs(["no-such-command-fgp"], env, lib) == ["no-such-command-fgp"]
    assert launcher._with_procfs(["true"], env, REPO / "nowhere" / "lib") == ["true"]  # helper not built
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 1000)
    assert launcher._with_procfs(["true"], env, lib) == ["true"]
