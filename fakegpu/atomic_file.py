"""Replace a file atomically: write a temporary file beside it, then rename it over the target.

A reader (runc reading config.json, dockerd reading daemon.json, a shim reading the device table) sees the
old file or the new one, never half of one, and a failure leaves the old file and no temporary behind.
Standard library only and cheap to import: the container runtime uses it at every container `create`.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on the container runtime's path
    from os import PathLike


def write_atomic(path: str | PathLike[str], data: str | bytes, mode: int | None = None) -> None:
    """Replace `path` with `data`. `mode` defaults to the existing file's permissions, else 0o644."""
    path = os.fspath(path)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    try:
        _write(path, data, mode)
    except OSError as exc:
        ours = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.")
        if not (isinstance(exc.filename, str) and exc.filename.startswith(ours) and exc.filename.endswith(".tmp")):
            raise
        # The error names our temporary file (.x.123.0.tmp), which the user never named and which is gone;
        # say it of the file they asked for.
        raise type(exc)(exc.errno, exc.strerror, path) from exc


def _write(path: str, data: str | bytes, mode: int) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    for attempt in range(100):
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.{attempt}.tmp")
        try:
            # O_EXCL|O_NOFOLLOW: never write through a link or into someone else's temporary file.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"cannot make a temporary file beside {path}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            # On disk before the rename: a crash then leaves the old file or the new one, never a torn one.
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
