"""Paths inside a container root, resolved without ever leaving it, and bind mounts onto them.

Each component is looked at with lstat relative to an open directory; a symlink is read and followed the
way the container itself would see it (an absolute target restarts at the container root, '..' stops at it),
so an image whose /usr/lib links to /etc lands our files in the container's /etc, never the host's
(the CVE-2024-0132 class). Mount targets are then named through /proc/self/fd, so nothing is looked up by
path a second time.
"""

from __future__ import annotations

import errno
import os
import stat

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC = 0x20, 0x1000, 0x4000
MNT_DETACH = 0x2
MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup
MAX_DEPTH = 512  # folders open at once in one walk; fg_root.c's MAX_STACK, so both refuse the same paths

_LIBC = None


def _libc():
    """libc through ctypes, loaded on the first mount: the runtime, which only prepares targets, never pays
    for ctypes and libffi (milliseconds at every container start)."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _LIBC = libc
    return _LIBC


class RootfsError(Exception):
    pass


def _dir_flags() -> int:
    return os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Root:
    """An open container root. Use as a context manager so every descriptor is closed.

    With `cache_dirs`, each folder is resolved once and its descriptor reused: every lookup in an image on
    fuse-overlayfs is a round trip to the FUSE daemon. Only for callers that mount nothing while the root is
    open (a mount over a cached folder would not be seen through its old descriptor): the runtime's
    preparation, not the hook."""

    def __init__(self, path: str, cache_dirs: bool = False) -> None:
        self.path = path
        self.fd = os.open(path, _dir_flags())
        self._dirs: dict[str, int] | None = {} if cache_dirs else None

    def close(self) -> None:
        for fd in (self._dirs or {}).values():
            os.close(fd)
        os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _walk(self, parts: list[str], create: bool) -> int:
        """An O_PATH descriptor of the directory named by parts, inside the root."""
        stack = [os.dup(self.fd)]
        pending = list(parts)
        links = 0
        try:
            while pending:
                name = pending.pop(0)
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                here = stack[-1]
                try:
                    st = os.stat(name, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o755, dir_fd=here)
                    st = os.stat(name, dir_fd=here, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise RootfsError(f"too many symlinks under {self.path} resolving {'/'.join(parts)}")
                    target = os.readlink(name, dir_fd=here)
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                    pending[:0] = target.split("/")
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    raise RootfsError(f"{'/'.join(parts)} in the container root is not a directory")
                if len(stack) == MAX_DEPTH:
                    raise RootfsError(f"{'/'.join(parts)} in the container root is nested too deeply")
                stack.append(os.open(name, _dir_flags(), dir_fd=here))
            return os.dup(stack[-1])
        finally:
            for fd in stack:
                os.close(fd)

    def open_dir(self, path: str, create: bool = False) -> int:
        """An O_PATH descriptor of the folder at path inside the root (the caller closes it)."""
        if self._dirs is None:
            return self._walk(path.strip("/").split("/"), create)
        key = "/" + path.strip("/")
        if key not in self._dirs:
            self._dirs[key] = self._walk(path.strip("/").split("/"), create)
        return os.dup(self._dirs[key])

    def exists(self, path: str) -> bool:
        parent, name = os.path.split(path.rstrip("/"))
        try:
            fd = self.open_dir(parent)
        except (FileNotFoundError, NotADirectoryError, RootfsError):
            return False
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def _clear_link(self, dirfd: int, name: str) -> os.stat_result | None:
        """An existing symlink at a target name is the image's, not a path to follow: remove it."""
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            os.unlink(name, dir_fd=dirfd)
            return None
        return st

    def file_target(self, path: str) -> int:
        """An O_PATH descriptor of a regular file at path (created empty if missing), for a bind mount."""
        parent, name = os.path.split(path)
        dirfd = self.open_dir(parent, create=True)
        create = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:
                # O_EXCL creates only where nothing (not even a dangling link) has the name: the common case
                # costs one lookup; anything already there is examined below.
                os.close(os.open(name, create, 0o644, dir_fd=dirfd))
            except FileExistsError:
                st = self._clear_link(dirfd, name)
                if st is not None and not stat.S_ISREG(st.st_mode):
                    raise RootfsError(f"{path} in the container is not a regular file") from None
                if st is None:
                    os.close(os.open(name, create, 0o644, dir_fd=dirfd))
            return os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        finally:
            os.close(dirfd)

    def dir_target(self, path: str) -> int:
        """An O_PATH descriptor of a folder at path for a mount: an image's symlink there is replaced by a
        folder, never followed (it could name /etc, or /proc/self/root/etc), and anything else that is not a
        folder is refused."""
        parent, name = os.path.split(path.rstrip("/"))
        dirfd = self.open_dir(parent, create=True)
        try:
            st = self._clear_link(dirfd, name)
            if st is None:
                stale = (self._dirs or {}).pop("/" + path.strip("/"), None)  # it named the link's target
                if stale is not None:
                    os.close(stale)
                try:
                    os.mkdir(name, 0o755, dir_fd=dirfd)
                except FileExistsError:  # made by someone else since: examined as usual below
                    pass
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                raise RootfsError(f"{path} in the container is not a directory")
            return os.open(name, _dir_flags(), dir_fd=dirfd)
        finally:
            os.close(dirfd)

    def canonical(self, path: str) -> str:
        """path as the container will see it once its links are followed (inside the root, as `_walk` does):
        the longest existing prefix resolved, the rest appended as given."""
        done: list[str] = []
        pending = [p for p in path.split("/") if p]
        links = 0
        fd = os.dup(self.fd)
        try:
            while pending:
                name = pending.pop(0)
                if name == ".":
                    continue
                if name == "..":
                    if done:
                        done.pop()
                        os.close(fd)
                        fd = self._walk(done, create=False) if done else os.dup(self.fd)
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    return "/" + "/".join([*done, name, *pending])
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise RootfsError(f"too many symlinks under {self.path} resolving {path}")
                    target = os.readlink(name, dir_fd=fd)
                    if target.startswith("/"):
                        done = []
                        os.close(fd)
                        fd = os.dup(self.fd)
                    pending[:0] = [p for p in target.split("/") if p]
                    continue
                done.append(name)
                if not stat.S_ISDIR(st.st_mode):
                    return "/" + "/".join([*done, *pending])
                nxt = os.open(name, _dir_flags(), dir_fd=fd)
                os.close(fd)
                fd = nxt
            return "/" + "/".join(done)
        finally:
            os.close(fd)

    def symlink(self, path: str, target: str) -> None:
        parent, name = os.path.split(path)
        dirfd = self.open_dir(parent, create=True)
        try:
            try:
                os.symlink(target, name, dir_fd=dirfd)  # never follows an existing name: fails on it
                return
            except FileExistsError:
                pass
            st = self._clear_link(dirfd, name)
            if st is not None:
                # The image's own file under a library name we serve (a copy of a real driver library, which
                # cannot work without the driver, or a FIFO a loader would block on): ours replaces it. A folder
                # cannot be replaced silently.
                if stat.S_ISDIR(st.st_mode):
                    raise RootfsError(f"{path} in the container is a directory where FakeGPU links a library")
                os.unlink(name, dir_fd=dirfd)
            os.symlink(target, name, dir_fd=dirfd)
        finally:
            os.close(dirfd)

    def device_node(self, path: str, major: int, minor: int) -> str:
        """A character device where the kernel lets us make one, else an empty regular file; returns which."""
        parent, name = os.path.split(path)
        dirfd = self.open_dir(parent, create=True)
        try:
            if self._clear_link(dirfd, name) is not None:
                return "exists"
            try:
                os.mknod(name, 0o666 | stat.S_IFCHR, os.makedev(major, minor), dir_fd=dirfd)
                kind = "char"
            except PermissionError:
                os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o666, dir_fd=dirfd))
                kind = "file"
            # mknod honours the umask; the real nodes are world read-write.
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dirfd)
            try:
                os.chmod(f"/proc/self/fd/{fd}", 0o666)
            finally:
                os.close(fd)
            return kind
        finally:
            os.close(dirfd)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise RootfsError(f"{what}: {os.strerror(err)} ({errno.errorcode.get(err, err)})")


def bind_mount(source: str, target_fd: int, readonly: bool = True, noexec: bool = False) -> str:
    """Bind source onto the object behind target_fd, then remount it nosuid,nodev (and ro); returns the
    mount point's path as the kernel names it, for umount."""
    proc_path = f"/proc/self/fd/{target_fd}"
    _check(_libc().mount(source.encode(), proc_path.encode(), None, MS_BIND, None), f"bind {source}")
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if readonly else 0) | (
        MS_NOEXEC if noexec else 0)
    # The remount must name the new mount, which now sits on top of the same path.
    mounted = os.readlink(proc_path)
    try:
        _check(_libc().mount(None, mounted.encode(), None, flags, None), f"remount {mounted} read-only")
    except RootfsError:
        unmount(mounted)
        raise
    return mounted


def unmount(path: str) -> None:
    _libc().umount2(path.encode(), MNT_DETACH)
