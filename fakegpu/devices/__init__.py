"""Fake devices: THE parser of FAKEGPU_DEVICES and the device table the native shims read."""

from fakegpu.devices.device import Device
from fakegpu.devices.select import select_devices
from fakegpu.devices.spec import (
    DEFAULT_DEVICES,
    DEFAULT_SEED,
    MAX_DEVICES,
    MAX_SEED_LENGTH,
    MAX_SPEC_LENGTH,
    check_seed,
    effective_seed,
    parse_spec,
    resolve_devices,
)

__all__ = ["DEFAULT_DEVICES", "DEFAULT_SEED", "MAX_DEVICES", "MAX_SEED_LENGTH", "MAX_SPEC_LENGTH", "Device",
           "check_seed", "effective_seed", "parse_spec", "resolve_devices", "select_devices"]
