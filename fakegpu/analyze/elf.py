"""Just enough of an ELF64 little-endian file for linkage questions: its DT_NEEDED, RPATH/RUNPATH and SONAME, its
section names (a `.nv_fatbin` section holds CUDA device code), the names of the symbols it defines and of those
it exports. Standard library only; reads the headers and the tables it needs, not the whole file."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

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


def _cstr(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    return blob[offset:end if end >= 0 else len(blob)].decode("utf-8", "replace")


def read_elf(path: str | Path, symbols: set[str] | None = None, *, symbol_tables: bool = True) -> ElfInfo:
    """The file's linkage facts. With `symbols`, only those names are looked for among the defined ones (a big
    symbol table is then read but not kept); with symbol_tables=False the symbol tables are not read at all (a
    CUDA library's can be tens of MB, and a repository scan only asks what it links and which sections it has)."""
    path = Path(path)
    with path.open("rb") as f:
        ident = f.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF":
            raise NotELF(f"{path}: not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise NotELF(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
        if not shoff or shentsize < 64:
            raise NotELF(f"{path}: no section headers")
        f.seek(shoff)
        raw = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(len(raw) // shentsize)]

        def data(index: int) -> bytes:
            _, _, _, _, offset, size, *_ = sections[index]
            f.seek(offset)
            return f.read(size)

        info = ElfInfo(path)
        if shstrndx < len(sections):
            names = data(shstrndx)
            info.sections = {_cstr(names, s[0]) for s in sections}
        rpath: list[str] = []
        runpath: list[str] = []
        for index, (_name, kind, _flags, _addr, _offset, _size, link, _info, _align, entsize) in enumerate(sections):
            if kind == _SHT_DYNAMIC:
                strtab, table = data(link), data(index)
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
            elif kind in (_SHT_SYMTAB, _SHT_DYNSYM) and entsize >= 24 and symbol_tables:
                info.has_symtab |= kind == _SHT_SYMTAB
                strtab, table = data(link), data(index)
                for i in range(0, len(table) - entsize + 1, entsize):
                    st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", table, i)
                    if st_shndx == _SHN_UNDEF or not st_name:
                        continue
                    name = _cstr(strtab, st_name)
                    if symbols is None or name in symbols:
                        info.defined.add(name)
                        if (kind == _SHT_DYNSYM and st_shndx != _SHN_ABS
                                and st_info >> 4 in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
                                and st_other & 3 in (_STV_DEFAULT, _STV_PROTECTED)):
                            info.exported.add(name)
        info.search_path = [p for p in (runpath or rpath) if p]
    return info
