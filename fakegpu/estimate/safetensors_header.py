"""Header-only reading of safetensors checkpoints: one file, a folder, or a sharded index.

The format is an 8-byte little-endian header length, a JSON header, then the tensor payloads. Only the first
8 + N bytes of each file are read, so a 400B-parameter checkpoint is described in milliseconds, and every claim
the header makes is checked against the file size so that a lying header is reported, not trusted.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.estimate.dtypes import SAFETENSORS_BITS, payload_bytes
from fakegpu.estimate.errors import EstimateInputError
from fakegpu.user_files import loads_json

INDEX_NAME = "model.safetensors.index.json"
# The safetensors library refuses headers above 100 MB; a larger claim is a corrupt or hostile file.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Checkpoint:
    """Every tensor of a checkpoint, by name, with where it came from."""

    source: Path
    files: list[Path]
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def payload_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def directory(self) -> Path:
        return self.source if self.source.is_dir() else self.source.parent


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """The tensors one safetensors file declares, validated against its size; reads no payload byte."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise EstimateInputError(path, f"not safetensors: {size} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise EstimateInputError(path, f"not safetensors (or damaged): its first 8 bytes give a header length "
                                               f"of {length}, above the {MAX_HEADER_BYTES}-byte limit")
            if 8 + length > size:
                raise EstimateInputError(path, f"header length {length} lies: past the end of the {size}-byte file")
            raw = fh.read(length)
    except OSError as exc:
        raise EstimateInputError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        doc = loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EstimateInputError(path, f"header is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EstimateInputError(path, "header is JSON but not an object of tensors")
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise EstimateInputError(path, "__metadata__ is not an object", field="__metadata__")
    tensors = {name: _tensor(path, name, entry) for name, entry in doc.items()}
    _check_layout(path, tensors, doc, size - 8 - length)
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def _tensor(path: Path, name: str, entry: object) -> TensorInfo:
    if not isinstance(entry, dict):
        raise EstimateInputError(path, "tensor entry is not an object", field=name)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_BITS:
        known = ", ".join(sorted(SAFETENSORS_BITS))
        raise EstimateInputError(path, f"unknown dtype {dtype!r} (known: {known})", field=name)
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise EstimateInputError(path, f"shape {shape!r} is not a list of non-negative integers", field=name)
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise EstimateInputError(path, f"data_offsets {offsets!r} are not [begin, end], 0 <= begin <= end", field=name)
    expected = payload_bytes(dtype, math.prod(shape))
    if offsets[1] - offsets[0] != expected:
        raise EstimateInputError(
            path, f"data_offsets span {offsets[1] - offsets[0]} bytes but {dtype}{shape} needs {expected}", field=name
        )
    return TensorInfo(name, dtype, tuple(shape), expected, str(path))


def _check_layout(path: Path, tensors: dict[str, TensorInfo], doc: dict, data_size: int) -> None:
    """Payloads must tile the data section exactly: no overlap, no hole, nothing past the end of the file."""
    spans = sorted((tuple(doc[name]["data_offsets"]), name) for name in tensors)
    cursor = 0
    for (begin, end), name in spans:
        if begin != cursor:
            problem = "overlaps the previous tensor" if begin < cursor else f"leaves a {begin - cursor}-byte hole"
            raise EstimateInputError(path, f"data_offsets {[begin, end]} {problem}", field=name)
        cursor = end
    if cursor > data_size:
        raise EstimateInputError(
            path, f"header declares {cursor} bytes of tensor data but the file holds {data_size}: truncated file?"
        )
    if cursor < data_size:
        raise EstimateInputError(path, f"file holds {data_size - cursor} bytes after the last declared tensor")


def load_checkpoint(path: Path | str) -> Checkpoint:
    """A .safetensors file, a model.safetensors.index.json, or a folder holding either."""
    path = Path(path)
    if not path.exists():
        raise EstimateInputError(path, "no such file or folder")
    if path.is_dir():
        index = path / INDEX_NAME
        if index.is_file():
            return _load_index(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise EstimateInputError(path, "holds no *.safetensors file and no " + INDEX_NAME)
        return _load_files(path, files)
    if path.name.endswith(".index.json"):
        return _load_index(path)
    return _load_files(path, [path])


def _load_files(source: Path, files: list[Path]) -> Checkpoint:
    tensors: dict[str, TensorInfo] = {}
    metadata: dict[str, str] = {}
    for f in files:
        found, meta = read_header(f)
        for name in found:
            if name in tensors:
                raise EstimateInputError(f, f"tensor also stored in {tensors[name].file}", field=name)
        tensors.update(found)
        metadata.update(meta)
    return Checkpoint(source, files, tensors, metadata)


def _load_index(index: Path) -> Checkpoint:
    try:
        doc = loads_json(index.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EstimateInputError(index, f"cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EstimateInputError(index, f"not JSON: {exc}") from exc
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise EstimateInputError(index, "has no weight_map object naming tensors and their shards", field="weight_map")
    shard_names = sorted(set(weight_map.values()))
    files = []
    for name in shard_names:
        if not isinstance(name, str) or "/" in name or name.startswith(".."):
            raise EstimateInputError(index, f"shard {name!r} is not a file name beside the index", field="weight_map")
        shard = index.parent / name
        if not shard.is_file():
            raise EstimateInputError(index, f"names shard {name!r}, which does not exist", field="weight_map")
        files.append(shard)
    ckpt = _load_files(index, files)
    for tensor, shard in weight_map.items():
        info = ckpt.tensors.get(tensor)
        if info is None or Path(info.file).name != shard:
            reason = f"maps {tensor!r} to {shard!r}, whose header does not declare it"
            raise EstimateInputError(index, reason, field="weight_map")
    return ckpt
