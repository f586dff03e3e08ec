"""One file's sites, by detector: what each finds (with line), aliases resolved, TYPE_CHECKING left out, optional
marked, `__main__` blocks told apart; and the pattern reader the scan uses for files it does not parse."""

from __future__ import annotations

import textwrap

import pytest

from fakegpu.analyze.repo.python_imports import imports_by_pattern
from fakegpu.analyze.repo.python_scan import needs_parse, scan_python


def found(source: str, package: str = "") -> list[tuple[str, str, int, bool]]:
    facts = scan_python(textwrap.dedent(source).lstrip("\n"), package)
    return [(s.kind, s.detail, s.line, s.optional) for s in facts.sites]


def test_torch_cuda_surface_with_aliases():
    got = found("""
        import torch as th
        from torch import cuda
        from torch.cuda import synchronize as sync
        th.cuda.set_device(0)
        cuda.empty_cache()
        sync()
        x = th.zeros(3).cuda()
        y = x.to("cuda:1")
        z = th.ones(2, device="cuda")
        dev = th.device("cuda")
        device = "cuda"
        w = x.to(device="cuda")
    """)
    assert ("torch-cuda", "torch.cuda.set_device()", 4, False) in got
    assert ("torch-cuda", "torch.cuda.empty_cache()", 5, False) in got
    assert ("torch-cuda", "torch.cuda.synchronize()", 6, False) in got
    assert ("torch-cuda", ".cuda()", 7, False) in got
    assert ("torch-cuda", '.to("cuda:1")', 8, False) in got
    assert ("torch-cuda", 'device="cuda"', 9, False) in got
    assert ("torch-cuda", 'torch.device("cuda")', 10, False) in got
    assert ("torch-cuda", 'device = "cuda"', 11, False) in got
    assert ("torch-cuda", '.to("cuda")', 12, False) in got
    assert len(got) == 9  # one site each, none twice


def test_a_name_that_is_not_imported_is_not_torch():
    assert found("cuda.synchronize()\nmy.to('cpu')\n") == []


def test_compile_and_distributed_backends():
    got = found("""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = torch.compile(model)
        @torch.compile
        def f(x): return x
        dist.init_process_group("nccl")
        dist.init_process_group(backend="gloo")
        dist.init_process_group(backend=args.backend)
        torch.distributed.init_process_group()
        ddp = DDP(model)
    """)
    assert ("torch-compile", "torch.compile()", 4, False) in got
    assert ("torch-compile", "@torch.compile", 5, False) in got
    assert ("distributed", "torch.distributed.init_process_group(backend=nccl)", 7, False) in got
    assert ("distributed", "torch.distributed.init_process_group(backend=gloo)", 8, False) in got
    assert ("distributed", "torch.distributed.init_process_group(backend=not a literal)", 9, False) in got
    assert ("distributed", "torch.distributed.init_process_group(backend=default)", 10, False) in got
    assert ("distributed", "torch.nn.parallel.DistributedDataParallel()", 11, False) in got


def test_cpp_extensions_say_whether_they_build_cuda():
    got = found("""
        from pathlib import Path
        from torch.utils import cpp_extension
        from torch.utils.cpp_extension import CUDAExtension, CppExtension, load_inline
        a = cpp_extension.load("a", ["a.cpp", "a_kernel.cu"])
        b = cpp_extension.load(name="b", sources=[str(Path(__file__).parent / "b.cu")])
        c = cpp_extension.load(name="c", sources=["c.cpp"])
        d = load_inline("d", cpp_sources=src, cuda_sources=cu)
        e = load_inline("e", cpp_sources=src)
        ext = [CUDAExtension("f", ["f.cu"]), CppExtension("g", ["g.cpp"])]
        h = cpp_extension.load("h", SOURCES)
    """)
    details = {d: line for _, d, line, _ in got}
    assert details == {
        "torch.utils.cpp_extension.load() [CUDA]": 5,  # lines 4 (a .cu listed) and 5 (one named in a path)
        "torch.utils.cpp_extension.load() [C++ only]": 6,
        "torch.utils.cpp_extension.load_inline() [CUDA]": 7,
        "torch.utils.cpp_extension.load_inline() [C++ only]": 8,
        "torch.utils.cpp_extension.CUDAExtension() [CUDA]": 9,
        "torch.utils.cpp_extension.CppExtension() [C++ only]": 9,
        "torch.utils.cpp_extension.load() [sources not literal]": 10,
    }
    assert sum(1 for _, d, _, _ in got if d == "torch.utils.cpp_extension.load() [CUDA]") == 2
    assert [optional for _, d, _, optional in got if "not literal" in d] == [True]  # named, does not decide


def test_triton_kernels_and_gpu_libraries():
    got = found("""
        import triton
        import triton.language as tl
        import cupy as cp
        import pynvml
        from flash_attn import flash_attn_func
        import bitsandbytes as bnb
        import deepspeed
        from apex import amp
        from vllm import LLM
        from kernels import get_kernel

        @triton.jit
        def add(x_ptr, n: tl.constexpr):
            pass

        cp.asarray([1])
        pynvml.nvmlInit()
        bnb.optim.Adam8bit(params)
        engine = deepspeed.initialize(model=m)
        k = get_kernel("kernels-community/activation")
    """)
    kinds = {(k, line) for k, _, line, _ in got}
    assert {("triton", 1), ("triton", 2), ("cupy", 3), ("nvml", 4), ("flash-attn", 5), ("bitsandbytes", 6),
            ("deepspeed", 7), ("apex", 8), ("vllm", 9), ("hub-kernels", 10), ("triton-kernel", 12), ("cupy", 16),
            ("nvml", 17), ("bitsandbytes", 18), ("deepspeed", 19), ("hub-kernels", 20)} <= kinds
    assert not any(optional for *_, optional in got)


def test_a_triton_kernel_under_a_decorator_of_its_own():
    got = found("""
        import triton.language as tl
        from mylib import cached_kernel
        @cached_kernel("bmm")
        def bmm(a_ptr, BLOCK: tl.constexpr):
            pid = tl.program_id(axis=0)
    """)
    assert got == [("triton", "import triton.language", 1, False),
                   ("triton-kernel", "triton.language.program_id() in a kernel body", 5, False)]


def test_jax_and_tensorflow_gpu_use():
    got = found("""
        import jax
        import tensorflow as tf
        gpus = jax.devices("gpu")
        cpus = jax.devices("cpu")
        tf.config.list_physical_devices("GPU")
        with tf.device("/GPU:0"):
            pass
    """)
    kinds = [(k, line) for k, _, line, _ in got]
    assert ("jax-gpu", 3) in kinds and ("jax-gpu", 4) not in kinds
    assert ("tensorflow-gpu", 5) in kinds and ("tensorflow-gpu", 6) in kinds


def test_type_checking_is_left_out_and_guards_make_library_sites_optional():
    got = found("""
        from typing import TYPE_CHECKING
        import torch
        if TYPE_CHECKING:
            import flash_attn
            torch.cuda.synchronize()
        try:
            import bitsandbytes
        except ImportError:
            bitsandbytes = None
        if is_deepspeed_available():
            import deepspeed
        def load():
            import vllm
            return vllm.LLM("m")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    """)
    assert [k for k, *_ in got if k == "flash-attn"] == []
    assert ("bitsandbytes", "import bitsandbytes", 7, True) in got
    assert ("deepspeed", "import deepspeed", 11, True) in got
    assert ("vllm", "import vllm", 13, True) in got
    assert ("vllm", "vllm.LLM()", 14, True) in got  # through a name imported inside the function
    # PyTorch's CUDA path is the one a fake GPU takes: never optional
    assert ("torch-cuda", "torch.cuda.is_available()", 15, False) in got
    assert ("torch-cuda", "torch.cuda.synchronize()", 16, False) in got


@pytest.mark.parametrize("body,runs,runner", [
    ("main()", True, False),
    ("pass", False, False),
    ('"""doc"""\n    ...', False, False),
    ("unittest.main()", True, True),
    ("import sys, pytest\n    sys.exit(pytest.main([__file__]))", True, True),
    ("run_tests()", True, True),
])
def test_main_blocks(body, runs, runner):
    facts = scan_python(f"import unittest\nif __name__ == '__main__':\n    {body}\n")
    assert facts.main is not None and facts.main.line == 2
    assert (facts.main.runs, facts.main.test_runner) == (runs, runner)


def test_relative_imports_resolve_against_the_package():
    facts = scan_python("from . import a\nfrom ..b import c\nfrom .d.e import f as g\n", "pkg.sub")
    assert [(i.module, i.names) for i in facts.imports] == [("pkg.sub", ("a",)), ("pkg.b", ("c",)),
                                                            ("pkg.sub.d.e", ("f",))]


def test_pattern_reader_matches_the_parser_on_imports():
    source = textwrap.dedent("""
        import os, json as j
        from .x import (a,
            b,  # a comment
            c)
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .heavy import Heavy
        else:
            import light
        def f():
            from torch import nn
        s = "we import nothing here"
    """).encode()
    by_pattern = [(i.module, i.names) for i in imports_by_pattern(source, "pkg").imports]
    parsed = [(i.module, i.names) for i in scan_python(source, "pkg").imports]
    assert by_pattern == parsed


def test_needs_parse():
    plain = b"import os\nfrom torch import nn\n"
    assert not needs_parse(plain, imports_by_pattern(plain).imports)
    for source in (b"x.cuda()", b"if __name__ == '__main__': pass", b"dist.init_process_group()",
                   b"from torch import cuda", b"import flash_attn",
                   b"from torch.utils.cpp_extension import load"):
        assert needs_parse(source, imports_by_pattern(source).imports), source


def _pieces_and_whole(data: bytes, monkeypatch) -> tuple:
    from fakegpu.analyze.repo import python_scan

    assert len(data) > python_scan.CHUNKED_FROM
    pieces = scan_python(data)
    with monkeypatch.context() as m:
        m.setattr(python_scan, "CHUNKED_FROM", 1 << 40)
        whole = scan_python(data)
    return pieces, whole


@pytest.mark.parametrize("doc", ["", 'DOC = """\ndef not_a_function():\n    pass\n"""\n'])
def test_a_large_file_read_in_pieces_gives_what_the_whole_parse_gives(doc, monkeypatch):
    # With DOC, a column-0 `def` inside a string cuts a piece wrongly: the whole file is parsed instead.
    quiet = "".join(f"def quiet_{i}(a,\n        b):\n    return a + b\n\n" for i in range(400))
    source = textwrap.dedent("""\
        import torch
        import triton
        from torch.cuda import synchronize as sync
        @triton.jit
        def kernel(
            x,
        ):
            pass
        """) + doc + quiet + textwrap.dedent("""\
        class Model(torch.nn.Module):
            def forward(self, x):
                sync()
                return x.cuda()
        LIMIT = 3
        if __name__ == "__main__":
            Model().forward(torch.zeros(LIMIT))
        """)
    lines = source.splitlines()
    pieces, whole = _pieces_and_whole(source.encode(), monkeypatch)
    assert [(s.kind, s.detail, s.line) for s in pieces.sites] == [(s.kind, s.detail, s.line) for s in whole.sites]
    assert [(s.kind, s.line) for s in pieces.sites] == [
        ("triton", 2), ("triton-kernel", 4), ("torch-cuda", lines.index("        sync()") + 1),
        ("torch-cuda", lines.index("        return x.cuda()") + 1)]
    assert pieces.main == whole.main and pieces.main.line == lines.index('if __name__ == "__main__":') + 1
    assert pieces.names == whole.names and {"quiet_399", "Model", "kernel", "LIMIT"} <= pieces.names
