"""Spec modifiers: one small class per change to a container's config.json, composed by a list.

The runtime builds the list once it knows a container asked for devices; each modifier is unit-tested on an
in-memory spec.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at every container start
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


class AddMounts:
    """Append bind mounts to config.json; a destination already mounted (a retried create) is left alone."""

    def __init__(self, mounts: list[dict[str, object]]) -> None:
        self.mounts = mounts

    def modify(self, spec: Spec) -> None:
        mounts = spec.data.setdefault("mounts", [])
        present = {m.get("destination") for m in mounts if isinstance(m, dict)}
        mounts.extend(m for m in self.mounts if m["destination"] not in present)


class AddDevices:
    """Append `linux.devices` nodes; a path already listed (by Docker's --device, or a retried create) wins."""

    def __init__(self, devices: list[dict[str, object]]) -> None:
        self.devices = devices

    def modify(self, spec: Spec) -> None:
        devices = spec.data.setdefault("linux", {}).setdefault("devices", [])
        present = {d.get("path") for d in devices if isinstance(d, dict)}
        devices.extend(d for d in self.devices if d["path"] not in present)
