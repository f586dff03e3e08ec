"""Where the runtime and the hook find runc, the native build and their state: one JSON file plus env overrides.

The runtime runs under dockerd's environment, which users rarely control, so a file (`/etc/fakegpu/config.json`,
or $FAKEGPU_CONFIG) is the durable way to configure it; the FAKEGPU_* variables override it for tests and
one-off runs. The hook never reads its own environment for settings: the runtime resolves them once and
passes them as hook arguments, so what a container gets is visible in its config.json.
"""

from __future__ import annotations

import json
import os

DEFAULT_CONFIG = "/etc/fakegpu/config.json"
HOOK_STAGES = ("createContainer", "prestart")
# runtime: the runtime prepares the root and hands runc the bind mounts and device nodes in config.json (one
# Python process per container start); hook: the runtime adds fakegpu-hook, which does it all inside runc.
INJECTIONS = ("runtime", "hook")


def _repo_native_lib() -> str:
    import fakegpu

    checkout = os.path.dirname(os.path.dirname(os.path.realpath(fakegpu.__file__)))
    return os.path.join(checkout, "native", "build", "lib")


# Every setting and its default. A plain class rather than a dataclass: `dataclasses` (with `inspect`) and
# `pathlib` cost milliseconds, and this module is imported at every container start.
DEFAULTS: dict[str, object] = {
    "low_level_runtime": "runc",
    # The NVIDIA runtime's variables are only honoured on request: an image written for real GPUs should not
    # silently get fake ones on a host that also has the FakeGPU runtime as default.
    "honour_nvidia_env": False,
    "nvidia_profile": "a100",
    "native_lib_dir": "",
    "nvidia_smi": "",
    "state_root": "/run/fakegpu",
    "hook_path": "",
    "hook_stage": "createContainer",
    "injection": "runtime",
}


class Settings:
    """Immutable by convention; `replace()` makes a changed copy."""

    __slots__ = tuple(DEFAULTS)
    low_level_runtime: str
    honour_nvidia_env: bool
    nvidia_profile: str
    native_lib_dir: str
    nvidia_smi: str
    state_root: str
    hook_path: str
    hook_stage: str
    injection: str

    def __init__(self, **values: object) -> None:
        unknown = set(values) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown settings {sorted(unknown)}")
        for name, default in DEFAULTS.items():
            object.__setattr__(self, name, values.get(name, default))

    def replace(self, **changes: object) -> Settings:
        return Settings(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in DEFAULTS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().items()))

    def __repr__(self) -> str:
        return "Settings(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def resolved(self) -> Settings:
        lib = self.native_lib_dir or _repo_native_lib()
        smi = self.nvidia_smi or os.path.join(os.path.dirname(lib.rstrip("/")), "bin", "nvidia-smi")
        return self.replace(native_lib_dir=lib, nvidia_smi=smi)


_ENV = {
    "FAKEGPU_LOW_LEVEL_RUNTIME": "low_level_runtime",
    "FAKEGPU_HONOUR_NVIDIA_ENV": "honour_nvidia_env",
    "FAKEGPU_NVIDIA_PROFILE": "nvidia_profile",
    "FAKEGPU_NATIVE_DIR": "native_lib_dir",
    "FAKEGPU_NVIDIA_SMI": "nvidia_smi",
    "FAKEGPU_STATE_ROOT": "state_root",
    "FAKEGPU_HOOK_PATH": "hook_path",
    "FAKEGPU_HOOK_STAGE": "hook_stage",
    "FAKEGPU_INJECTION": "injection",
}


class SettingsError(Exception):
    pass


def _coerce(name: str, value: object) -> object:
    if name == "honour_nvidia_env":
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    if not isinstance(value, str):
        raise SettingsError(f"setting {name!r} must be a string, not {type(value).__name__}")
    return value


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """The config file (missing is fine; unreadable or unknown keys are errors), then FAKEGPU_* overrides."""
    environ = os.environ if environ is None else environ
    path = environ.get("FAKEGPU_CONFIG") or DEFAULT_CONFIG
    values: dict[str, object] = {}
    known = set(DEFAULTS)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise SettingsError(f"cannot read FakeGPU config {path}: {exc}") from exc
        if not isinstance(data, dict) or set(data) - known:
            raise SettingsError(f"FakeGPU config {path}: unknown keys {sorted(set(data) - known)}; known: "
                                f"{sorted(known)}")
        values.update({k: _coerce(k, v) for k, v in data.items()})
    for var, name in _ENV.items():
        if environ.get(var):
            values[name] = _coerce(name, environ[var])
    settings = Settings(**values)
    if settings.hook_stage not in HOOK_STAGES:
        raise SettingsError(f"hook_stage {settings.hook_stage!r} is not one of {HOOK_STAGES}")
    if settings.injection not in INJECTIONS:
        raise SettingsError(f"injection {settings.injection!r} is not one of {INJECTIONS}")
    return settings


# Where things appear inside a container. /run/fakegpu is the shims' default state folder; processes started
# by `docker exec` do not get the FAKEGPU_DEVICE_TABLE the runtime adds to the container's main process.
CONTAINER_DIR = "/run/fakegpu"
CONTAINER_DEVICE_TABLE = CONTAINER_DIR + "/devices.tbl"
CONTAINER_CATALOG_TABLE = CONTAINER_DIR + "/catalog.tbl"
CONTAINER_NVIDIA_SMI = "/usr/bin/nvidia-smi"
