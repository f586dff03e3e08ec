"""analyze-kernel on what needs no compiler: the committed example, source scanning (templates, launch bounds,
launches), PTX facts, and bad input: a missing file, a corrupt cubin, PTX with a syntax error, an ELF file with
no CUDA code, a file of no kind it reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fakegpu.analyze.elf import EM_CUDA, ElfLayout
from fakegpu.analyze.kernel.cubin import _arch
from fakegpu.analyze.kernel.fatbin import lz4_block
from fakegpu.analyze.kernel.ptx import parse_ptx
from fakegpu.analyze.kernel.source import scan_source
from fakegpu.cli.main import app
from fakegpu.reports import validate
from tests.analyze.conftest import REPO, runner

EXAMPLE = REPO / "examples" / "analyze-kernel"


def _json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["analyze-kernel", *args, "--json"])
    doc = json.loads(result.stdout)
    if doc["data"] is not None:
        validate(doc["data"])
    return result.exit_code, doc


def test_the_example_ptx_kernels_one_by_one():
    code, doc = _json(str(EXAMPLE / "scale.ptx"))
    assert code == 0
    f, = doc["data"]["files"]
    assert f["kind"] == "ptx" and f["images"] == [{"kind": "ptx", "arch": "compute_90a", "ptx_version": "9.2",
                                                   "read": True, "problem": None}]
    scale, dot = f["kernels"]
    assert scale["name"] == "_Z5scaleifPf" and scale["max_threads"] == [128, 1, 1]
    assert scale["flops_per_thread"] == 2 and [p["type"] for p in scale["params"]] == ["u32", "f32", "u64"]
    assert dot["shared_bytes"] == 64 * 4 and dot["flops_per_thread"] is None and "loop" in dot["flops_note"]


def test_source_kernels_templates_launch_bounds_and_launches():
    found = scan_source(
        "template <typename T, int N>\n__global__ void __launch_bounds__(N, 2) fill(T *x) {}\n"
        "template __global__ void fill<float, 128>(float *);\n"
        "/* __global__ void commented_out() {} */\n"
        'const char *text = "__global__ void in_a_string()";\n'
        "__global__ __launch_bounds__(64) void plain(int *y) {}\n"
        "void go(float *x, int *y) {\n  ns::fill<float, 128><<<dim3(4), 128, 0, s>>>(x);\n"
        "  void *args[] = {&y};\n  cudaLaunchKernel((const void *)plain, 1, 64, args, 0, 0);\n}\n")
    assert [(k.name, k.line, k.template, k.launch_bounds, k.instantiations) for k in found.kernels] == [
        ("fill", 2, "typename T, int N", ["N", "2"], ["<float, 128>"]),
        ("plain", 6, None, ["64"], [])]
    assert [(launch.kernel, launch.line, launch.how, launch.config, launch.template_args)
            for launch in found.launches] == [
        ("fill", 8, "<<<>>>", "dim3(4), 128, 0, s", "float, 128"), ("plain", 10, "cudaLaunchKernel", None, None)]


def test_a_missing_file_is_a_usage_error_with_a_close_name():
    code, doc = _json(str(EXAMPLE / "scale.ptz"))
    assert code == 2 and "no such file. Did you mean: scale.ptx" in doc["errors"][0]["message"]


def test_a_corrupt_cubin_is_reported_with_what_was_wrong(tmp_path: Path):
    header = bytearray(64)
    header[:8] = b"\x7fELF\x02\x01\x01\x41"
    header[0x12:0x14] = (190).to_bytes(2, "little")  # EM_CUDA
    header[0x28:0x30] = (1 << 20).to_bytes(8, "little")  # a section table far past the end
    header[0x3A:0x40] = (64).to_bytes(2, "little") + (12).to_bytes(2, "little") + (1).to_bytes(2, "little")
    bad = tmp_path / "broken.cubin"
    bad.write_bytes(bytes(header) + b"\0" * 100)
    code, doc = _json(str(bad))
    f, = doc["data"]["files"]
    assert code == 1 and f["kernels"] == []
    assert f["problems"] == [f"{bad}: the section table runs past the end of the file (truncated or corrupt)"]


def test_ptx_with_a_syntax_error_says_which_lines_it_could_not_read(tmp_path: Path):
    text = (EXAMPLE / "scale.ptx").read_text()
    broken = text.replace("ret;", "ret;\n\tthis is not ptx", 1)
    broken = broken[:broken.rindex("}")]  # the last function is never closed
    parsed = parse_ptx(broken)
    messages = [p["message"] for p in parsed.problems]
    assert any("this is not ptx" in m for m in messages)
    assert any("never closed" in m for m in messages)
    path = tmp_path / "broken.ptx"
    path.write_text(broken)
    code, doc = _json(str(path))
    f, = doc["data"]["files"]
    assert code == 1 and f["images"][0]["problem"] == "2 statement(s) not understood"
    assert [k["name"] for k in f["kernels"]] == ["_Z5scaleifPf"]  # what could be read is still reported
    not_ptx = tmp_path / "notes.ptx"
    not_ptx.write_text("hello\n")
    code, doc = _json(str(not_ptx))
    assert code == 1 and doc["data"]["files"][0]["problems"] == [f"{not_ptx}: no .version directive: not PTX text"]


def test_an_elf_without_cuda_code_and_a_file_of_no_kind_are_said_so(tmp_path: Path):
    code, doc = _json("--profile", "a100", sys.executable)
    f, = doc["data"]["files"]
    assert code == 1 and f["kind"] == "elf" and f["on_profile"] is None
    assert f["problems"] == [f"{sys.executable}: an ELF file with no CUDA device code (no .nv_fatbin or "
                             "__nv_relfatbin section)"]
    other = tmp_path / "notes.txt"
    other.write_text("nothing here")
    code, doc = _json(str(other))
    assert code == 1 and doc["data"]["files"][0]["kind"] == "unknown"


def test_a_folder_and_an_unknown_profile_are_usage_errors():
    assert _json(str(EXAMPLE))[0] == 2
    code, doc = _json("--profile", "a1000", str(EXAMPLE / "scale.ptx"))
    assert code == 2 and "a100" in doc["errors"][0]["message"]


def test_lz4_block_decoding_with_overlapping_matches():
    # literals "ab", then a match of 6 at offset 2 ("ababab"), then the literal "c": the published block format
    block = bytes([0x22]) + b"ab" + (2).to_bytes(2, "little") + bytes([0x10]) + b"c"
    assert lz4_block(block, 9) == b"abababab"[:8] + b"c"


def test_tensor_core_shapes_and_flops_per_thread():
    ptx = parse_ptx(
        ".version 8.0\n.target sm_80\n.address_size 64\n"
        ".visible .entry k(.param .u64 k_param_0)\n{\n.reg .b32 %r<10>;\n.reg .f32 %f<8>;\n"
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
        "{%f4,%f5,%f6,%f7};\n"
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%r0,%r1,%r2,%r3}, {%r4,%r5,%r6,%r7}, {%r8,%r9}, "
        "{%r0,%r1,%r2,%r3};\n"
        "fma.rn.f32 %f0, %f1, %f2, %f3;\nadd.s32 %r0, %r1, %r2;\nret;\n}\n")
    kernel, = ptx.kernels
    assert ptx.problems == [] and kernel.registers == {"b32": 10, "f32": 8}
    assert [t["shape"] for t in kernel.tensor] == ["m16n8k16", "m16n8k32"]
    # a warp's bf16 product is 2 x 16 x 8 x 16 FLOPs, a 32nd per thread; the int8 one counts none; fma 2, add.s32 0
    assert kernel.flops_per_thread == 2 * 16 * 8 * 16 / 32 + 2
    assert kernel.instructions == {"mma": 2, "fma": 1, "add": 1, "ret": 1}


@pytest.mark.parametrize("abi, flags, arch", [
    (7, 0x500550, "sm_80"),  # CUDA 12.8's ELF ABI 7 (torch 2.10+cu128): the SM in the low byte
    (7, 0x5A0D5A, "sm_90a"),  # ... with 0x800 for an arch-specific image
    (8, 0x600640A, "sm_100a"),  # ABI 8 as CUDA 12.8 writes it: the SM in bits 8-15, 0x8 arch-specific
    (8, 0x6007802, "sm_120"),  # ABI 8 as CUDA 13.2 writes it (its `a` is in .nv.compat, checked on nvcc output)
])
def test_the_sm_from_e_flags_of_both_elf_abis(abi, flags, arch):
    layout = ElfLayout(EM_CUDA, flags, 0x41, abi, 2, [], lambda offset, size: b"")
    assert "sm_{}{}".format(*_arch(layout)) == arch
