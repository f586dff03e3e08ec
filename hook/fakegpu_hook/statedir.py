"""The host's state folders: where a container's table, log and shared state live, and why the host is safe.

Whatever a container can write lives on the host, so it must never be something the host can execute or open
as a device: a container could otherwise plant a setuid shell or a device node for any host user to use.
The state root is therefore a filesystem mounted nosuid,nodev,noexec (the runtime mounts a tmpfs there on first
use, as /run is one after every boot) and a folder only root can enter (0700). Per container:

    <state_root>/<id>/            0700  host only
        devices.tbl               0644  mounted read-only at /run/fakegpu/devices.tbl
        inject.log | hook.log     0600  what the runtime did; never visible in the container
        owner                     0600  `<pid> <start time>` of the container's first process, when no runtime
                                        of ours will delete the folder (the NVIDIA-named hook, under plain runc)
        state/                    1777  the container's /run/fakegpu (processes of any uid publish there)

Who removes it: our runtime at `delete`; the hook's poststop stage where a CDI spec or a hooks.d file runs the
hook (podman, containerd, CRI-O: remove_container_dir); sweep_exited where only dockerd's prestart hook runs.

native/container/statedir.c is the C twin, used by the C `create`; tests/hook/test_statedir.py runs both.
"""

from __future__ import annotations

import os
import stat

ST_NOSUID, ST_NODEV, ST_NOEXEC = 0x2, 0x4, 0x8
REQUIRED_FLAGS = ST_NOSUID | ST_NODEV | ST_NOEXEC
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
CONTAINER_STATE = "state"


class StateRootError(Exception):
    pass


def _safe(st_flags: int) -> bool:
    return st_flags & REQUIRED_FLAGS == REQUIRED_FLAGS


def _advice(path: str) -> str:
    return (f"mount one there yourself (mount -t tmpfs -o nosuid,nodev,noexec,mode=0700 tmpfs {path}) or set "
            f"state_root to a folder on such a filesystem")


def secure_state_root(path: str, may_mount: bool = True) -> None:
    """Make sure `path` is a root-only folder on a nosuid,nodev,noexec filesystem, mounting a tmpfs there when it
    is a plain folder; raise StateRootError (nothing changed but the folder itself) when that cannot hold.
    The hook passes may_mount=False: it runs in the container's mount namespace, where a mount would be the
    container's alone."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StateRootError(f"state root {path} is not a folder")
    if not _safe(os.statvfs(path).f_flag):
        if not may_mount:
            raise StateRootError(f"state root {path} is not on a nosuid,nodev,noexec filesystem (the container "
                                 "runtime mounts one at its first create); " + _advice(path))
        _mount_tmpfs(path)
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        raise StateRootError(f"state root {path} belongs to uid {st.st_uid}, not to the runtime's user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def _mount_tmpfs(path: str) -> None:
    import fcntl

    # Two creates may find the folder bare at once: the second must not stack a tmpfs over the first's, which
    # would hide the state of a container started a moment before.
    parent = os.open(os.path.dirname(os.path.abspath(path)) or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(parent, fcntl.LOCK_EX)
        if _safe(os.statvfs(path).f_flag):
            return
        if os.path.ismount(path):
            raise StateRootError(f"state root {path} is a mount without nosuid,nodev,noexec: whatever a "
                                 f"container writes there could be run or opened as a device on the host; "
                                 + _advice(path))
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=0700") != 0:
            err = ctypes.get_errno()
            raise StateRootError(f"state root {path} is not on a nosuid,nodev,noexec filesystem and mounting a "
                                 f"tmpfs there failed ({os.strerror(err)}); " + _advice(path))
        if not _safe(os.statvfs(path).f_flag):
            raise StateRootError(f"state root {path}: the tmpfs mounted there lacks nosuid,nodev,noexec")
    finally:
        os.close(parent)  # releases the lock


def container_dir(state_root: str, container_id: str) -> str:
    return os.path.join(state_root, container_id)


def shared_state_dir(host_dir: str) -> str:
    """The folder bind-mounted read-write as the container's /run/fakegpu."""
    return os.path.join(host_dir, CONTAINER_STATE)


def make_container_dir(state_root: str, container_id: str, may_mount: bool = True) -> str:
    """<state_root>/<id> (0700) with its shared state/ (1777), the state root secured first; the host folder."""
    secure_state_root(state_root, may_mount)
    host_dir = container_dir(state_root, container_id)
    os.makedirs(host_dir, mode=0o700, exist_ok=True)
    os.chmod(host_dir, 0o700)
    shared = shared_state_dir(host_dir)
    os.makedirs(shared, exist_ok=True)
    os.chmod(shared, 0o1777)  # processes of any user in the container record their state here
    return host_dir


def remove_container_dir(state_root: str, container_id: str) -> bool:
    """Remove <state_root>/<id> once its container is gone; whether there was one. A link there is only unlinked:
    the folder is root's, but its state/ was the container's to write, and rmtree never follows links in it."""
    import shutil

    host_dir = container_dir(state_root, container_id)
    try:
        st = os.lstat(host_dir)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(host_dir)
        return True
    shutil.rmtree(host_dir)
    return True


def write_log(path: str, text: str) -> None:
    """A host-only diagnostics file (0600, never through a link); a failure to write it fails nothing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass


OWNER_NAME = "owner"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid it names
    one process for good, as pids are reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def record_owner(host_dir: str, pid: int) -> None:
    """Note the container's process in its folder, for sweep_exited: under plain runc nothing of ours runs at
    `delete`, so nothing else would ever remove the folder."""
    started = _start_time(pid)
    if started is not None:
        write_log(os.path.join(host_dir, OWNER_NAME), f"{pid} {started}\n")


def sweep_exited(state_root: str, keep: str = "") -> list[str]:
    """Remove the folders whose recorded process is gone (their containers have stopped); folders without an
    owner file (our runtime deletes those) and `keep` are left alone. The folders removed."""
    import shutil

    removed = []
    try:
        names = os.listdir(state_root)
    except OSError:
        return removed
    for name in names:
        if name == keep or name.startswith("."):
            continue
        folder = os.path.join(state_root, name)
        try:
            with open(os.path.join(folder, OWNER_NAME), encoding="ascii") as f:
                pid, started = f.read().split()
        except (OSError, ValueError):
            continue
        if pid.isdigit() and _start_time(int(pid)) == started:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
