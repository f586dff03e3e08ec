"""Fake devices: THE parser of FAKEGPU_DEVICES and the device table the native shims read."""

from fakegpu.devices.device import Device
from fakegpu.devices.spec import DEFAULT_SEED, MAX_DEVICES, effective_seed, parse_spec, resolve_devices

__all__ = ["DEFAULT_SEED", "MAX_DEVICES", "Device", "effective_seed", "parse_spec", "resolve_devices"]
