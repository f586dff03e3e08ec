"""A cubin: NVIDIA's device code as an ELF file (e_machine EM_CUDA). Per kernel, the resources the hardware gives
it, read where the driver reads them: the register count, frame and stack sizes from the `.nv.info` attributes
(EIATTR_*), shared memory from the size of `.nv.shared.<kernel>`, local memory from `.nv.local.<kernel>`, the
parameter bank from `.nv.constant0.<kernel>`, launch bounds from `.nv.info.<kernel>`; the SM architecture from
e_flags, and whether it is an arch-specific (`sm_90a`) image from `.nv.compat`."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from fakegpu.analyze.elf import EM_CUDA, ElfLayout, NotELF, parse_layout, symbol_table

# .nv.info formats: 1 no value, 2 a byte, 3 a 16-bit value, 4 a sized blob (u16 size, then the bytes).
_EIFMT_SVAL = 4
# The attributes read here (their numbers as cuobjdump -elf names them).
EIATTR_PARAM_CBANK = 0x0A
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_REQNTID = 0x10
EIATTR_MAX_THREADS = 0x05
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
STO_CUDA_ENTRY = 0x10  # st_other of a kernel's symbol
EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET = 0x09  # in .nv.compat: 1 for an arch-specific (`a`) image
# e_flags: ELF ABI version 8 (CUDA 12.8 on) holds the SM in bits 8-15, with 0x8 marking an arch-specific image as
# CUDA 12.8 writes it (CUDA 13 says so in .nv.compat instead); before, the SM is in bits 0-7, 0x800 the marker.
_V7_ACCELERATOR = 0x800
_V8_ACCELERATOR = 0x8


class CubinError(ValueError):
    """An ELF file that claims to be a cubin but whose tables cannot be read."""


@dataclass
class KernelResources:
    name: str
    registers: int | None = None
    shared_bytes: int = 0  # static shared memory; dynamic shared memory is the launch's
    local_bytes: int = 0
    stack_bytes: int | None = None
    frame_bytes: int | None = None
    param_bytes: int | None = None  # the kernel's parameters (EIATTR_CBANK_PARAM_SIZE)
    constant0_bytes: int = 0  # the parameter bank as cuobjdump's CONSTANT[0] counts it
    max_threads: list[int] | None = None  # __launch_bounds__'s first argument / .maxntid
    required_threads: list[int] | None = None  # .reqntid
    max_registers: int | None = None  # what ptxas was held to (launch bounds, -maxrregcount)
    code_bytes: int = 0


@dataclass
class Cubin:
    sm: int  # 80 for sm_80
    variant: str  # "" or "a" (arch-specific; family images read as plain, see arch)
    abi_version: int
    kernels: list[KernelResources] = field(default_factory=list)
    constant_bytes: dict[str, int] = field(default_factory=dict)  # module banks: .nv.constant3 (__constant__), ...
    global_bytes: int = 0
    # The system's per-block shared reservation made explicit in the binary (a `.nv.reservedSmem.*` symbol, as
    # nvcc writes for sm_90 on): a kernel's shared section then starts with it rather than the driver adding it.
    reserved_shared_in_binary: bool = False

    @property
    def arch(self) -> str:
        return f"sm_{self.sm}{self.variant}"


def attributes(blob: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(attribute, value) pairs of an .nv.info or .nv.compat section: a blob for sized values, else the number."""
    offset = 0
    while offset + 4 <= len(blob):
        fmt, attr = blob[offset], blob[offset + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", blob, offset + 2)
            if offset + 4 + size > len(blob):
                raise CubinError(f"an attribute (0x{attr:02x}) runs past the end of its section")
            yield attr, blob[offset + 4:offset + 4 + size]
            offset += 4 + size
        elif 1 <= fmt <= 3:
            value = blob[offset + 2] if fmt == 2 else struct.unpack_from("<H", blob, offset + 2)[0]
            yield attr, value
            offset += 4
        else:
            raise CubinError(f"unknown attribute format {fmt} at offset {offset}")


def _words(value: bytes | int) -> list[int]:
    return list(struct.unpack_from(f"<{len(value) // 4}I", value)) if isinstance(value, bytes) else [value]


def _arch(layout: ElfLayout) -> tuple[int, str]:
    if layout.abi_version >= 8:
        sm, variant = (layout.flags >> 8) & 0xFF, "a" if layout.flags & _V8_ACCELERATOR else ""
        compat = layout.named(".nv.compat")
        if compat is not None:
            for attr, value in attributes(layout.data(compat)):
                if attr == EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET and value == 1:
                    variant = "a"
        return sm, variant
    return layout.flags & 0xFF, "a" if layout.flags & _V7_ACCELERATOR else ""


def parse_cubin(blob: bytes, label: str = "<cubin>") -> Cubin:
    """The cubin's architecture and per-kernel resources. NotELF when `blob` is not an ELF image, CubinError when
    it is an ELF file but not a readable cubin."""
    layout = parse_layout(blob, label)
    if layout.machine != EM_CUDA:
        raise NotELF(f"{label}: an ELF file for machine {layout.machine}, not a cubin (EM_CUDA={EM_CUDA})")
    # PROGBITS, SYMTAB and STRTAB hold file bytes; NOBITS and NVIDIA's own types (0x7000000A for debug shared
    # memory in a relocatable cubin) need not
    if any(s.offset + s.size > len(blob) and s.kind in (1, 2, 3) for s in layout.sections):
        raise CubinError(f"{label}: a section runs past the end of the file (truncated or corrupt)")
    try:
        return _read(layout)
    except (struct.error, IndexError) as exc:
        raise CubinError(f"{label}: unreadable cubin tables ({exc})") from exc


def _read(layout: ElfLayout) -> Cubin:
    sm, variant = _arch(layout)
    cubin = Cubin(sm, variant, layout.abi_version)
    symbols = symbol_table(layout)
    cubin.reserved_shared_in_binary = any(s.name.startswith(".nv.reservedSmem") for s in symbols)
    by_name = {s.name: s for s in layout.sections}
    per_symbol: dict[str, dict[int, int]] = {}
    common = by_name.get(".nv.info")
    if common is not None:
        for attr, value in attributes(layout.data(common)):
            if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE):
                index, amount = _words(value)[:2]
                if index < len(symbols):
                    per_symbol.setdefault(symbols[index].name, {})[attr] = amount
    # Kernels are the entry symbols; a relocatable cubin gives its device functions .nv.info sections too.
    entries = {s.name for s in symbols if s.other & STO_CUDA_ENTRY}
    for section in layout.sections:
        if not section.name.startswith(".nv.info."):
            continue
        name = section.name[len(".nv.info."):]
        if symbols and name not in entries:
            continue
        facts = per_symbol.get(name, {})
        kernel = KernelResources(name, registers=facts.get(EIATTR_REGCOUNT),
                                 stack_bytes=facts.get(EIATTR_MIN_STACK_SIZE, facts.get(EIATTR_MAX_STACK_SIZE)),
                                 frame_bytes=facts.get(EIATTR_FRAME_SIZE))
        for attr, value in attributes(layout.data(section)):
            if attr == EIATTR_MAX_THREADS:
                kernel.max_threads = _words(value)
            elif attr == EIATTR_REQNTID:
                kernel.required_threads = _words(value)
            elif attr == EIATTR_MAXREG_COUNT and isinstance(value, int):
                kernel.max_registers = value
            elif attr == EIATTR_CBANK_PARAM_SIZE and isinstance(value, int):
                kernel.param_bytes = value
        for prefix, slot in ((".nv.shared.", "shared_bytes"), (".nv.local.", "local_bytes"),
                             (".nv.constant0.", "constant0_bytes"), (".text.", "code_bytes")):
            found = by_name.get(prefix + name)
            if found is not None:
                setattr(kernel, slot, found.size)
        cubin.kernels.append(kernel)
    for section in layout.sections:
        if section.name.startswith(".nv.constant") and "." not in section.name[len(".nv.constant"):]:
            cubin.constant_bytes[section.name[1:]] = section.size  # module-wide banks, e.g. nv.constant3
        elif section.name == ".nv.global":
            cubin.global_bytes = section.size
    cubin.kernels.sort(key=lambda k: k.name)
    return cubin
