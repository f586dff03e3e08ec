"""A fatbinary: the container nvcc wraps device code in (a `.fatbin` file, or the `.nv_fatbin` section of a host
program or library). One or more containers follow each other, each a 16-byte header (magic 0xBA55ED50, version,
header size, payload size) and entries: a header per entry (kind PTX or SASS ELF, the SM number, the PTX ISA
version, flags, sizes) and its payload, possibly compressed. Layout as the files nvcc 13.2 writes show it; the
fields read here are the ones cuobjdump's listing agrees with (tests compare them).

Compression: flag 0x2000 is LZ4 (a block: decoded here, the format is published and small, or by the `lz4`
package when installed, about 60 times faster), 0x8000 is Zstandard (decoded with Python's own `compression.zstd`
from 3.14, or the `zstandard` package when installed; otherwise the entry is listed as compressed and unread,
never dropped)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

FATBIN_MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a / compute_90a
FLAG_FAMILY = 0x200000  # sm_100f / compute_100f
_ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes; a header may be longer (options, names)


class FatbinError(ValueError):
    """Bytes that are not, or no longer, a readable fatbinary container."""


@dataclass
class Entry:
    kind: str  # "sass" or "ptx" (or "other:<n>")
    sm: int
    variant: str  # "", "a" or "f"
    ptx_version: str | None  # the PTX ISA of a PTX entry, e.g. "9.2"
    compression: str | None  # None, "lz4" or "zstd"
    payload: bytes | None  # the decompressed entry, None when it could not be decompressed
    stored_bytes: int
    size_bytes: int | None  # decompressed size
    problem: str | None = None
    container: int = 0
    index: int = 0
    packed: bytes | None = field(default=None, repr=False)  # a compressed entry's stored bytes

    @property
    def arch(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.sm}{self.variant}"


def lz4_block(data: bytes, size: int) -> bytes:
    """Decode one LZ4 block (the published block format: a token, literals, a 2-byte offset, a match length)."""
    out = bytearray()
    i = 0
    while i < len(data):
        token = data[i]
        i += 1
        literals = token >> 4
        if literals == 15:
            while True:
                extra = data[i]
                i += 1
                literals += extra
                if extra != 255:
                    break
        out += data[i:i + literals]
        i += literals
        if i >= len(data) or len(out) >= size:
            break  # the last sequence carries literals only
        offset = data[i] | data[i + 1] << 8
        i += 2
        if not offset or offset > len(out):
            raise FatbinError("an LZ4 match points before the start of the output")
        length = (token & 15) + 4
        if token & 15 == 15:
            while True:
                extra = data[i]
                i += 1
                length += extra
                if extra != 255:
                    break
        start = len(out) - offset
        if length <= offset:
            out += out[start:start + length]
        else:  # the match overlaps what it copies: its last `offset` bytes repeat
            out += (out[start:] * (length // offset + 1))[:length]
    return bytes(out)


def _lz4(data: bytes, size: int) -> bytes:
    """The `lz4` package's C decoder when installed (a library's fatbinaries hold hundreds of MB: this Python
    decoder reads about 10 MB/s), else lz4_block."""
    try:
        import lz4.block  # type: ignore[import-not-found]
    except ImportError:
        return lz4_block(data, size)
    try:
        return lz4.block.decompress(data, uncompressed_size=size)
    except lz4.block.LZ4BlockError as exc:
        raise FatbinError(str(exc)) from exc


def _zstd(data: bytes, size: int) -> bytes | None:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14 on
        return zstd.decompress(data)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return None
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=max(size, 1))


ZSTD_MISSING = ("compressed with Zstandard, which this Python cannot decompress (Python 3.14's compression.zstd or "
                "the `zstandard` package reads it: pip install zstandard)")


def _entry(blob: bytes, at: int, end: int, container: int, index: int, decompress: bool) -> tuple[Entry, int]:
    if at + _ENTRY_HEADER.size > end:
        raise FatbinError(f"an entry header at byte {at} runs past the end")
    (kind, _version, header_size, stored, compressed_size, _options, minor, major, sm, _name_offset, _name_size,
     flags, _zero, decompressed) = _ENTRY_HEADER.unpack_from(blob, at)
    if header_size < _ENTRY_HEADER.size or at + header_size + stored > end:
        raise FatbinError(f"entry {index} at byte {at} claims {header_size}+{stored} bytes past the end")
    raw = blob[at + header_size:at + header_size + stored]
    name = {KIND_PTX: "ptx", KIND_ELF: "sass"}.get(kind, f"other:{kind}")
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    entry = Entry(name, sm, variant, f"{major}.{minor}" if kind == KIND_PTX else None, None, raw, stored,
                  None, container=container, index=index)
    if flags & (FLAG_LZ4 | FLAG_ZSTD):
        entry.compression = "lz4" if flags & FLAG_LZ4 else "zstd"
        entry.size_bytes = decompressed
        packed = raw[:compressed_size] if compressed_size else raw
        entry.payload, entry.packed = None, packed
        if decompress:
            try:
                entry.payload = _lz4(packed, decompressed) if flags & FLAG_LZ4 else _zstd(packed, decompressed)
            except (FatbinError, IndexError, ValueError) as exc:
                entry.problem = f"{entry.compression}-compressed and it did not decompress: {exc}"
            else:
                if entry.payload is None:
                    entry.problem = ZSTD_MISSING
    else:
        entry.size_bytes = stored
    if entry.payload is not None and kind == KIND_PTX:
        entry.payload = entry.payload.rstrip(b"\0")
    return entry, at + header_size + stored


def parse_fatbin(blob: bytes, decompress: bool = True) -> tuple[list[Entry], list[str]]:
    """Every entry of every container in `blob`, and what could not be read (as sentences). FatbinError when the
    first bytes are not a container."""
    problems: list[str] = []
    return list(iter_fatbin(blob, problems, decompress)), problems


def iter_fatbin(blob: bytes, problems: list[str], decompress: bool = True) -> Iterator[Entry]:
    """The entries one at a time (a large library's decompressed entries add up to gigabytes: a caller that
    reads each and lets it go holds one at a time); what could not be read is appended to `problems`."""
    if blob[:4] != _MAGIC_BYTES:
        raise FatbinError("no fatbinary container at its start (magic 0xBA55ED50)")
    at, container = 0, 0
    while at + 16 <= len(blob):
        if blob[at:at + 4] != _MAGIC_BYTES:
            found = blob.find(_MAGIC_BYTES, at)
            if found < 0:
                if blob[at:].strip(b"\0"):
                    problems.append(f"{len(blob) - at} bytes after the last container are not a container")
                break
            if blob[at:found].strip(b"\0"):
                problems.append(f"bytes {at}-{found} between containers are not a container (skipped)")
            at = found
            continue
        _magic, _version, header_size, size = struct.unpack_from("<IHHQ", blob, at)
        end = at + header_size + size
        if end > len(blob):
            problems.append(f"container {container} at byte {at} claims {size} bytes; only {len(blob) - at} "
                            "remain (truncated)")
            end = len(blob)
        cursor, index = at + header_size, 0
        try:
            while cursor < end:
                entry, cursor = _entry(blob, cursor, end, container, index, decompress)
                yield entry
                index += 1
        except FatbinError as exc:
            problems.append(f"container {container}: {exc}")
        at, container = max(end, at + 16), container + 1
