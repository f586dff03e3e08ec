"""OCI bundle and state: strict loading of config.json and an atomic write-back (temp file + rename)."""

from __future__ import annotations

import json
import os

from fakegpu.atomic_file import write_atomic

# typing, pathlib and tempfile cost milliseconds at every container start; os.path does the job.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


class SpecError(Exception):
    pass


class Spec:
    """An OCI runtime spec held in memory; `path` is None for specs built in tests."""

    def __init__(self, data: dict[str, Any], path: str | Path | None = None) -> None:
        if not isinstance(data, dict):
            raise SpecError(f"{path or 'spec'}: the top level is not a JSON object")
        self.data = data
        self.path = None if path is None else os.fspath(path)

    @classmethod
    def load(cls, path: str | Path) -> Spec:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise SpecError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"{path} is not valid JSON: {exc}") from exc
        return cls(data, path)

    @property
    def env(self) -> list[str]:
        process = self.data.get("process") or {}
        env = process.get("env") or []
        if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
            raise SpecError("process.env is not a list of strings")
        return env

    def root_path(self, bundle: str | Path) -> str:
        root = (self.data.get("root") or {}).get("path")
        if not isinstance(root, str) or not root:
            raise SpecError("the spec has no root.path")
        return root if os.path.isabs(root) else os.path.join(bundle, root)

    def flush(self) -> None:
        """Write back atomically, so runc never reads half a config.json, keeping the file's mode."""
        if self.path is None:
            raise SpecError("an in-memory spec has no file to flush to")
        write_atomic(self.path, json.dumps(self.data, separators=(",", ":")))


def read_state(text: str, need_bundle: bool = True) -> dict[str, Any]:
    """The OCI state a runtime writes to a hook's stdin: id, pid, bundle are what the hook needs (at poststop
    only the id: some runtimes leave the bundle out there)."""
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"the OCI state on stdin is not JSON: {exc}") from exc
    if not isinstance(state, dict):
        raise SpecError("the OCI state on stdin is not a JSON object")
    for key in ("id", "bundle") if need_bundle else ("id",):
        if not isinstance(state.get(key), str) or not state[key]:
            raise SpecError(f"the OCI state on stdin has no {key!r}")
    if "/" in state["id"] or state["id"] in (".", ".."):
        raise SpecError(f"container id {state['id']!r} cannot name a folder")
    return state
