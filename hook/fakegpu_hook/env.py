"""The one reader of FAKEGPU_* and NVIDIA_* variables in a container's environment: what does it ask for?

FAKEGPU_DEVICES, when present, decides alone: a spec gets those devices and every library; unset, empty,
`void` or `none` (contract.OFF_VALUES) gets nothing. Without it, NVIDIA's variables are read as
nvidia-container-toolkit reads them (the rules are in contract.py): NVIDIA_VISIBLE_DEVICES selects from the
host's inventory, NVIDIA_DRIVER_CAPABILITIES says which libraries come. native/container/request.c reads
the same way. Specs are parsed by `fakegpu.devices` (the one grammar) and entries matched against the
inventory by `fakegpu.devices.select_devices`; resolve_request calls both and words their errors.
"""

from __future__ import annotations

from fakegpu_hook.contract import (
    CAPABILITIES_ALL,
    CDI_DEVICE_PREFIX,
    CDI_INVENTORY_VARIABLE,
    CUDA_VERSION_VARIABLE,
    DEFAULT_DRIVER_CAPABILITIES,
    DEVICES_VARIABLE,
    DRIVER_CAPABILITIES,
    DRIVER_VARIABLE,
    MAX_CAPABILITIES_LENGTH,
    MAX_VISIBLE_DEVICES_LENGTH,
    NVIDIA_ALL,
    NVIDIA_CAPABILITIES_VARIABLE,
    NVIDIA_DEVICES_VARIABLE,
    NVIDIA_NONE,
    NVIDIA_VOID,
    OFF_VALUES,
    REQUIRE_CUDA_VARIABLE,
    SEED_VARIABLE,
)
from fakegpu_hook.settings import DEFAULT_INVENTORY

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and collections cost milliseconds at every container start
    from collections.abc import Iterable

    from fakegpu.devices import Device

ALL_CAPABILITIES = frozenset(DRIVER_CAPABILITIES)
# The source of a request made by CDI devices, for messages.
CDI_SOURCE = "the CDI devices (fakegpu.dev/gpu)"


class RequestError(ValueError):
    """A device variable the runtime refuses (too long, an unknown capability): the message names it."""


class DeviceRequest:
    """What a container asks for. A plain class: `dataclasses` imports `inspect`, milliseconds on every
    container start.

    spec: the device spec to resolve (FAKEGPU_DEVICES, or the host's inventory); seed: FAKEGPU_SEED or None;
    source: the variable that asked, for messages; visible: None for every device of the spec, else the
    entries that select some (an empty tuple: none); capabilities: the driver capabilities granted."""

    __slots__ = ("capabilities", "seed", "source", "spec", "visible")

    def __init__(self, spec: str, seed: str | None, source: str, visible: tuple[str, ...] | None = None,
                 capabilities: frozenset[str] = ALL_CAPABILITIES) -> None:
        self.spec, self.seed, self.source = spec, seed, source
        self.visible, self.capabilities = visible, capabilities

    def _key(self) -> tuple[object, ...]:
        return (self.spec, self.seed, self.source, self.visible, self.capabilities)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceRequest):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"DeviceRequest(spec={self.spec!r}, seed={self.seed!r}, source={self.source!r}, "
                f"visible={self.visible!r}, capabilities={sorted(self.capabilities)!r})")

    def summary(self, count: int, seed: str) -> str:
        """The first line of inject.log (and hook.log); native/container/create.c writes the same."""
        if self.source == DEVICES_VARIABLE:
            return f"{count} devices from {self.source}={self.spec!r} seed={seed!r}"
        asked = NVIDIA_ALL if self.visible is None else ",".join(self.visible) or NVIDIA_NONE
        granted = ",".join(c for c in DRIVER_CAPABILITIES if c in self.capabilities)
        return (f"{count} devices from {self.source}={asked!r} of the inventory {self.spec!r} seed={seed!r} "
                f"capabilities={granted!r}")


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


def _bounded(name: str, value: str, limit: int) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:  # never echoed: the value may be a megabyte of anything
        raise RequestError(f"{name} is {size} bytes long; at most {limit}")


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def driver_capabilities(value: str | None, legacy: bool = False) -> frozenset[str]:
    """NVIDIA_DRIVER_CAPABILITIES as a set: unset or empty gives the default pair (every capability for a
    legacy CUDA image that leaves it unset), `all` gives every one; an unknown name is refused."""
    if value is None and legacy:
        return ALL_CAPABILITIES
    if value is None:
        return frozenset(DEFAULT_DRIVER_CAPABILITIES)
    _bounded(NVIDIA_CAPABILITIES_VARIABLE, value, MAX_CAPABILITIES_LENGTH)
    names = _entries(value)
    if not names:
        return frozenset(DEFAULT_DRIVER_CAPABILITIES)
    for name in names:
        if name != CAPABILITIES_ALL and name not in ALL_CAPABILITIES:
            from fakegpu.errors import shorten

            raise RequestError(f"{NVIDIA_CAPABILITIES_VARIABLE}: unknown capability {shorten(name)}; accepted: "
                               f"{', '.join((*DRIVER_CAPABILITIES, CAPABILITIES_ALL))}")
    return ALL_CAPABILITIES if CAPABILITIES_ALL in names else frozenset(names)


def cdi_entries(env: list[str]) -> list[str]:
    """The entries FakeGPU's CDI devices selected, in the order the engine applied them; a variable set twice
    counts once, with its last value (as everywhere)."""
    found: dict[str, str] = {}
    for item in env:
        if item.startswith(CDI_DEVICE_PREFIX):
            key, _, value = item.partition("=")
            found[key] = value.strip()
    return [v for v in found.values() if v]


def _cdi_request(env: list[str], entries: list[str], seed: str | None) -> DeviceRequest:
    _bounded(CDI_SOURCE, ",".join(entries), MAX_VISIBLE_DEVICES_LENGTH)
    spec = env_lookup(env, CDI_INVENTORY_VARIABLE)
    if not spec:
        raise RequestError(f"{CDI_SOURCE} were given without {CDI_INVENTORY_VARIABLE}: the CDI spec in use was "
                           "not written by this FakeGPU (`fakegpu cdi generate` writes it again)")
    visible = None if NVIDIA_ALL in entries else tuple(entries)
    return DeviceRequest(spec, seed, CDI_SOURCE, visible)


def device_request(env: Iterable[str] | None, honour_nvidia: bool = True,
                   inventory: str = DEFAULT_INVENTORY) -> DeviceRequest | None:
    """None when the container asks for nothing (runc then gets config.json untouched); raises RequestError
    for a variable the runtime refuses."""
    env = list(env or ())
    seed = env_lookup(env, SEED_VARIABLE) or None
    value = env_lookup(env, DEVICES_VARIABLE)
    if value is not None:
        if value.strip().lower() in OFF_VALUES:
            return None
        return DeviceRequest(value, seed, DEVICES_VARIABLE)
    cdi = cdi_entries(env)
    if cdi:
        return _cdi_request(env, cdi, seed)
    if not honour_nvidia:
        return None
    nvidia = env_lookup(env, NVIDIA_DEVICES_VARIABLE)
    legacy = bool(env_lookup(env, CUDA_VERSION_VARIABLE)) and not env_lookup(env, REQUIRE_CUDA_VARIABLE)
    if nvidia is None:
        entries = [NVIDIA_ALL] if legacy else []
    else:
        _bounded(NVIDIA_DEVICES_VARIABLE, nvidia, MAX_VISIBLE_DEVICES_LENGTH)
        entries = _entries(nvidia)
    if not entries or NVIDIA_VOID in entries:
        return None
    visible: tuple[str, ...] | None = tuple(entries)
    if NVIDIA_NONE in entries:
        visible = ()
    elif NVIDIA_ALL in entries:
        visible = None
    capabilities = driver_capabilities(env_lookup(env, NVIDIA_CAPABILITIES_VARIABLE), legacy)
    return DeviceRequest(inventory, seed, NVIDIA_DEVICES_VARIABLE, visible, capabilities)


def requested_driver(env: Iterable[str] | None, host_driver: str) -> str:
    """The driver a container's processes see: its own FAKEGPU_DRIVER_VERSION (the last occurrence, as
    everywhere), else the host's setting (`driver_version`), else the native build's default. Raises
    RequestError for a value that is not a driver version."""
    value = env_lookup(list(env or ()), DRIVER_VARIABLE)
    if value:
        from fakegpu.driver import driver_version_problem, is_driver_version

        if not is_driver_version(value):
            raise RequestError(f"{DRIVER_VARIABLE}: {driver_version_problem(value)}")
        return value
    if host_driver:
        return host_driver
    from fakegpu.driver import default_driver_version

    return default_driver_version()


def resolve_request(request: DeviceRequest, seed: str) -> list[Device]:
    """The devices a request gets: its spec resolved with `seed`, then NVIDIA_VISIBLE_DEVICES's selection
    from them. Raises RequestError naming the variable, or the inventory setting, at fault, with the parser's
    message (bounded by errors.shorten: containerd cuts long ones in the middle)."""
    from fakegpu.devices import resolve_devices, select_devices
    from fakegpu.errors import FakeGPUError, InvalidDeviceSpec

    try:
        devices = resolve_devices(request.spec, seed=seed)
    except FakeGPUError as exc:
        # A FAKEGPU_DEVICES spec is the container's; the inventory is the host's, from the config.
        host = isinstance(exc, InvalidDeviceSpec) and request.source == NVIDIA_DEVICES_VARIABLE
        raise RequestError(f"{'the inventory (setting inventory)' if host else request.source}: "
                           f"{exc.message}") from exc
    if request.visible is None:
        return devices
    try:
        return select_devices(devices, request.visible, request.spec)
    except FakeGPUError as exc:
        raise RequestError(f"{request.source}: {exc.message}") from exc
