"""Just enough of an ELF64 little-endian file for linkage questions: its DT_NEEDED, RPATH/RUNPATH and SONAME, its
section names (a `.nv_fatbin` section holds CUDA device code), the names of the symbols it defines and of those
it exports; and, for analyze-kernel, its header and section table (`read_layout` from a file, `parse_layout` from
bytes: a cubin found inside a fatbinary), with which a reader takes the one section it wants. Standard library
only; reads the headers and the tables it needs, not the whole file."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

_SHT_SYMTAB, _SHT_DYNAMIC, _SHT_DYNSYM = 2, 6, 11
_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 1, 14, 15, 29
_SHN_UNDEF, _SHN_ABS = 0, 0xFFF1
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STV_DEFAULT, _STV_PROTECTED = 0, 3


class NotELF(ValueError):
    """The file is not an ELF64 little-endian object (a script, a 32-bit or big-endian binary, or too short)."""


@dataclass
class ElfInfo:
    path: Path
    needed: list[str] = field(default_factory=list)
    soname: str | None = None
    search_path: list[str] = field(default_factory=list)  # RUNPATH, else RPATH, $ORIGIN not expanded
    defined: set[str] = field(default_factory=set)  # symbols defined here (.symtab and .dynsym)
    # what the dynamic linker can bind to: .dynsym's defined global or weak symbols of default or protected
    # visibility (the ABS symbols a version script adds, one per version node, are not exports)
    exported: set[str] = field(default_factory=set)
    has_symtab: bool = False
    sections: set[str] = field(default_factory=set)  # section names, e.g. ".nv_fatbin"


EM_CUDA = 190  # e_machine of a cubin (NVIDIA's device code as an ELF file)
SHT_NOBITS = 8


@dataclass(frozen=True)
class Section:
    name: str
    kind: int  # sh_type
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass
class ElfLayout:
    """The ELF header fields a reader of device code needs, the section table, and a way to read a section."""

    machine: int
    flags: int
    osabi: int
    abi_version: int
    file_type: int
    sections: list[Section]
    _read: Callable[[int, int], bytes] = field(repr=False)

    def data(self, section: Section) -> bytes:
        """The section's bytes (empty for SHT_NOBITS, which occupies no file space)."""
        return b"" if section.kind == SHT_NOBITS else self._read(section.offset, section.size)

    def named(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)


def _layout(read: Callable[[int, int], bytes], label: str) -> ElfLayout:
    ident = read(0, 64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF":
        raise NotELF(f"{label}: not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise NotELF(f"{label}: not a 64-bit little-endian ELF file")
    file_type, machine = struct.unpack_from("<HH", ident, 0x10)
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    flags, = struct.unpack_from("<I", ident, 0x30)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if not shoff or shentsize < 64:
        raise NotELF(f"{label}: no section headers")
    raw = read(shoff, shentsize * shnum)
    if len(raw) < shentsize * shnum:
        raise NotELF(f"{label}: the section table runs past the end of the file (truncated or corrupt)")
    rows = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(shnum)]
    names = b""
    if shstrndx < len(rows):
        _, _, _, _, offset, size, *_ = rows[shstrndx]
        names = read(offset, size)
    sections = [Section(_cstr(names, r[0]) if r[0] < len(names) else "", r[1], r[2], r[4], r[5], r[6], r[7], r[9])
                for r in rows]
    return ElfLayout(machine, flags, ident[7], ident[8], file_type, sections, read)


def parse_layout(blob: bytes, label: str = "<memory>") -> ElfLayout:
    """The layout of an ELF image held in memory; NotELF when it is none (or its tables lie outside it)."""
    return _layout(lambda offset, size: blob[offset:offset + size], label)


def read_layout(f: BinaryIO, label: str) -> ElfLayout:
    """The layout of an open ELF file; sections are read from `f` when asked for, so keep it open meanwhile."""
    def read(offset: int, size: int) -> bytes:
        f.seek(offset)
        return f.read(size)
    return _layout(read, label)


def _cstr(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    return blob[offset:end if end >= 0 else len(blob)].decode("utf-8", "replace")


def read_elf(path: str | Path, symbols: set[str] | None = None, *, symbol_tables: bool = True) -> ElfInfo:
    """The file's linkage facts. With `symbols`, only those names are looked for among the defined ones (a big
    symbol table is then read but not kept); with symbol_tables=False the symbol tables are not read at all (a
    CUDA library's can be tens of MB, and a repository scan only asks what it links and which sections it has)."""
    path = Path(path)
    with path.open("rb") as f:
        layout = read_layout(f, str(path))
        info = ElfInfo(path, sections={s.name for s in layout.sections})
        rpath: list[str] = []
        runpath: list[str] = []
        for section in layout.sections:
            if section.kind == _SHT_DYNAMIC and section.link < len(layout.sections):
                strtab, table = layout.data(layout.sections[section.link]), layout.data(section)
                for i in range(0, len(table) - 15, 16):
                    tag, value = struct.unpack_from("<qQ", table, i)
                    if tag == _DT_NEEDED:
                        info.needed.append(_cstr(strtab, value))
                    elif tag == _DT_SONAME:
                        info.soname = _cstr(strtab, value)
                    elif tag == _DT_RPATH:
                        rpath += _cstr(strtab, value).split(":")
                    elif tag == _DT_RUNPATH:
                        runpath += _cstr(strtab, value).split(":")
            elif section.kind in (_SHT_SYMTAB, _SHT_DYNSYM) and section.entsize >= 24 and symbol_tables:
                info.has_symtab |= section.kind == _SHT_SYMTAB
                strtab, table = layout.data(layout.sections[section.link]), layout.data(section)
                entsize = section.entsize
                for i in range(0, len(table) - entsize + 1, entsize):
                    st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", table, i)
                    if st_shndx == _SHN_UNDEF or not st_name:
                        continue
                    name = _cstr(strtab, st_name)
                    if symbols is None or name in symbols:
                        info.defined.add(name)
                        if (section.kind == _SHT_DYNSYM and st_shndx != _SHN_ABS
                                and st_info >> 4 in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
                                and st_other & 3 in (_STV_DEFAULT, _STV_PROTECTED)):
                            info.exported.add(name)
        info.search_path = [p for p in (runpath or rpath) if p]
    return info


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: int  # STT_* (st_info & 0xf): 2 a function
    section: int  # st_shndx
    other: int = 0  # st_other (in a cubin, 0x10 marks a kernel entry)


def symbol_table(layout: ElfLayout) -> list[Symbol]:
    """The .symtab's entries in index order (other sections refer to symbols by index), empty when there is none."""
    table = next((s for s in layout.sections if s.kind == _SHT_SYMTAB and s.entsize >= 24), None)
    if table is None or table.link >= len(layout.sections):
        return []
    strtab, raw = layout.data(layout.sections[table.link]), layout.data(table)
    out = []
    for i in range(0, len(raw) - table.entsize + 1, table.entsize):
        st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", raw, i)
        out.append(Symbol(_cstr(strtab, st_name) if st_name < len(strtab) else "", st_info & 0xF, st_shndx, st_other))
    return out
