"""Header-only reading: agreement with the safetensors library, and a clear error for every kind of lie."""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path

import pytest
from safetensors import TensorSpec, deserialize, serialize_file

from fakegpu.estimate.errors import EstimateInputError
from fakegpu.estimate.safetensors_header import load_checkpoint, read_header
from fakegpu.estimate.synthetic import write_safetensors_header


def write_raw(path: Path, header: dict | bytes, data_len: int) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data_len))
    return path


def test_agrees_with_the_safetensors_library(tmp_path):
    buffers = {name: ctypes.create_string_buffer(n) for name, n in (("w", 2 * 3 * 2), ("b", 5), ("f", 8))}
    specs = {
        "w": TensorSpec(dtype="bfloat16", shape=[2, 3], data_ptr=ctypes.addressof(buffers["w"]), data_len=12),
        "b": TensorSpec(dtype="int8", shape=[5], data_ptr=ctypes.addressof(buffers["b"]), data_len=5),
        "f": TensorSpec(dtype="float64", shape=[1], data_ptr=ctypes.addressof(buffers["f"]), data_len=8),
    }
    path = tmp_path / "lib.safetensors"
    serialize_file(specs, str(path), metadata={"format": "pt"})
    tensors, meta = read_header(path)
    for name, entry in deserialize(path.read_bytes()):
        assert list(tensors[name].shape) == entry["shape"]
    assert {n: t.dtype for n, t in tensors.items()} == {"w": "BF16", "b": "I8", "f": "F64"}
    assert meta == {"format": "pt"}


def test_synthetic_writer_is_readable_by_the_library(tmp_path):
    path = tmp_path / "s.safetensors"
    write_safetensors_header(path, [("a", "F16", (4, 4)), ("q", "I32", (2, 8))])
    assert {name: e["shape"] for name, e in deserialize(path.read_bytes())} == {"a": [4, 4], "q": [2, 8]}
    assert read_header(path)[0]["q"].nbytes == 64


@pytest.mark.parametrize(
    ("header", "data_len", "message"),
    [
        (b"not json at all", 0, "header is not JSON"),
        ({"t": {"dtype": "F17", "shape": [2], "data_offsets": [0, 4]}}, 4, "unknown dtype 'F17'"),
        ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, 4, "needs 8"),
        ({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, 4, "non-negative"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, 6, "overlaps"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, 8, "hole"),
        ({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}, 4, "truncated"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, 9, "after the last declared tensor"),
        ([1, 2], 0, "not an object"),
    ],
)
def test_corrupt_headers_name_the_file(tmp_path, header, data_len, message):
    path = write_raw(tmp_path / "bad.safetensors", header, data_len)
    with pytest.raises(EstimateInputError) as err:
        read_header(path)
    assert message in err.value.message
    assert str(path) in err.value.message


def test_a_header_length_that_lies(tmp_path):
    path = tmp_path / "lies.safetensors"
    path.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(EstimateInputError, match="lies"):
        read_header(path)
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(EstimateInputError, match="shorter than the 8-byte"):
        read_header(short)
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**62))
    with pytest.raises(EstimateInputError, match=r"not safetensors \(or damaged\): its first 8 bytes give a header "
                                                 r"length of 4611686018427387904, above the"):
        read_header(huge)


def test_file_folder_and_index_give_the_same_tensors(models):
    single = load_checkpoint(models["tiny"])
    sharded = load_checkpoint(models["tiny-sharded"])
    via_index = load_checkpoint(models["tiny-sharded"] / "model.safetensors.index.json")
    via_file = load_checkpoint(models["tiny"] / "model.safetensors")
    assert len(sharded.files) > 1
    assert single.tensors.keys() == sharded.tensors.keys() == via_index.tensors.keys() == via_file.tensors.keys()
    assert single.payload_bytes == sharded.payload_bytes


def test_index_problems_name_the_index(models, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(models["tiny-sharded"], broken)
    index = broken / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    first_shard = sorted(set(doc["weight_map"].values()))[0]
    (broken / first_shard).unlink()
    with pytest.raises(EstimateInputError, match="does not exist") as err:
        load_checkpoint(broken)
    assert str(index) in err.value.message
    index.write_text("{not json")
    with pytest.raises(EstimateInputError, match="not JSON"):
        load_checkpoint(broken)
    index.write_text(json.dumps({"weight_map": {"ghost.weight": "../../etc/passwd"}}))
    with pytest.raises(EstimateInputError, match="not a file name"):
        load_checkpoint(broken)


def test_missing_and_empty_inputs(tmp_path):
    with pytest.raises(EstimateInputError, match="no such file"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(EstimateInputError, match=r"no \*\.safetensors"):
        load_checkpoint(tmp_path)
