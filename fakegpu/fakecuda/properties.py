"""torch.cuda.get_device_properties() for a fake device: every field real PyTorch exposes, from the profile."""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.devices import Device


@dataclass(frozen=True)
class FakeCudaDeviceProperties:
    """Mirrors torch._C._CudaDeviceProperties (fields, repr); that type cannot be built from Python."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: int
    is_multi_gpu_board: int
    max_threads_per_multi_processor: int
    max_threads_per_block: int
    warp_size: int
    uuid: str
    L2_cache_size: int
    clock_rate: int
    memory_clock_rate: int
    memory_bus_width: int
    shared_memory_per_block: int
    shared_memory_per_multiprocessor: int
    shared_memory_per_block_optin: int
    regs_per_multiprocessor: int
    pci_bus_id: int
    pci_device_id: int
    pci_domain_id: int

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, multi_processor_count={self.multi_processor_count}, "
            f"uuid={self.uuid}, pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
            f"pci_domain_id={self.pci_domain_id}, L2_cache_size={self.L2_cache_size // (1 << 20)}MB)"
        )


def device_properties(device: Device) -> FakeCudaDeviceProperties:
    p = device.profile
    data = p.data
    major, minor = p.compute_capability
    limits = data["sm_limits"]
    clocks = data.get("clocks_mhz", {})
    memory = data["memory"]
    return FakeCudaDeviceProperties(
        name=p.name,
        major=major,
        minor=minor,
        total_memory=p.cuda_total_bytes,
        multi_processor_count=p.sm_count,
        is_integrated=0,
        is_multi_gpu_board=0,
        max_threads_per_multi_processor=limits["max_threads_per_sm"],
        max_threads_per_block=limits["max_threads_per_block"],
        warp_size=limits["warp_size"],
        # cudaDeviceProp.uuid prints without NVML's "GPU-" prefix
        uuid=device.uuid.removeprefix("GPU-"),
        L2_cache_size=data["l2_cache_bytes"],
        # cudaDeviceProp reports clocks in kHz
        clock_rate=clocks.get("boost", 0) * 1000,
        memory_clock_rate=clocks.get("memory", 0) * 1000,
        memory_bus_width=memory.get("bus_width_bits", 0),
        shared_memory_per_block=limits["shared_memory_per_block_bytes"],
        shared_memory_per_multiprocessor=limits["shared_memory_per_sm_bytes"],
        shared_memory_per_block_optin=limits["shared_memory_per_block_optin_bytes"],
        regs_per_multiprocessor=limits["registers_per_sm"],
        pci_bus_id=device.pci_bus,
        pci_device_id=device.pci_device,
        pci_domain_id=device.pci_domain,
    )
