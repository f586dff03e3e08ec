"""A CDI spec of our own kind and a podman hooks.d file: the injectors that need no registered runtime.

CDI devices carry the same hook as the runtime adds, so one hook implementation serves all three paths; its
poststop stage removes the container's host folder, which no runtime of ours deletes on these paths. The
spec names each GPU of the inventory it was written for by index and by UUID, each MIG device as GPU:MIG and by
its MIG- UUID, and `all`: `--device fakegpu.dev/gpu=GPU-...` gives the container that GPU, as
NVIDIA_VISIBLE_DEVICES would (fakegpu_hook.env reads the variables the devices set; contract.py says why one
variable per device).
"""

from __future__ import annotations

from fakegpu_hook.contract import (
    CDI_DEVICE_PREFIX,
    CDI_INVENTORY_VARIABLE,
    CONTAINER_DEVICE_TABLE,
    NVIDIA_ALL,
)
from fakegpu_hook.modifiers import AddHook

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from fakegpu.devices import Device

CDI_KIND = "fakegpu.dev/gpu"
# The oldest version that has everything the spec uses (hooks, env; ":" in device names): podman 4.3's CDI library
# ignores a spec of a version newer than it knows (0.5.0), reporting its devices as unresolvable.
CDI_VERSION = "0.5.0"


def _hook_entry(hook_path: str, args: list[str], stage: str) -> dict:
    return {"hookName": stage, "path": hook_path, "args": [hook_path, *args], "env": list(AddHook.ENV)}


def _device(name: str, key: str, entry: str) -> dict:
    return {"name": name, "containerEdits": {"env": [f"{CDI_DEVICE_PREFIX}{key}={entry}"]}}


def cdi_spec(spec: str, devices: Sequence[Device], hook_path: str, hook_args: list[str]) -> dict:
    """The spec for the inventory `spec`, whose devices (resolved with the runtime's seed) are `devices`."""
    edits = {
        "env": [f"{CDI_INVENTORY_VARIABLE}={spec}", f"FAKEGPU_DEVICE_TABLE={CONTAINER_DEVICE_TABLE}"],
        "hooks": [_hook_entry(hook_path, hook_args, "createContainer"),
                  _hook_entry(hook_path, [*hook_args, "--poststop"], "poststop")],
    }
    named = []
    for d in devices:
        # Both names of a device set one variable: asking for a GPU by index and by UUID gives it once.
        named += [_device(str(d.index), str(d.index), d.uuid), _device(d.uuid, str(d.index), d.uuid)]
        for m in d.mig or ():
            key = f"{d.index}_{m.index}"
            named += [_device(f"{d.index}:{m.index}", key, m.uuid), _device(m.uuid, key, m.uuid)]
    named.append(_device(NVIDIA_ALL, "ALL", NVIDIA_ALL))
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": named, "containerEdits": edits}


def podman_hook(hook_path: str, hook_args: list[str]) -> dict:
    """hooks.d (oci-hooks(5) version 1.0.0). `when` cannot test the environment, so the hook runs for every
    container and itself leaves alone those that ask for no devices. One file gives every stage the same
    arguments: at poststop the hook knows the stage from the OCI state's status."""
    return {
        "version": "1.0.0",
        "hook": {"path": hook_path, "args": [hook_path, *hook_args], "env": list(AddHook.ENV)},
        "when": {"always": True},
        "stages": ["createContainer", "poststop"],
    }
