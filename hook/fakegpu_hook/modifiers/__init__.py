"""Spec modifiers: one small class per change to a container's config.json, composed by a list.

The runtime builds the list once it knows a container asked for devices; each modifier is unit-tested on an
in-memory spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from fakegpu_hook.oci import Spec


class Modifier(Protocol):
    def modify(self, spec: Spec) -> None: ...


class ModifierList:
    def __init__(self, modifiers: Iterable[Modifier]) -> None:
        self.modifiers = list(modifiers)

    def modify(self, spec: Spec) -> None:
        for m in self.modifiers:
            m.modify(spec)


class AddHook:
    """Append the FakeGPU hook to one hook stage, with an explicit environment: the image's variables
    (LD_PRELOAD and friends, CVE-2025-23266) never reach a process that runs as root on the host."""

    ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")

    def __init__(self, path: str, args: list[str], stage: str = "createContainer", timeout: int = 30) -> None:
        self.path, self.args, self.stage, self.timeout = path, args, stage, timeout

    def modify(self, spec: Spec) -> None:
        hooks = spec.data.setdefault("hooks", {})
        stage = hooks.setdefault(self.stage, [])
        # A retried `create` on the same bundle must not run the hook twice.
        if any(h.get("path") == self.path for h in stage if isinstance(h, dict)):
            return
        stage.append({"path": self.path, "args": [self.path, *self.args], "env": list(self.ENV),
                      "timeout": self.timeout})


class SetEnv:
    """Set a variable in the container's process environment unless the image already sets it."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def modify(self, spec: Spec) -> None:
        env = spec.data.setdefault("process", {}).setdefault("env", [])
        if not any(e.startswith(self.name + "=") for e in env):
            env.append(f"{self.name}={self.value}")
