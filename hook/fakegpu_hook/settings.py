"""Where the runtime and the hook find runc, the native build and their state: one JSON file plus env overrides.

The runtime runs under dockerd's environment, which users rarely control, so a file (`/etc/fakegpu/config.json`,
or $FAKEGPU_CONFIG) is the durable way to configure it; the FAKEGPU_* variables override it for tests and
one-off runs. The hook never reads its own environment for settings: the runtime resolves them once and
passes them as hook arguments, so what a container gets is visible in its config.json.
"""

from __future__ import annotations

import json
import os

from fakegpu_hook.contract import (
    CONFIG_VARIABLE,
    DEFAULT_CONFIG,
    FLAG_SETTINGS,
    HOOK_STAGES,
    INJECTIONS,
    SETTINGS,
    TRUE_WORDS,
)

# Every setting and its default (fakegpu_hook.contract). A plain class rather than a dataclass: `dataclasses`
# (with `inspect`) and `pathlib` cost milliseconds, and this module is imported at every container start.
DEFAULTS: dict[str, object] = {key: default for key, (_, default) in SETTINGS.items()}


class Settings:
    """Immutable by convention; `replace()` makes a changed copy."""

    __slots__ = tuple(DEFAULTS)
    low_level_runtime: str
    inventory: str
    honour_nvidia_env: bool
    nvidia_profile: str
    native_lib_dir: str
    nvidia_smi: str
    state_root: str
    hook_path: str
    hook_stage: str
    injection: str
    driver_version: str

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

    def inventory_spec(self) -> str:
        """The host's fake GPUs as a device spec: `inventory`, else one GPU of `nvidia_profile`."""
        return inventory_spec(self.inventory, self.nvidia_profile)

    def resolved(self) -> Settings:
        from fakegpu.locations import NATIVE_LIB_DIR

        lib = self.native_lib_dir or NATIVE_LIB_DIR
        smi = self.nvidia_smi or os.path.join(os.path.dirname(lib.rstrip("/")), "bin", "nvidia-smi")
        return self.replace(native_lib_dir=lib, nvidia_smi=smi)


_ENV = {variable: key for key, (variable, _) in SETTINGS.items()}


def inventory_spec(inventory: str, nvidia_profile: str) -> str:
    """What a host with this `inventory` setting has: a host left unconfigured has one GPU, of the profile
    NVIDIA_VISIBLE_DEVICES gave before there were inventories."""
    return inventory or f"{nvidia_profile}:1"


DEFAULT_INVENTORY = inventory_spec(str(DEFAULTS["inventory"]), str(DEFAULTS["nvidia_profile"]))


class SettingsError(Exception):
    pass


def _coerce(name: str, value: object) -> object:
    if name in FLAG_SETTINGS:
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in TRUE_WORDS
    if not isinstance(value, str):
        raise SettingsError(f"setting {name!r} must be a string, not {type(value).__name__}")
    return value


def config_path(environ: dict[str, str] | None = None) -> str:
    """The site config file: $FAKEGPU_CONFIG, else /etc/fakegpu/config.json."""
    environ = os.environ if environ is None else environ
    return environ.get(CONFIG_VARIABLE) or DEFAULT_CONFIG


def _read_config(path: str) -> dict[str, object]:
    """The file's settings as written (missing: none); unreadable, not an object or unknown keys: errors."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise SettingsError(f"cannot read FakeGPU config {path}: {exc}") from exc
    known = set(DEFAULTS)
    if not isinstance(data, dict):
        raise SettingsError(f"FakeGPU config {path}: not a JSON object")
    if set(data) - known:
        raise SettingsError(f"FakeGPU config {path}: unknown keys {sorted(set(data) - known)}; known: "
                            f"{sorted(known)}")
    return data


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """The config file (missing is fine; unreadable or unknown keys are errors), then FAKEGPU_* overrides."""
    environ = os.environ if environ is None else environ
    path = config_path(environ)
    values = {k: _coerce(k, v) for k, v in _read_config(path).items()}
    for var, name in _ENV.items():
        if environ.get(var):
            values[name] = _coerce(name, environ[var])
    settings = Settings(**values)
    if settings.hook_stage not in HOOK_STAGES:
        raise SettingsError(f"hook_stage {settings.hook_stage!r} is not one of {HOOK_STAGES}")
    if settings.injection not in INJECTIONS:
        raise SettingsError(f"injection {settings.injection!r} is not one of {INJECTIONS}")
    if settings.driver_version:
        from fakegpu.driver import driver_version_problem, is_driver_version

        if not is_driver_version(settings.driver_version):
            raise SettingsError(f"driver_version: {driver_version_problem(settings.driver_version)}")
    return settings



class ConfigChange:
    """What update_config did, or would do: the file's text before and after ('' for no file)."""

    __slots__ = ("after", "before", "path", "written")

    def __init__(self, path: str, before: str, after: str, written: bool) -> None:
        self.path, self.before, self.after, self.written = path, before, after, written

    @property
    def changed(self) -> bool:
        return self.before != self.after


def update_config(path: str, changes: dict[str, object], dry_run: bool = False) -> ConfigChange:
    """Set (or, with None, remove) settings in the config file, keeping every other key as it was. The file is
    read by the same rules as load_settings and refused the same way; the result is validated before it is
    written; the write is atomic (a container starting meanwhile reads the old file or the new one). A file
    left with no setting is removed, so uninstalling what install added leaves no file behind."""
    if os.path.islink(path):
        raise SettingsError(f"{path} is a symlink; nothing was changed: edit the file it points to")
    before = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            before = f.read()
    original = _read_config(path)
    data = dict(original)
    for key, value in changes.items():
        if key not in DEFAULTS:
            raise SettingsError(f"unknown setting {key!r}")
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    Settings(**{k: _coerce(k, v) for k, v in data.items()})  # a type the runtime would refuse stops here
    # Unchanged settings keep their file as it is, formatting included (an empty `{}` too).
    after = before if data == original else json.dumps(data, indent=4) + "\n" if data else ""
    if dry_run or after == before:
        return ConfigChange(path, before, after, written=False)
    if not after:
        os.unlink(path)
    else:
        from fakegpu.atomic_file import write_atomic

        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
        write_atomic(path, after)
    return ConfigChange(path, before, after, written=True)
