"""Where the runtime and the hook find runc, the native build and their state: one JSON file plus env overrides.

The runtime runs under dockerd's environment, which users rarely control, so a file (`/etc/fakegpu/config.json`,
or $FAKEGPU_CONFIG) is the durable way to configure it; the FAKEGPU_* variables override it for tests and
one-off runs. The hook never reads its own environment for settings: the runtime resolves them once and
passes them as hook arguments, so what a container gets is visible in its config.json.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

DEFAULT_CONFIG = "/etc/fakegpu/config.json"
HOOK_STAGES = ("createContainer", "prestart")


def _repo_native_lib() -> str:
    import fakegpu

    return str(Path(fakegpu.__file__).resolve().parents[1] / "native" / "build" / "lib")


@dataclass(frozen=True)
class Settings:
    low_level_runtime: str = "runc"
    # The NVIDIA runtime's variables are only honoured on request: an image written for real GPUs should not
    # silently get fake ones on a host that also has the FakeGPU runtime as default.
    honour_nvidia_env: bool = False
    nvidia_profile: str = "a100"
    native_lib_dir: str = ""
    nvidia_smi: str = ""
    state_root: str = "/run/fakegpu"
    hook_path: str = ""
    hook_stage: str = "createContainer"

    def resolved(self) -> Settings:
        lib = self.native_lib_dir or _repo_native_lib()
        smi = self.nvidia_smi or str(Path(lib).parent / "bin" / "nvidia-smi")
        return replace(self, native_lib_dir=lib, nvidia_smi=smi)


_ENV = {
    "FAKEGPU_LOW_LEVEL_RUNTIME": "low_level_runtime",
    "FAKEGPU_HONOUR_NVIDIA_ENV": "honour_nvidia_env",
    "FAKEGPU_NVIDIA_PROFILE": "nvidia_profile",
    "FAKEGPU_NATIVE_DIR": "native_lib_dir",
    "FAKEGPU_NVIDIA_SMI": "nvidia_smi",
    "FAKEGPU_STATE_ROOT": "state_root",
    "FAKEGPU_HOOK_PATH": "hook_path",
    "FAKEGPU_HOOK_STAGE": "hook_stage",
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
    path = Path(environ.get("FAKEGPU_CONFIG") or DEFAULT_CONFIG)
    values: dict[str, object] = {}
    known = {f.name for f in fields(Settings)}
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SettingsError(f"cannot read FakeGPU config {path}: {exc}") from exc
        if not isinstance(data, dict) or set(data) - known:
            raise SettingsError(f"FakeGPU config {path}: unknown keys {sorted(set(data) - known)}; known: "
                                f"{sorted(known)}")
        values.update({k: _coerce(k, v) for k, v in data.items()})
    for var, name in _ENV.items():
        if environ.get(var):
            values[name] = _coerce(name, environ[var])
    settings = Settings(**values)  # type: ignore[arg-type]
    if settings.hook_stage not in HOOK_STAGES:
        raise SettingsError(f"hook_stage {settings.hook_stage!r} is not one of {HOOK_STAGES}")
    return settings


# Where things appear inside a container. /run/fakegpu is the shims' default state folder; processes started
# by `docker exec` do not get the FAKEGPU_DEVICE_TABLE the runtime adds to the container's main process.
CONTAINER_DIR = "/run/fakegpu"
CONTAINER_DEVICE_TABLE = CONTAINER_DIR + "/devices.tbl"
CONTAINER_CATALOG_TABLE = CONTAINER_DIR + "/catalog.tbl"
CONTAINER_NVIDIA_SMI = "/usr/bin/nvidia-smi"
