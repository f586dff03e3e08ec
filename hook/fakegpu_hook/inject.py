"""What the hook puts into a container root: the plan (pure, testable) and applying it with undo."""

from __future__ import annotations

import os
import posixpath
import stat

from fakegpu_hook.contract import (
    CATALOG_TABLE_NAME,
    COMPUTE,
    CONTAINER_CATALOG_TABLE,
    CONTAINER_DEVICE_TABLE,
    CONTAINER_DIR,
    CONTAINER_NVIDIA_SMI,
    DRIVER_CAPABILITIES,
    DRIVER_LIBRARIES,
    UTILITY,
    UTILITY_LIBRARIES,
)
from fakegpu_hook.rootfs import Root, RootfsError, bind_mount, unmount

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at every container start
    from collections.abc import Collection, Sequence

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
# nvidia-uvm's major is allocated dynamically on real hosts; any unused number serves a stand-in.
UVM_MAJOR = 510
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-")
# Where a glibc image's own libc lives is, by construction, a directory its loader searches by default.
# The folder in the image's library folder onto which the native build's folder is mounted.
LIB_SUBDIR = "fakegpu"
_GLIBC_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
               "lib/aarch64-linux-gnu", "usr/lib64", "lib64", "usr/lib", "lib")


class Plan:
    """What goes into one container. A plain class: `dataclasses` imports `inspect`, milliseconds at every
    container start."""

    def __init__(self, lib_dir: str) -> None:
        self.lib_dir = lib_dir
        self.files: list[tuple[str, str]] = []   # (host source, container path), read-only
        self.links: list[tuple[str, str]] = []   # (container path, link target)
        self.dirs: list[tuple[str, str]] = []    # (host source, container path), read-write
        self.lib_dirs: list[tuple[str, str]] = []  # (host source, container path), read-only, not noexec
        self.nodes: list[tuple[str, int, int]] = []
        self.notes: list[str] = []


def _split_shared_object(name: str) -> tuple[str, str] | None:
    """('libX.so', '.N.M') for a name of the form lib[A-Za-z0-9_+-]+.so(.[0-9]+)*, else None. String work, not
    `re`: the runtime imports nothing that compiles regular expressions (milliseconds at every start)."""
    at = name.find(".so")
    if not name.startswith("lib") or at <= 3 or not set(name[3:at]) <= _NAME_CHARS:
        return None
    version = name[at + 3:]
    if version and (version[0] != "." or not all(p.isdigit() and p.isascii() for p in version[1:].split("."))):
        return None
    return name[:at + 3], version


def library_dir(root: Root) -> str:
    """The image's own library directory: where libc.so.6 is (glibc), else /usr/lib (musl's default path
    holds /usr/lib; so do images with no libc at all)."""
    for d in _GLIBC_DIRS:
        if root.exists(f"/{d}/libc.so.6"):
            return "/" + d
    return "/usr/lib"


def _capability(name: str) -> str:
    """The driver capability a library of the native build comes with (NVIDIA's split: NVML is utility's,
    the CUDA libraries compute's)."""
    split = _split_shared_object(name)
    return UTILITY if split is not None and split[0] in UTILITY_LIBRARIES else COMPUTE


def plan_injection(root: Root, native_lib_dir: str, nvidia_smi: str, table: str, catalog: str,
                   state_dir: str, minors: Sequence[int],
                   capabilities: Collection[str] = DRIVER_CAPABILITIES, driver: str = "") -> Plan:
    """The native build's folder is bind-mounted once, read-only, onto `<libdir>/fakegpu` (LIB_SUBDIR), and
    every library name the loader looks up is a link in `<libdir>` into it: one mount instead of one per
    library (each mount and each mount target costs runc and the image's storage driver a round trip). A
    library the build folder only links to from elsewhere cannot be reached through that mount: it gets its own
    file mount, as before. `minors` are the GPUs' /dev/nvidiaN numbers (the host's, for a selection);
    `capabilities` (NVIDIA_DRIVER_CAPABILITIES) decide which libraries come: utility NVML and nvidia-smi,
    compute the CUDA libraries and the UVM nodes, as NVIDIA's runtime splits its driver's files. With a
    `driver` version, the driver's own libraries (contract.DRIVER_LIBRARIES) take a real driver's names:
    `libcuda.so.<driver>` is the link into the folder and the soname links to it."""
    plan = Plan(library_dir(root))
    utility, compute = UTILITY in capabilities, COMPUTE in capabilities
    libs = sorted(os.listdir(native_lib_dir)) if os.path.isdir(native_lib_dir) else []
    libs = [n for n in libs if n == CATALOG_TABLE_NAME or _capability(n) in capabilities]
    names = set(libs)
    native = os.path.realpath(native_lib_dir) if libs else ""
    sub = f"{plan.lib_dir}/{LIB_SUBDIR}"
    inside: list[str] = []  # names reachable through the folder mount
    soname_of: dict[str, str] = {}  # a driver library's versioned path -> its soname, what development links name

    def place(name: str, mode: int) -> None:
        if stat.S_ISREG(mode):  # a file of the folder itself: reached through the folder mount
            inside.append(name)
            split = _split_shared_object(name)
            if driver and split and split[1] and split[0] in DRIVER_LIBRARIES:
                real = f"{split[0]}.{driver}"
                plan.links.append((f"{plan.lib_dir}/{real}", f"{LIB_SUBDIR}/{name}"))
                plan.links.append((f"{plan.lib_dir}/{name}", real))
                soname_of[f"{plan.lib_dir}/{real}"] = name
            else:
                plan.links.append((f"{plan.lib_dir}/{name}", f"{LIB_SUBDIR}/{name}"))
        elif os.path.isfile(os.path.join(native_lib_dir, name)):  # a link out of the folder
            plan.files.append((os.path.realpath(os.path.join(native_lib_dir, name)), f"{plan.lib_dir}/{name}"))

    def lstat_mode(name: str) -> int:
        try:
            return os.lstat(os.path.join(native_lib_dir, name)).st_mode
        except OSError:
            return 0

    for name in libs:
        if _split_shared_object(name) is None:
            continue
        mode = lstat_mode(name)
        if stat.S_ISLNK(mode) and os.readlink(os.path.join(native_lib_dir, name)) in names:
            plan.links.append((f"{plan.lib_dir}/{name}", os.readlink(os.path.join(native_lib_dir, name))))
        else:
            place(name, mode)
    taken = {p for p, _ in plan.links} | {d for _, d in plan.files}
    # Clients dlopen the driver's 'libnvidia-ml.so' and link '-lcuda' as often as they use the sonames: those
    # get development links. The CUDA libraries' shims do not (a runtime image has none; loaders and DT_NEEDED
    # ask for sonames): every name is a create in the image's overlay at each container start.
    for dest in sorted({p for p, t in plan.links if t.startswith(LIB_SUBDIR + "/")} | {d for _, d in plan.files}):
        folder, _, name = dest.rpartition("/")
        split = _split_shared_object(name)
        base = f"{folder}/{split[0]}" if split and split[1] else dest
        if base != dest and base not in taken and os.path.basename(base) in DRIVER_LIBRARIES:
            plan.links.append((base, soname_of.get(dest, name)))
            taken.add(base)
    # The shims' installed layout keeps the catalog beside libnvidia-ml.so.1; they resolve FAKEGPU_DEVICES
    # with it in processes that have no FAKEGPU_DEVICE_TABLE (those started by `docker exec`).
    if CATALOG_TABLE_NAME in names and (utility or compute):
        place(CATALOG_TABLE_NAME, lstat_mode(CATALOG_TABLE_NAME))
    if inside:
        plan.lib_dirs.append((native, sub))
    sonames = {p.rsplit("/", 1)[-1] for p, _ in plan.links} | {d.rsplit("/", 1)[-1] for _, d in plan.files}
    if utility and "libnvidia-ml.so.1" not in sonames:
        plan.notes.append(f"no libnvidia-ml.so.1 in {native_lib_dir}: NVML not injected (run `make`)")
    if utility and os.path.isfile(nvidia_smi):
        plan.files.append((nvidia_smi, CONTAINER_NVIDIA_SMI))
    elif utility:
        plan.notes.append(f"no nvidia-smi at {nvidia_smi}: not injected (run `make`)")
    plan.files.append((table, CONTAINER_DEVICE_TABLE))
    if os.path.isfile(catalog):
        plan.files.append((catalog, CONTAINER_CATALOG_TABLE))
    # The container's /run/fakegpu is its host folder (per-process state the shims share, visible to host
    # tools); the tables are mounted read-only on top of it.
    plan.dirs.append((state_dir, CONTAINER_DIR))
    plan.nodes.append(("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR))
    if compute:
        plan.nodes.append(("/dev/nvidia-uvm", UVM_MAJOR, 0))
        plan.nodes.append(("/dev/nvidia-uvm-tools", UVM_MAJOR, 1))
    plan.nodes.extend((f"/dev/nvidia{m}", NVIDIA_MAJOR, m) for m in minors)
    return plan


# What docker and containerd mount in every container: kernel filesystems, /dev's tmpfs (runc makes our nodes
# there), and single files under /etc. None covers a folder of ours; any other mount is looked at.
RUNTIME_MOUNT_TREES = ("/proc", "/sys", "/dev")
RUNTIME_MOUNT_FILES = ("/etc/resolv.conf", "/etc/hostname", "/etc/hosts")


def runtime_mount(destination: str) -> bool:
    """Whether config.json's mount at `destination` is one every container gets (RUNTIME_MOUNT_*)."""
    return destination in RUNTIME_MOUNT_FILES or any(
        destination == t or destination.startswith(t + "/") for t in RUNTIME_MOUNT_TREES)


def check_covering_mounts(root: Root, plan: Plan, mounts: object) -> None:
    """Refuse a container whose own mounts (a VOLUME, `-v`) cover a folder the plan prepares. runc mounts them
    first, so what we made in the image is hidden: the links into `<libdir>/fakegpu` would not be seen (GPUs
    silently missing), and runc would make our mount targets inside the volume, following whatever links it
    holds. A fresh tmpfs (`--tmpfs /run`) holds nothing to follow: mount targets may sit in one, links may not."""
    if not isinstance(mounts, list):
        return
    own = {dest for _, dest in [*plan.dirs, *plan.lib_dirs, *plan.files]}
    targets = [(root.canonical(plan.lib_dir), "the GPU libraries' links", False)]
    inside = tuple(dest.rstrip("/") + "/" for _, dest in plan.dirs)
    targets += [(root.canonical(dest), dest, True) for _, dest in [*plan.dirs, *plan.lib_dirs, *plan.files]
                if not dest.startswith(inside)]
    for m in mounts:
        dest = m.get("destination") if isinstance(m, dict) else None
        if not isinstance(dest, str) or not dest.startswith("/") or dest in own:
            continue
        dest = posixpath.normpath(dest)
        if runtime_mount(dest):
            continue
        covered = root.canonical(dest)
        for target, what, mount_target in targets:
            if target == covered or target.startswith(covered.rstrip("/") + "/"):
                if mount_target and m.get("type") == "tmpfs":
                    continue
                raise RootfsError(f"the container's mount at {dest} covers {target} ({what}): FakeGPU cannot "
                                  "inject there; mount it elsewhere, or give the image its own library folder")


def prepare_targets(root: Root, plan: Plan) -> None:
    """Make every mount target and link of a plan in the container root, from the host, before runc runs:
    the same safe resolution as the hook's (symlinks at targets replaced, never followed out of the root),
    after which runc only bind-mounts onto plain files and folders. Files that land inside a mounted folder
    (the tables in /run/fakegpu) need no target in the image: runc makes theirs in the host folder."""
    for _, dest in [*plan.dirs, *plan.lib_dirs]:
        os.close(root.dir_target(dest))
    inside = tuple(dest.rstrip("/") + "/" for _, dest in plan.dirs)
    for _, dest in plan.files:
        if not dest.startswith(inside):
            os.close(root.file_target(dest))
    for path, target in plan.links:
        root.symlink(path, target)


def oci_mounts(plan: Plan) -> list[dict[str, object]]:
    """The plan's bind mounts as config.json `mounts` entries, folders first (files go on top of them)."""
    rw = ["bind", "rw", "nosuid", "nodev", "noexec"]
    ro = ["bind", "ro", "nosuid", "nodev"]
    return ([{"destination": dest, "type": "bind", "source": src, "options": list(rw)} for src, dest in plan.dirs]
            + [{"destination": dest, "type": "bind", "source": src, "options": list(ro)}
               for src, dest in [*plan.lib_dirs, *plan.files]])


def oci_devices(plan: Plan) -> list[dict[str, object]]:
    """The plan's device nodes as `linux.devices` entries: runc makes them in the container's own /dev."""
    return [{"path": path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0}
            for path, major, minor in plan.nodes]


class Injection:
    """Applies a plan; on failure `undo()` unmounts everything mounted so far, newest first."""

    def __init__(self, root: Root, log) -> None:
        self.root, self.log = root, log
        self.mounted: list[str] = []

    def apply(self, plan: Plan) -> None:
        # Folders first: files are mounted on top of them.
        for src, dest in plan.dirs:
            self._mount(src, self.root.dir_target(dest), dest, readonly=False)
        for src, dest in plan.lib_dirs:  # libraries: read-only, but mapped executable
            self._mount(src, self.root.dir_target(dest), dest, readonly=True)
        for src, dest in plan.files:
            self._mount(src, self.root.file_target(dest), dest, readonly=True)
        for path, target in plan.links:
            self.root.symlink(path, target)
        kinds = {self.root.device_node(path, major, minor) for path, major, minor in plan.nodes}
        self.log(f"device nodes: {', '.join(sorted(kinds))} ({len(plan.nodes)} under /dev)")

    def _mount(self, src: str, fd: int, dest: str, readonly: bool) -> None:
        try:
            self.mounted.append(bind_mount(src, fd, readonly=readonly, noexec=not readonly))
            self.log(f"mounted {src} -> {dest}{' (ro)' if readonly else ''}")
        finally:
            os.close(fd)

    def undo(self) -> None:
        while self.mounted:
            unmount(self.mounted.pop())
