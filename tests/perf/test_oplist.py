"""The op list file: YAML or JSON, a list or a mapping with `ops`, every problem named by file:line and key with
the closest accepted name."""

from __future__ import annotations

import pytest

from fakegpu.perf import oplist
from fakegpu.perf.ops import Attention, Custom, Gemm, MemoryOp


def problems(tmp_path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(oplist.OpListError) as caught:
        oplist.load(path)
    return [p.replace(str(path), name) for p in caught.value.problems]


def test_every_op_type_and_both_shapes_of_file(tmp_path):
    listed = tmp_path / "ops.yaml"
    listed.write_text("- {op: gemm, m: 2, n: 3, k: 4, dtype: bfloat16}\n"
                      "- {op: bmm, batch: 5, m: 2, n: 3, k: 4, dtype: fp16, name: scores}\n"
                      "- {op: attention, batch: 1, heads: 8, kv_heads: 2, q_len: 1, kv_len: 64, head_dim: 64,"
                      " dtype: bf16, backend: cudnn}\n"
                      "- {op: elementwise, bytes: 1KiB}\n"
                      "- {op: reduction, kind: softmax, bytes: 2e3, count: 3}\n"
                      "- {op: custom, flops: 1.5T, bytes: 2GB, dtype: torch.float8_e4m3fn}\n")
    ops = oplist.load(listed)
    assert [type(o) for o in ops] == [Gemm, Gemm, Attention, MemoryOp, MemoryOp, Custom]
    assert ops[0].dtype == "bf16" and not ops[0].batched and ops[1].batched and ops[1].name == "scores"
    assert ops[2].groups == 2 and ops[2].backend == "cudnn" and not ops[2].causal
    assert ops[3].kind == "elementwise" and ops[3].bytes == 1024
    assert ops[4].reduction and ops[4].count == 3 and ops[4].bytes == 2000
    assert ops[5].dtype == "fp8" and ops[5].flops == 1.5e12 and ops[5].bytes == 2e9
    mapped = tmp_path / "ops.json"
    mapped.write_text('{"description": "one gemm", "ops": [{"op": "gemm", "m": 2, "n": 3, "k": 4, "dtype": "fp32",'
                      ' "impl": "torch._int_mm"}]}')
    [gemm] = oplist.load(mapped)
    assert gemm.impl == "torch._int_mm" and gemm.name == "gemm[0]"


def test_each_problem_by_line_and_key_with_the_close_match(tmp_path):
    found = problems(tmp_path, "ops.yaml", (
        "ops:\n"
        "  - {op: gemm, m: 8192, n: 8192, k: 8192, dtype: bf16}\n"
        "  - op: gem\n"
        "    m: 1\n"
        "  - {op: attention, batch: 4, heads: 32, kv_heads: 5, q_len: 1, kv_len: 9, head_dim: 128, dtype: bf61,"
        " backend: flsh}\n"
        "  - {op: elementwise, kind: gleu, bytes: 256MB}\n"
        "  - {op: bmm, batch: 2, m: 3, n: 4, kk: 5, dtype: fp16}\n"
        "  - {op: gemm, m: 0, n: 1.5, k: 1, dtype: fp16}\n"))
    assert found == [
        "ops.yaml:3: ops[1].op: 'gem' is not accepted; did you mean 'gemm'? (expected one of: gemm, bmm, "
        "attention, elementwise, reduction, custom)",
        "ops.yaml:5: ops[2].kv_heads: 5 does not divide heads=32",
        "ops.yaml:5: ops[2].dtype: unknown dtype 'bf61'; did you mean 'bf16'? (known: fp64, fp32, tf32, fp16, bf16, "
        "fp8, int8, fp4)",
        "ops.yaml:5: ops[2].backend: 'flsh' is not accepted; did you mean 'flash'? (expected one of: flash, cudnn, "
        "efficient)",
        "ops.yaml:6: ops[3].kind: 'gleu' is not accepted; did you mean 'gelu'? (expected one of: add, copy, "
        "elementwise, fill, gelu, layernorm, mul, reduction, rmsnorm, silu, softmax, sum)",
        "ops.yaml:7: ops[4].kk: unknown key 'kk'; did you mean 'k'? (accepted: op, name, count, batch, m, n, k, "
        "dtype, sparse, impl)",
        "ops.yaml:8: ops[5].m: 0 is below the minimum 1",
        "ops.yaml:8: ops[5].n: 1.5 is a number; expected an integer",
    ]


@pytest.mark.parametrize("name,text,says", [
    ("ops.json", '{"ops": [{"op": "gemm", "m": 1,\n "n": 2', "ops.json:2: not valid JSON"),
    ("ops.json", '{"ops": [{"op": "gemm", "m": 1,\n "n": 2', "is it truncated?"),
    ("ops.yaml", "ops:\n  - {op: gemm, m: 1", "ops.yaml:2: not valid YAML"),
    ("ops.yaml", "ops: []\n", "ops.yaml:1: ops: must not be empty"),
    ("ops.yaml", "opz: []\n", "unknown key 'opz'; did you mean 'ops'?"),
    ("ops.yaml", "- {op: elementwise, bytes: lots}\n", "ops[0].bytes: 'lots' is not an amount"),
    ("ops.yaml", "- {op: custom, flops: 1, bytes: 1}\n", "ops[0]: missing required key 'dtype'"),
    ("ops.txt", "ops: []\n", "an op list is .yaml, .yml, .json"),
])
def test_unreadable_files(tmp_path, name, text, says):
    found = problems(tmp_path, name, text)
    assert any(says in p for p in found), found


def test_a_missing_file(tmp_path):
    with pytest.raises(oplist.OpListError, match="no such op list"):
        oplist.load(tmp_path / "nothing.yaml")
