"""The one reader of FAKEGPU_* and NVIDIA_* variables in a container's environment: does it ask for devices?

Unset, or one of contract.OFF_VALUES, means hands off, as for the NVIDIA runtime. The spec itself is validated
by `fakegpu.devices` (the one grammar), not here.
"""

from __future__ import annotations

from fakegpu_hook.contract import DEVICES_VARIABLE, NVIDIA_DEVICES_VARIABLE, OFF_VALUES, SEED_VARIABLE

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and collections cost milliseconds at every container start
    from collections.abc import Iterable


class DeviceRequest:
    """spec, seed, and source (the variable that asked, for messages). A plain class: `dataclasses` imports
    `inspect`, milliseconds on every container start."""

    __slots__ = ("seed", "source", "spec")

    def __init__(self, spec: str, seed: str | None, source: str) -> None:
        self.spec, self.seed, self.source = spec, seed, source

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceRequest):
            return NotImplemented
        return (self.spec, self.seed, self.source) == (other.spec, other.seed, other.source)

    def __hash__(self) -> int:
        return hash((self.spec, self.seed, self.source))

    def __repr__(self) -> str:
        return f"DeviceRequest(spec={self.spec!r}, seed={self.seed!r}, source={self.source!r})"


def env_lookup(env: Iterable[str], name: str) -> str | None:
    """The last NAME=value wins: runc sets process.env in order, one entry overwriting an earlier one of the same
    name, so that is what the container's process sees (containerd's CRI puts the image's ENV first and the
    pod's env after it)."""
    prefix = name + "="
    found = None
    for entry in env:
        if entry.startswith(prefix):
            found = entry[len(prefix):]
    return found


def _nvidia_spec(value: str, profile: str) -> str:
    # 'all' and each listed index/UUID become one device of the configured profile: images written for the
    # NVIDIA runtime then see as many GPUs as they asked for.
    if value == "all":
        return f"{profile}:1"
    count = len([v for v in value.split(",") if v.strip()])
    return f"{profile}:{max(count, 1)}"


def device_request(env: Iterable[str] | None, honour_nvidia: bool = False,
                   nvidia_profile: str = "a100") -> DeviceRequest | None:
    env = list(env or ())
    seed = env_lookup(env, SEED_VARIABLE) or None
    value = env_lookup(env, DEVICES_VARIABLE)
    if value is not None:
        if value.strip().lower() in OFF_VALUES:
            return None
        return DeviceRequest(value, seed, DEVICES_VARIABLE)
    if honour_nvidia:
        nvidia = env_lookup(env, NVIDIA_DEVICES_VARIABLE)
        if nvidia is not None and nvidia.strip().lower() not in OFF_VALUES:
            return DeviceRequest(_nvidia_spec(nvidia.strip().lower(), nvidia_profile), seed,
                                 NVIDIA_DEVICES_VARIABLE)
    return None
