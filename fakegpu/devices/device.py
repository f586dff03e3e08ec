"""One fake GPU: a profile plus the identity a real board has in a machine (index, UUID, PCI address, serial,
minor number).

Identities are derived from (seed, index, profile id) with SHA-256, so the same spec and seed give the same
devices on every run and every host, and FAKEGPU_SEED (e.g. a node rank) gives each node its own.
"""

from __future__ import annotations

from fakegpu.devices.identity import digest, uuid_text
from fakegpu.profiles import Profile

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on the hook's path, at every container start
    from typing import Any

    from fakegpu.devices.mig import MigInstance

# What every GPU UUID starts with, as NVML prints them.
UUID_PREFIX = "GPU-"
# PCI bus numbers of the eight GPUs in an HGX/DGX baseboard, in NVML's index order; larger specs take the
# next PCI domain, as multi-domain hosts do.
_BUS_NUMBERS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


class Device:
    """Immutable by convention. A plain class, not a dataclass: `dataclasses` pulls in `inspect`, which would
    add milliseconds to every container start through the hook."""

    __slots__ = ("index", "mig", "minor_number", "pci_bus", "pci_device", "pci_domain", "pci_function", "profile",
                 "serial", "uuid")

    def __init__(self, index: int, profile: Profile, uuid: str, serial: str, pci_domain: int, pci_bus: int,
                 pci_device: int = 0, pci_function: int = 0, minor_number: int | None = None,
                 mig: tuple[MigInstance, ...] | None = None) -> None:
        self.index = index
        # None: MIG mode off; a tuple (possibly empty): MIG mode on, with these GPU instances.
        self.mig = mig
        # The N of /dev/nvidiaN: the host's index, which a container that sees a subset keeps (renumbered()).
        self.minor_number = index if minor_number is None else minor_number
        self.profile = profile
        self.uuid = uuid
        self.serial = serial
        self.pci_domain = pci_domain
        self.pci_bus = pci_bus
        self.pci_device = pci_device
        self.pci_function = pci_function

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.index, self.uuid) == (other.index, other.uuid)

    def __hash__(self) -> int:
        return hash((self.index, self.uuid))

    def __repr__(self) -> str:
        return f"Device(index={self.index}, profile={self.profile.id!r}, uuid={self.uuid!r})"

    @classmethod
    def create(cls, index: int, profile: Profile, seed: str) -> Device:
        d = digest(f"fakegpu:{seed}:{index}:{profile.id}")
        uuid, h = uuid_text(UUID_PREFIX, d), d.hex()
        # Real serials are 13 decimal digits starting with 1 (e.g. 1650521004857).
        serial = "1" + str(int(h[32:48], 16) % 10**12).zfill(12)
        domain, slot = divmod(index, len(_BUS_NUMBERS))
        return cls(index, profile, uuid, serial, pci_domain=domain, pci_bus=_BUS_NUMBERS[slot])

    def renumbered(self, index: int) -> Device:
        """This GPU as a container that sees a subset of the host's numbers it: a new index, the same board
        (UUID, serial, PCI address, minor number), as NVML in a container under NVIDIA's runtime reports it."""
        return Device(index, self.profile, self.uuid, self.serial, self.pci_domain, self.pci_bus, self.pci_device,
                      self.pci_function, self.minor_number, self.mig)

    def with_mig(self, mig: tuple[MigInstance, ...] | None) -> Device:
        """This board with MIG mode on and these instances (None: MIG mode off)."""
        return Device(self.index, self.profile, self.uuid, self.serial, self.pci_domain, self.pci_bus,
                      self.pci_device, self.pci_function, self.minor_number, mig)

    @property
    def mig_layout(self) -> str | None:
        """The layout as the spec grammar writes it, in GPU instance order; None when MIG mode is off."""
        return None if self.mig is None else "+".join(m.profile.name for m in self.mig)

    @property
    def pci_bus_id(self) -> str:
        """NVML's busId form: 8-digit domain, as nvidia-smi prints it."""
        return f"{self.pci_domain:08X}:{self.pci_bus:02X}:{self.pci_device:02X}.{self.pci_function:X}"

    @property
    def pci_bus_id_legacy(self) -> str:
        """NVML's busIdLegacy form (4-digit domain), as sysfs and torch print it."""
        return f"{self.pci_domain:04X}:{self.pci_bus:02X}:{self.pci_device:02X}.{self.pci_function:X}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "profile": self.profile.id,
            "name": self.profile.name,
            "uuid": self.uuid,
            "serial": self.serial,
            "pci_bus_id": self.pci_bus_id,
            "minor_number": self.minor_number,
            "memory_total_bytes": self.profile.memory_total_bytes,
            "compute_capability": self.profile.data["compute_capability"],
            **({} if self.mig is None else {"mig": [m.to_dict() for m in self.mig]}),
        }
