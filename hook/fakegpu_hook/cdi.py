"""A CDI spec of our own kind and a podman hooks.d file: the injectors that need no registered runtime.

CDI devices carry the same hook as the runtime adds, so one hook implementation serves all three paths.
`fakegpu.dev/gpu=all` gives every device of the spec. `fakegpu.dev/gpu=N` is accepted and recorded in the
container's environment, but the container still sees the whole spec: the device table is per container.
"""

from __future__ import annotations

from fakegpu_hook.contract import CONTAINER_DEVICE_TABLE
from fakegpu_hook.modifiers import AddHook

CDI_KIND = "fakegpu.dev/gpu"
CDI_VERSION = "0.6.0"


def _hook_entry(hook_path: str, args: list[str], stage: str) -> dict:
    return {"hookName": stage, "path": hook_path, "args": [hook_path, *args], "env": list(AddHook.ENV)}


def cdi_spec(spec: str, count: int, hook_path: str, hook_args: list[str]) -> dict:
    edits = {
        "env": [f"FAKEGPU_DEVICES={spec}", f"FAKEGPU_DEVICE_TABLE={CONTAINER_DEVICE_TABLE}"],
        "hooks": [_hook_entry(hook_path, hook_args, "createContainer")],
    }
    # CDI rejects a device with no edits; these variables record which names were asked for.
    devices = [{"name": str(i), "containerEdits": {"env": [f"FAKEGPU_CDI_DEVICE_{i}=1"]}} for i in range(count)]
    devices.append({"name": "all", "containerEdits": {"env": ["FAKEGPU_CDI_DEVICE_ALL=1"]}})
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices, "containerEdits": edits}


def podman_hook(hook_path: str, hook_args: list[str]) -> dict:
    """hooks.d (oci-hooks(5) version 1.0.0). `when` cannot test the environment, so the hook runs for every
    container and itself leaves alone those that ask for no devices."""
    return {
        "version": "1.0.0",
        "hook": {"path": hook_path, "args": [hook_path, *hook_args], "env": list(AddHook.ENV)},
        "when": {"always": True},
        "stages": ["createContainer"],
    }
