"""Register the FakeGPU runtime in Docker's daemon.json and reload dockerd.

Every key we do not own is kept as it was; the write is atomic (temp file + rename) with a one-time backup
of the original; installing twice changes nothing; a dry run returns the diff and writes nothing.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.atomic_file import write_atomic

DEFAULT_DAEMON_JSON = Path("/etc/docker/daemon.json")
DEFAULT_PID_FILE = Path("/var/run/docker.pid")


class DaemonConfigError(Exception):
    pass


@dataclass(frozen=True)
class Change:
    path: Path
    changed: bool
    diff: str
    written: bool = False
    reloaded: str = ""


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        # Replacing the link would cut the file off from whatever manages it; writing through it would change a
        # file elsewhere. Neither is ours to decide.
        raise DaemonConfigError(f"{path} is a symlink to {os.readlink(path)}; nothing was changed: pass the file "
                                f"itself with --config")


def load(path: Path) -> dict[str, Any]:
    path = Path(path)
    _refuse_link(path)
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonConfigError(f"{path} is not valid JSON ({exc}); fix or move it, nothing was changed") from exc
    if not isinstance(data, dict):
        raise DaemonConfigError(f"{path} is not a JSON object; nothing was changed")
    return data


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=4) + "\n"


def with_runtime(data: dict[str, Any], name: str, runtime_path: str, set_default: bool) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    runtimes = out.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise DaemonConfigError("'runtimes' in daemon.json is not an object")
    entry = dict(runtimes.get(name) or {})
    entry["path"] = runtime_path
    runtimes[name] = entry
    if set_default:
        out["default-runtime"] = name
    return out


def without_runtime(data: dict[str, Any], name: str) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    runtimes = out.get("runtimes")
    if isinstance(runtimes, dict):
        runtimes.pop(name, None)
        if not runtimes:
            del out["runtimes"]
    if out.get("default-runtime") == name:
        del out["default-runtime"]
    return out


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def reload_daemon(pid_file: Path = DEFAULT_PID_FILE) -> str:
    """SIGHUP reloads `runtimes` and `default-runtime` without stopping containers."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGHUP)
        return f"sent SIGHUP to dockerd (pid {pid})"
    except (OSError, ValueError):
        pass
    if shutil.which("systemctl"):
        result = subprocess.run(["systemctl", "reload", "docker"], capture_output=True, text=True)
        if result.returncode == 0:
            return "ran systemctl reload docker"
    raise DaemonConfigError(f"could not reload dockerd (no pid in {pid_file}, no systemctl): reload it yourself")


def apply(path: Path, new: dict[str, Any], dry_run: bool, reload: bool, pid_file: Path = DEFAULT_PID_FILE) -> Change:
    path = Path(path)
    _refuse_link(path)
    old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    old = load(path)
    if new == old:
        return Change(path, changed=False, diff="")
    new_text = render(new)
    backup = path.with_name(path.name + ".fakegpu.bak")
    if backup.exists():
        # Uninstalling back to the original content restores the original bytes, formatting included.
        try:
            if json.loads(backup.read_text(encoding="utf-8")) == new:
                new_text = backup.read_text(encoding="utf-8")
        except ValueError:
            pass
    diff = "".join(difflib.unified_diff((render(old) if old_text.strip() else "").splitlines(True),
                                        new_text.splitlines(True), str(path), f"{path} (new)"))
    if dry_run:
        return Change(path, changed=True, diff=diff)
    made_backup = bool(old_text) and not backup.exists()
    if made_backup:
        _write_atomic(backup, old_text)
    try:
        _write_atomic(path, new_text)
    except BaseException:
        if made_backup:  # nothing half-done: the original stays, and so does no new file beside it
            backup.unlink(missing_ok=True)
        raise
    reloaded = reload_daemon(pid_file) if reload else ""
    return Change(path, changed=True, diff=diff, written=True, reloaded=reloaded)
