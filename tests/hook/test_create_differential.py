"""The C `create` (native/container, `fakegpu-create`) against the Python runtime, its reference.

Each case builds the same bundle twice at the same path, runs the Python runtime on one and the C binary on
the other, and compares everything either leaves behind: exit status and error line, config.json (as JSON),
the container root (every file, folder and link, with contents and modes), the state folder (device table byte
for byte, inject.log without its timing and environment lines) and the mock runc's argv. Cases the C binary is
meant to hand to Python (bad specs, odd JSON, the hook injection, user namespaces, ...) must hand over before
changing anything; run with the real interpreter behind it they must then give exactly Python's result.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakegpu.locations import COMPILED_CATALOG_TABLE
from tests.conftest import IN_CI, REPO, mounts_under
from tests.hook.conftest import DATA, HOOK_PATH, MOCK_BIN

# FAKEGPU_CREATE_BIN: another build of the same sources, e.g. with sanitizers.
CREATE = Path(os.environ.get("FAKEGPU_CREATE_BIN") or REPO / "native" / "build" / "bin" / "fakegpu-create")
CATALOG = Path(COMPILED_CATALOG_TABLE)
PY_RUNTIME = Path(sys.executable).with_name("fakegpu-container-runtime")
DEFER_EXIT = 97


@pytest.fixture(scope="module", autouse=True)
def _built():
    if not os.access(CREATE, os.X_OK):
        if IN_CI:
            pytest.fail(f"{CREATE} is not built (run `make`)")
        pytest.skip(f"{CREATE} is not built (run `make`)")


def _pycode() -> str:
    from fakegpu_hook import front

    return front._pycode("fakegpu_hook.runtime", str(PY_RUNTIME), front.package_path())


class Case:
    """A bundle recipe: the case folder under tests/data/bundles, a root, edits to config.json and the root,
    and the runtime's environment."""

    def __init__(self, bundle: str = "gpu", rootfs: str = "debian", env: dict[str, str] | None = None,
                 spec: str | None = None, edit: Callable[[dict], None] | None = None,
                 root: Callable[[Path, Path], None] | None = None, text: Callable[[str], str] | None = None,
                 config: dict | None = None) -> None:
        self.bundle, self.rootfs, self.env, self.spec = bundle, rootfs, env or {}, spec
        self.edit, self.root, self.text, self.config = edit, root, text, config


def _native(base: Path) -> Path:
    """A native build folder with every kind of entry plan_injection sorts: sonames, a development link, a
    link out of the folder, the catalog, names that are not libraries."""
    lib, bin_ = base / "native" / "lib", base / "native" / "bin"
    if lib.exists():
        return lib
    lib.mkdir(parents=True)
    bin_.mkdir()
    for name in ("libnvidia-ml.so.1", "libcuda.so.1", "libcudart.so.13", "libnccl.so.2", "catalog.tbl",
                 "libodd.so.1.x", "README", "libbad name.so.1"):
        (lib / name).write_text(name)
    (lib / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    elsewhere = base / "native" / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "libcublas.so.13.0.1").write_text("blas")
    (lib / "libcublas.so.13").symlink_to(elsewhere / "libcublas.so.13.0.1")
    (lib / "libdangling.so.1").symlink_to("nothing-here")
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\n")
    return lib


def _build(case: Case, work: Path, shared: Path) -> tuple[Path, dict[str, str]]:
    b = work / "b"
    native = _native(shared)
    shutil.copytree(DATA / "bundles" / case.bundle, b)
    (b / "expected.json").unlink(missing_ok=True)
    shutil.copytree(DATA / "rootfs" / case.rootfs, b / "rootfs", symlinks=True)
    if case.spec is not None or case.edit is not None:
        data = json.loads((b / "config.json").read_text())
        if case.spec is not None:
            env = [e for e in data["process"]["env"] if not e.startswith("FAKEGPU_DEVICES=")]
            data["process"]["env"] = [*env, f"FAKEGPU_DEVICES={case.spec}"]
        if case.edit is not None:
            case.edit(data)
        (b / "config.json").write_text(json.dumps(data, indent="\t"))
    if case.text is not None:
        (b / "config.json").write_text(case.text((b / "config.json").read_text()))
    if case.root is not None:
        case.root(b / "rootfs", shared / "host")
    env = {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(work / "runc.log"),
           "FAKEGPU_CONFIG": str(work / "no-config.json"), "FAKEGPU_STATE_ROOT": str(work / "state"),
           "FAKEGPU_HOOK_PATH": HOOK_PATH, "FAKEGPU_NATIVE_DIR": str(native), "LANG": "C.UTF-8",
           "TZ": "UTC"}
    if case.config is not None:
        (work / "config.json").write_text(json.dumps(case.config))
        env["FAKEGPU_CONFIG"] = str(work / "config.json")
    env.update({k: v.replace("@SHARED@", str(shared)) for k, v in case.env.items()})
    return b, env


def _args(b: Path, work: Path) -> list[str]:
    return ["--root", "/run/docker/runtime-runc/moby", "--log", str(work / "log.json"), "--log-format", "json",
            "create", "--bundle", str(b), "--pid-file", str(b / "init.pid"), "ctr-1"]


def _tree(top: Path) -> list[tuple]:
    if not top.exists():
        return []
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(top))
            if stat.S_ISLNK(st.st_mode):
                out.append((rel, "link", os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out.append((rel, "dir", oct(st.st_mode & 0o7777)))
            elif not stat.S_ISREG(st.st_mode):  # a FIFO would block a read
                out.append((rel, "special", oct(st.st_mode)))
            elif rel.endswith("inject.log"):
                lines = [line.split(" ", 1)[1] for line in p.read_text().splitlines()]
                out.append((rel, "log", [line for line in lines
                                         if not line.startswith("prepared in")]))
            else:
                out.append((rel, "file", oct(st.st_mode & 0o7777), p.read_bytes()))
    return sorted(out)


def _json_or_none(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _outcome(result: subprocess.CompletedProcess[str], b: Path, work: Path, shared: Path) -> dict:
    config = (b / "config.json").read_bytes()
    log = work / "log.json"
    return {
        "rc": result.returncode,
        "stderr": result.stderr.strip(),
        "log": [json.loads(line)["msg"] for line in log.read_text().splitlines()] if log.exists() else [],
        "config": _json_or_none(config),
        "config_bytes": config,
        "bundle": [e for e in _tree(b) if e[0] != "config.json"],
        "state": _tree(work / "state"),
        "runc": (work / "runc.log").read_text() if (work / "runc.log").exists() else "",
        "host": _tree(shared / "host"),
    }


def _run_python(case: Case, tmp: Path) -> dict:
    work, shared = tmp / "w", tmp / "shared"
    b, env = _build(case, work, shared)
    result = subprocess.run([str(PY_RUNTIME), *_args(b, work)], capture_output=True, text=True, env=env, timeout=60)
    out = _outcome(result, b, work, shared)
    _remove(work)
    return out


def _run_c(case: Case, tmp: Path, python: str) -> dict:
    work, shared = tmp / "w", tmp / "shared"
    b, env = _build(case, work, shared)
    before = _outcome(subprocess.CompletedProcess([], 0, "", ""), b, work, shared)
    cmd = [str(CREATE), "--python", python, "--pycode", _pycode(), "--native-default", "/nonexistent/native",
           "--catalog", str(CATALOG), "--", *_args(b, work)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    out = _outcome(result, b, work, shared)
    out["before"] = before
    _remove(work)
    return out


def _remove(work: Path) -> None:
    """The work folder, with the tmpfs the runtime mounted on its state root (statedir.py) unmounted first."""
    for point in mounts_under(work):
        subprocess.run(["umount", "-l", point], check=False)
    shutil.rmtree(work)


@pytest.fixture
def stub_python(tmp_path):
    """An 'interpreter' that only says it was called: a C run that reaches it handed the request over."""
    stub = tmp_path / "python-stub"
    stub.write_text(f"#!/bin/sh\necho HANDED-OVER >&2\nexit {DEFER_EXIT}\n")
    stub.chmod(0o755)
    return str(stub)


def _without_timing(out: dict) -> dict:
    """The outcome less what differs between two runs by their time: a fault board's fire times (now + at)."""
    from fakegpu.faults import board

    def timeless(data: bytes) -> bytes:
        out = bytearray(data)
        for i in range(board.MAX_RECORDS):
            at = board.OFF_RECORDS + i * board.RECORD_SIZE
            out[at:at + 8] = bytes(8)
        return bytes(out)

    kept = {k: v for k, v in out.items() if k not in ("before", "config_bytes")}
    if "state" in kept:
        kept["state"] = [(*entry[:3], timeless(entry[3])) if entry[0].endswith(board.FILE_NAME) else entry
                         for entry in kept["state"]]
    return kept


def _symlink_out(rel: str, absolute: bool = True, file: str | None = None):
    def make(root: Path, host: Path) -> None:
        host.mkdir(exist_ok=True)
        (host / "passwd").write_text("root:x:0:0\n")
        target = host / file if file else host
        link = root / rel
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        depth = len(Path(rel).parts) + 8
        link.symlink_to(target if absolute else "../" * depth + str(target).lstrip("/"))

    return make


def _file_at(rel: str, directory: bool = False):
    def make(root: Path, host: Path) -> None:
        p = root / rel
        if p.is_dir() and not directory:
            shutil.rmtree(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        if directory:
            p.mkdir(exist_ok=True)
        else:
            p.write_text("the image's own file\n")

    return make


def _loop(root: Path, host: Path) -> None:
    shutil.rmtree(root / "usr/lib/x86_64-linux-gnu")
    (root / "usr/lib/x86_64-linux-gnu").symlink_to("loop-b")
    (root / "usr/lib/loop-b").symlink_to("x86_64-linux-gnu")


def _link_at(rel: str, target: str):
    """An image's symlink at a target folder, naming a place inside the root (/etc, or through /proc)."""
    def make(root: Path, host: Path) -> None:
        p = root / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target)

    return make


def _fifo_at(rel: str):
    def make(root: Path, host: Path) -> None:
        os.mkfifo(root / rel)

    return make


def _deep(levels: int):
    """/run as a link into a folder `levels` deep: C's walk keeps one descriptor per level (512 at most)."""
    def make(root: Path, host: Path) -> None:
        deep = root / "deep"
        deep.mkdir()
        os.chdir(deep)  # paths this long are made relative, one level at a time
        try:
            for _ in range(levels):
                os.mkdir("d")
                os.chdir("d")
        finally:
            os.chdir(REPO)
        shutil.rmtree(root / "run", ignore_errors=True)
        (root / "run").symlink_to("/deep/" + "d/" * levels)

    return make


def _set(path: list[str], value) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        d = data
        for key in path[:-1]:
            d = d.setdefault(key, {})
        if value is None:
            d.pop(path[-1], None)
        else:
            d[path[-1]] = value

    return edit


def _env_add(*entries: str) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data["process"]["env"].extend(entries)

    return edit


def _profile_ids() -> list[str]:
    return [line.split("\t")[1].removeprefix("id=") for line in CATALOG.read_text().splitlines()
            if line.startswith("profile\t")]


_IDS = _profile_ids()
INVENTORY = {"FAKEGPU_INVENTORY": "a100:4"}


def _nvidia(*entries: str, inventory: str = "a100:4") -> Case:
    """The plain bundle (a CUDA image's NVIDIA_VISIBLE_DEVICES=all) with these env entries added last."""
    return Case(bundle="plain", edit=_env_add(*entries), env={"FAKEGPU_INVENTORY": inventory})


def _uuid(index: int, spec: str = "a100:4", seed: str = "0") -> str:
    from fakegpu.devices import resolve_devices

    return resolve_devices(spec, seed=seed)[index].uuid

MIG_INVENTORY = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb,h100,a100:mig=1g.10gb*7"


def _mig_uuid(gpu: int, mig: int) -> str:
    from fakegpu.devices import resolve_devices

    return resolve_devices(MIG_INVENTORY, seed="0")[gpu].mig[mig].uuid


HANDLED = {
    # Every profile's device table byte for byte (64 devices at most per spec).
    **{f"every-profile-{k}": Case(spec=",".join(_IDS[k * 64:(k + 1) * 64])) for k in range((len(_IDS) + 63) // 64)},
    "gpu-bundle": Case(),
    "a100x8": Case(spec="a100:8"),
    "heterogeneous": Case(spec="h100:2,l4"),
    "loose-spelling": Case(spec=" A100_SXM4_80GB : 003 , nvidia-l4 "),
    "board-name": Case(spec="NVIDIA H100 80GB HBM3:2"),
    "no-seed": Case(spec="a100:2", edit=lambda d: d["process"]["env"].remove("FAKEGPU_SEED=7")),
    "empty-seed": Case(edit=lambda d: d["process"]["env"].__setitem__(3, "FAKEGPU_SEED=")),
    "seed-with-quote": Case(edit=lambda d: d["process"]["env"].__setitem__(3, "FAKEGPU_SEED=it's \"7\"")),
    "last-of-duplicate-vars": Case(edit=_env_add("FAKEGPU_DEVICES=h100:8")),
    "nvidia-indices-bundle": Case(bundle="nvidia", env=INVENTORY),
    "nvidia-honoured-explicitly": Case(bundle="nvidia", env={**INVENTORY, "FAKEGPU_HONOUR_NVIDIA_ENV": "yes"}),
    # No inventory set: one GPU of nvidia_profile.
    "nvidia-all-no-inventory": Case(bundle="plain"),
    "nvidia-all-profile": Case(bundle="plain", env={"FAKEGPU_NVIDIA_PROFILE": "h100"}),
    "nvidia-all-inventory": _nvidia(inventory="h100:2,l4"),
    "nvidia-all-64": _nvidia(inventory="a100:64"),
    "nvidia-indices": _nvidia("NVIDIA_VISIBLE_DEVICES=0,2"),
    "nvidia-host-order": _nvidia("NVIDIA_VISIBLE_DEVICES= 3 ,,1, 3,003"),
    "nvidia-uuids": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_uuid(3)},{_uuid(1)}"),
    "nvidia-mixed": _nvidia(f"NVIDIA_VISIBLE_DEVICES=2,{_uuid(0)},{_uuid(2)}"),
    "nvidia-seeded-uuid": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_uuid(1, seed='n1')}", "FAKEGPU_SEED=n1"),
    "nvidia-none": _nvidia("NVIDIA_VISIBLE_DEVICES=none"),
    "nvidia-none-beats-all": _nvidia("NVIDIA_VISIBLE_DEVICES=all,none,0"),
    "nvidia-all-in-a-list": _nvidia("NVIDIA_VISIBLE_DEVICES=1,all"),
    "nvidia-last-wins": _nvidia("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility",
                                "NVIDIA_VISIBLE_DEVICES=3", "NVIDIA_DRIVER_CAPABILITIES=compute"),
    "caps-utility": _nvidia("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"),
    "caps-compute": _nvidia("NVIDIA_DRIVER_CAPABILITIES=compute"),
    "caps-video": _nvidia("NVIDIA_DRIVER_CAPABILITIES= video ,display"),
    "caps-all": _nvidia("NVIDIA_DRIVER_CAPABILITIES=utility,all"),
    "caps-empty": _nvidia("NVIDIA_DRIVER_CAPABILITIES=,"),
    "caps-none-utility": _nvidia("NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"),
    "legacy-cuda-image": Case(edit=lambda d: d["process"]["env"].__setitem__(2, "CUDA_VERSION=9.0"), env=INVENTORY),
    "fakegpu-devices-beats-nvidia": _nvidia("NVIDIA_VISIBLE_DEVICES=9", "NVIDIA_DRIVER_CAPABILITIES=bogus",
                                            "FAKEGPU_DEVICES=t4:2"),
    "musl-root": Case(rootfs="musl"),
    "empty-root": Case(rootfs="empty"),
    "absolute-root-path": Case(text=lambda t: t.replace('"path": "rootfs"', '"path": "@BUNDLE@/rootfs"')),
    "no-mounts-key": Case(edit=_set(["mounts"], None)),
    "no-linux-key": Case(edit=_set(["linux"], None)),
    "empty-linux": Case(edit=_set(["linux"], {})),
    "empty-arrays": Case(edit=lambda d: (d.__setitem__("mounts", []), d["linux"].__setitem__("devices", []))),
    "mount-already-there": Case(edit=lambda d: d["mounts"].append(
        {"destination": "/usr/bin/nvidia-smi", "type": "bind", "source": "/elsewhere", "options": ["ro"]})),
    "device-already-there": Case(edit=lambda d: d["linux"].__setitem__(
        "devices", [{"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 3}])),
    "table-variable-already-set": Case(edit=_env_add("FAKEGPU_DEVICE_TABLE=/elsewhere")),
    "escapes-and-unicode": Case(text=lambda t: t.replace('"hostname": "abc"',
                                                         '"hostname": "\\u00e9t\\u00e9\\/\\ud83d\\ude00 caf\u00e9",'
                                                         ' "annotations": {"k\\"ey": "1e5", "n": -0.5e-3}')),
    "compact-json": Case(text=lambda t: json.dumps(json.loads(t), separators=(",", ":"))),
    "crlf-json": Case(text=lambda t: t.replace("\n", "\r\n")),
    # Keys and strings spelled with escapes mean what they decode to.
    "escaped-keys": Case(text=lambda t: t.replace('"process"', '"pro\\u0063ess"').replace('"mounts"',
                                                                                          '"m\\u006funts"')),
    "escaped-env": Case(text=lambda t: t.replace('"FAKEGPU_DEVICES=a100:2"', '"FAKEGPU\\u005fDEVICES=a100\\u003a2"')),
    "escaped-destination": Case(edit=lambda d: d["mounts"].append({"destination": "/usr/bin/nvidia-smi"}),
                                text=lambda t: t.replace('"/usr/bin/nvidia-smi"', '"\\/usr\\/bin\\/nvidia-smi"')),
    "numbers": Case(text=lambda t: t.replace('"hostname": "abc"', '"hostname": "abc", "n": [-0, 1E+400, 0.5e-9, '
                                                                  '123456789012345678901234567890, -1.0]')),
    "nested-150": Case(text=lambda t: t.replace('"hostname": "abc"', '"hostname": "abc", "deep": '
                                                                     + "[" * 150 + "]" * 150)),
    "config-file": Case(config={"inventory": "h100:4", "honour_nvidia_env": True,
                                "native_lib_dir": "@SHARED@/native/lib"}, bundle="nvidia",
                        env={"FAKEGPU_NATIVE_DIR": ""}),
    "config-file-profile": Case(config={"nvidia_profile": "h100", "honour_nvidia_env": "yes"}, bundle="plain"),
    "no-native-build": Case(env={"FAKEGPU_NATIVE_DIR": "@SHARED@/nowhere"}),
    "native-dir-trailing-slashes": Case(env={"FAKEGPU_NATIVE_DIR": "@SHARED@//native/lib//"}),
    "smi-elsewhere": Case(env={"FAKEGPU_NVIDIA_SMI": "@SHARED@/native/lib/README"}),
    # Hostile roots: every link is followed inside the root or replaced, never onto the host.
    "lib-dir-links-out": Case(root=_symlink_out("usr/lib/x86_64-linux-gnu")),
    "lib-dir-links-out-relative": Case(root=_symlink_out("usr/lib/x86_64-linux-gnu", absolute=False)),
    "smi-links-out": Case(root=_symlink_out("usr/bin/nvidia-smi", file="passwd")),
    "run-links-out": Case(root=_symlink_out("run")),
    "usr-links-out-relative": Case(root=_symlink_out("usr", absolute=False)),
    # The driver: the table's driver= and the driver libraries' versioned names follow it.
    "driver-from-container": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=550.127.08")),
    "driver-from-config": Case(config={"driver_version": "535.104.05"}),
    "driver-container-beats-config": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=570.133.20"),
                                          config={"driver_version": "535.104.05"}),
    "driver-last-wins": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=550.127.08", "FAKEGPU_DRIVER_VERSION=570.86")),
    "driver-empty-is-unset": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=")),
    "driver-nvidia-request": _nvidia("NVIDIA_VISIBLE_DEVICES=1", "FAKEGPU_DRIVER_VERSION=550.127.08"),
    # MIG: the table's mig.layout holds the instances named, each at its host placement.
    "mig-all": _nvidia(inventory=MIG_INVENTORY),
    "mig-fakegpu-devices": Case(spec=MIG_INVENTORY),
    "mig-by-uuid": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_mig_uuid(0, 1)}", inventory=MIG_INVENTORY),
    "mig-by-index": _nvidia("NVIDIA_VISIBLE_DEVICES=0:1", inventory=MIG_INVENTORY),
    "mig-later-gpu": _nvidia("NVIDIA_VISIBLE_DEVICES=2:6", inventory=MIG_INVENTORY),
    "mig-gpu-whole": _nvidia("NVIDIA_VISIBLE_DEVICES=0", inventory=MIG_INVENTORY),
    "mig-gpu-uuid-whole": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_uuid(2, MIG_INVENTORY)}", inventory=MIG_INVENTORY),
    "mig-union": _nvidia(f"NVIDIA_VISIBLE_DEVICES=2:3,1,0:2,{_mig_uuid(0, 0)},0,0:02,2:0",
                         inventory=MIG_INVENTORY),
    "versioned-name-is-a-real-file": Case(root=_file_at("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05")),
    "soname-is-a-real-file": Case(root=_file_at("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")),
    "soname-is-a-folder": Case(root=_file_at("usr/lib/x86_64-linux-gnu/libcuda.so.1", directory=True)),
    "lib-dir-loop": Case(root=_loop),
    "state-dir-links-to-etc": Case(root=_link_at("run/fakegpu", "/etc")),
    "state-dir-links-through-proc": Case(root=_link_at("run/fakegpu", "/proc/self/root/etc")),
    "lib-subdir-links-to-etc": Case(root=_link_at("usr/lib/x86_64-linux-gnu/fakegpu", "/etc")),
    "soname-is-a-fifo": Case(root=_fifo_at("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")),
    # /deep/d/... : the folder at 511 levels is the deepest both accept.
    "run-511-levels": Case(root=_deep(510)),
    "run-512-levels": Case(root=_deep(511)),
    "run-601-levels": Case(root=_deep(600)),
    # Failures after the state folder is made: same message, config.json and state left as they were.
    "run-is-a-file": Case(root=_file_at("run")),
    "usr-bin-is-a-file": Case(root=_file_at("usr/bin")),
    "smi-is-a-folder": Case(root=_file_at("usr/bin/nvidia-smi", directory=True)),
    "no-root-folder": Case(root=lambda root, host: shutil.rmtree(root)),
}


def _fix_paths(case: Case, tmp: Path) -> Case:
    case = copy.copy(case)
    if case.text is not None:
        inner = case.text
        case.text = lambda t: inner(t).replace("@BUNDLE@", str(tmp / "w" / "b"))
    if case.config is not None:
        case.config = {k: v.replace("@SHARED@", str(tmp / "shared")) if isinstance(v, str) else v
                       for k, v in case.config.items()}
    return case


@pytest.mark.parametrize("resolve", ["openat2", "walk"])
@pytest.mark.parametrize("name", sorted(HANDLED))
def test_c_create_matches_python(name, resolve, tmp_path, stub_python):
    """`walk`: the component-by-component resolution alone, as on a kernel without openat2."""
    case = _fix_paths(HANDLED[name], tmp_path)
    if resolve == "walk":
        case.env = {**case.env, "FAKEGPU_NO_OPENAT2": "1"}
    py = _run_python(case, tmp_path)
    c = _run_c(case, tmp_path, stub_python)
    assert "HANDED-OVER" not in c["stderr"], c["stderr"]
    assert _without_timing(c) == _without_timing(py)
    if py["rc"] == 0:
        assert c["state"] and any(e[0] == "ctr-1/devices.tbl" for e in c["state"])
    else:
        # A failure leaves config.json byte for byte and no state folder.
        assert c["config_bytes"] == c["before"]["config_bytes"] and c["state"] == []
    assert c["host"] == c["before"]["host"]  # nothing written outside the container root


def test_c_create_logs_that_it_prepared(tmp_path, stub_python):
    work, shared = tmp_path / "w", tmp_path / "shared"
    b, env = _build(Case(), work, shared)
    cmd = [str(CREATE), "--python", stub_python, "--pycode", "x", "--native-default", "/n", "--catalog", str(CATALOG),
           "--", *_args(b, work)]
    assert subprocess.run(cmd, capture_output=True, env=env, timeout=60).returncode == 0
    log = (work / "state" / "ctr-1" / "inject.log").read_text()
    assert "by fakegpu-create (C)" in log
    # Host-only, and still naming nothing of the runtime's environment (credential variables among it).
    assert "MOCK_RUNC_LOG" not in log and "environment" not in log
    assert stat.S_IMODE((work / "state" / "ctr-1" / "inject.log").stat().st_mode) == 0o600


ASKS_FOR_NOTHING = {
    "plain-not-honoured": Case(bundle="plain", env={"FAKEGPU_HONOUR_NVIDIA_ENV": "0"}),
    "void": Case(bundle="void"),
    "nvidia-not-honoured": Case(bundle="nvidia", env={"FAKEGPU_HONOUR_NVIDIA_ENV": "no"}),
    "nvidia-not-honoured-by-config": Case(bundle="nvidia", config={"honour_nvidia_env": False}),
    "nvidia-void": _nvidia("NVIDIA_VISIBLE_DEVICES=void"),
    "nvidia-void-in-a-list": _nvidia("NVIDIA_VISIBLE_DEVICES=0,void,all"),
    "nvidia-empty": _nvidia("NVIDIA_VISIBLE_DEVICES="),
    "nvidia-only-commas": _nvidia("NVIDIA_VISIBLE_DEVICES= , ,"),
    "nvidia-unset": Case(bundle="plain", edit=lambda d: d["process"]["env"].pop(2)),
    # A bad capability or inventory does not matter when the container asks for nothing.
    "nvidia-void-bad-caps": _nvidia("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_DRIVER_CAPABILITIES=bogus"),
    "cuda-image-with-require": Case(bundle="plain", edit=lambda d: d["process"]["env"].__setitem__(
        slice(2, 3), ["CUDA_VERSION=12.4", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]), config={"inventory": "a10O"}),
    "none-padded": Case(spec="  NONE "),
    "empty-spec": Case(spec=""),
    "no-process": Case(edit=_set(["process"], None)),
}


@pytest.mark.parametrize("name", sorted(ASKS_FOR_NOTHING))
def test_a_container_that_asks_for_nothing_is_byte_identical(name, tmp_path, stub_python):
    c = _run_c(ASKS_FOR_NOTHING[name], tmp_path, stub_python)
    assert c["rc"] == 0 and "HANDED-OVER" not in c["stderr"]
    assert c["config_bytes"] == c["before"]["config_bytes"] and c["state"] == []
    assert c["bundle"] == c["before"]["bundle"]
    assert c["runc"].startswith(f"{MOCK_BIN / 'runc'}\t--root")


def _dup_key(t: str) -> str:
    return t.replace('"hostname": "abc"', '"hostname": "abc", "hostname": "def"')


HANDED_OVER = {
    "unknown-board": Case(bundle="bad-spec"),
    "count-too-big": Case(spec="a100:65"),
    "huge-spec": Case(spec="x" * 5000),
    "shell-garbage": Case(spec="a100::;rm -rf /"),
    "stray-comma": Case(spec="a100,"),
    "typo": Case(spec="a10O:2"),
    "non-ascii-spec": Case(spec="a100\u00a0:2"),
    "tab-in-seed": Case(edit=lambda d: d["process"]["env"].__setitem__(3, "FAKEGPU_SEED=a\tb")),
    "hook-injection": Case(env={"FAKEGPU_INJECTION": "hook"}),
    "bad-injection": Case(env={"FAKEGPU_INJECTION": "magic"}),
    "user-namespace": Case(edit=lambda d: d["linux"].setdefault("namespaces", []).append({"type": "user"})),
    "duplicate-key": Case(text=_dup_key),
    "nan": Case(text=lambda t: t.replace('"hostname": "abc"', '"hostname": "abc", "x": NaN')),
    "not-json": Case(text=lambda t: "{not json"),
    "bom": Case(text=lambda t: "\ufeff" + t),
    "trailing-garbage": Case(text=lambda t: t + " x"),
    "nested-300": Case(text=lambda t: t.replace('"hostname": "abc"', '"hostname": "abc", "deep": '
                                                                     + "[" * 300 + "]" * 300)),
    "lone-surrogate": Case(text=lambda t: t.replace('"hostname": "abc"', '"hostname": "\\ud800"')),
    "nul-in-env": Case(text=lambda t: t.replace('"HOSTNAME=abc"', '"HOSTNAME=a\\u0000bc"')),
    "env-not-strings": Case(edit=_env_add(7)),
    "mounts-not-a-list": Case(edit=_set(["mounts"], {"a": 1})),
    "linux-null": Case(edit=_set(["linux"], None), text=lambda t: t.replace('"hooks"', '"linux": null, "hooks"')),
    "no-root": Case(edit=_set(["root"], None)),
    "config-unknown-key": Case(config={"colour": "blue"}),
    "driver-not-a-version": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=latest")),
    "driver-too-long": Case(edit=_env_add("FAKEGPU_DRIVER_VERSION=" + "5" * 5000)),
    "driver-config-not-a-version": Case(config={"driver_version": "58"}),
    "nvidia-index-out-of-range": _nvidia("NVIDIA_VISIBLE_DEVICES=0,4"),
    "nvidia-huge-index": _nvidia("NVIDIA_VISIBLE_DEVICES=1234567"),
    "nvidia-unknown-uuid": _nvidia("NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"),
    "nvidia-uuid-prefix": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_uuid(1)[:12]}"),
    "nvidia-bare-prefix": _nvidia("NVIDIA_VISIBLE_DEVICES=GPU-"),
    "nvidia-mig": _nvidia("NVIDIA_VISIBLE_DEVICES=MIG-0c1c0d9c-dd6b-5d85-9d0d-2e3e4b7e7d0e"),
    "mig-index-past-the-last": _nvidia("NVIDIA_VISIBLE_DEVICES=0:3", inventory=MIG_INVENTORY),
    "mig-on-a-gpu-not-in-mig-mode": _nvidia("NVIDIA_VISIBLE_DEVICES=0:0,1:0", inventory=MIG_INVENTORY),
    "mig-gpu-past-the-last": _nvidia("NVIDIA_VISIBLE_DEVICES=3:0", inventory=MIG_INVENTORY),
    "mig-unknown-uuid": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_mig_uuid(0, 1)[:-1]}0", inventory=MIG_INVENTORY),
    "mig-uuid-prefix": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_mig_uuid(0, 1)[:20]}", inventory=MIG_INVENTORY),
    "mig-uuid-upper": _nvidia(f"NVIDIA_VISIBLE_DEVICES={_mig_uuid(0, 1).upper()}", inventory=MIG_INVENTORY),
    "mig-odd-forms": _nvidia("NVIDIA_VISIBLE_DEVICES=0:1:2", inventory=MIG_INVENTORY),
    "mig-empty-half": _nvidia("NVIDIA_VISIBLE_DEVICES=0:", inventory=MIG_INVENTORY),
    "nvidia-upper-all": _nvidia("NVIDIA_VISIBLE_DEVICES=ALL"),
    "nvidia-tab-inside": _nvidia("NVIDIA_VISIBLE_DEVICES=0\t1"),
    "nvidia-too-long": _nvidia("NVIDIA_VISIBLE_DEVICES=" + "0," * 3000),
    "nvidia-non-ascii": _nvidia("NVIDIA_VISIBLE_DEVICES=0,\u00a02"),
    "caps-unknown": _nvidia("NVIDIA_DRIVER_CAPABILITIES=compute,gpu"),
    "caps-case": _nvidia("NVIDIA_DRIVER_CAPABILITIES=Utility"),
    "caps-too-long": _nvidia("NVIDIA_DRIVER_CAPABILITIES=" + "utility," * 40),
    "inventory-typo": _nvidia(inventory="a10O:8"),
    "inventory-too-big": _nvidia(inventory="a100:65"),
    "inventory-in-config-typo": Case(bundle="plain", config={"inventory": "h10O:2"}),
    "config-not-json": Case(config=None, env={"FAKEGPU_CONFIG": "@SHARED@/native/lib/README"}),
    "runc-missing": Case(env={"FAKEGPU_LOW_LEVEL_RUNTIME": "no-such-runc"}),
    "fault-plan": Case(edit=_env_add('FAKEGPU_FAULTS={"faults": [{"xid": 79, "device": 1}]}')),
    "fault-plan-not-asking-for-gpus": Case(bundle="plain", edit=_env_add("FAKEGPU_FAULTS=faults: []")),
    # CDI devices of FakeGPU's spec select from the inventory the spec was written for (hook/fakegpu_hook/cdi.py)
    "cdi-two-gpus": _nvidia(f"FAKEGPU_CDI_INVENTORY={MIG_INVENTORY}", f"FAKEGPU_CDI_DEVICE_2={_uuid(2, MIG_INVENTORY)}",
                            f"FAKEGPU_CDI_DEVICE_1={_uuid(1, MIG_INVENTORY)}"),
    "cdi-a-mig-device": _nvidia(f"FAKEGPU_CDI_INVENTORY={MIG_INVENTORY}", f"FAKEGPU_CDI_DEVICE_0_1={_mig_uuid(0, 1)}"),
    "cdi-all": _nvidia("FAKEGPU_CDI_INVENTORY=h100:2", "FAKEGPU_CDI_DEVICE_ALL=all"),
    "cdi-without-inventory": _nvidia(f"FAKEGPU_CDI_DEVICE_0={_uuid(0)}"),
    "cdi-unknown-uuid": _nvidia("FAKEGPU_CDI_INVENTORY=a100:4",
                                "FAKEGPU_CDI_DEVICE_0=GPU-00000000-0000-0000-0000-000000000000"),
}


@pytest.mark.parametrize("name", sorted(HANDED_OVER))
def test_what_c_does_not_handle_goes_to_python_untouched(name, tmp_path, stub_python):
    case = _fix_paths(HANDED_OVER[name], tmp_path)
    c = _run_c(case, tmp_path, stub_python)
    assert c["rc"] == DEFER_EXIT and "HANDED-OVER" in c["stderr"]
    assert c["config_bytes"] == c["before"]["config_bytes"] and c["state"] == [] and c["runc"] == ""
    assert c["bundle"] == c["before"]["bundle"]
    # With the real interpreter behind it, the result is Python's own.
    py = _run_python(case, tmp_path)
    chained = _run_c(case, tmp_path, sys.executable)
    assert _without_timing(chained) == _without_timing(py)


def test_a_retried_create_matches_python(tmp_path, stub_python):
    """Docker may call create again on a bundle: both runtimes add nothing twice."""
    def twice(run) -> dict:
        work, shared = tmp_path / "w", tmp_path / "shared"
        b, env = _build(Case(), work, shared)
        for _ in range(2):
            result = run(b, env, work)
        out = _outcome(result, b, work, shared)
        _remove(work)
        return out

    py = twice(lambda b, env, work: subprocess.run([str(PY_RUNTIME), *_args(b, work)], capture_output=True,
                                                   text=True, env=env, timeout=60))
    c = twice(lambda b, env, work: subprocess.run(
        [str(CREATE), "--python", stub_python, "--pycode", "x", "--native-default", "/n", "--catalog", str(CATALOG),
         "--", *_args(b, work)], capture_output=True, text=True, env=env, timeout=60))
    assert py["rc"] == c["rc"] == 0
    assert _without_timing(c) == _without_timing(py)

