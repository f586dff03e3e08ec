"""The staging buffers of CUDA's split reductions (fakegpu/fakecuda/reduce.py), against figures native mode
measured: PyTorch 2.15's own Reduce.cuh host code on a simulated A100 (108 SMs, 2048 threads per SM), read from
its caching allocator's trace. The same cases run differentially in tests/memory_fidelity (workload
`reductions`), where fakecuda's peaks equal native mode's to the byte."""

from __future__ import annotations

import pytest

from fakegpu.fakecuda.reduce import Launch, iteration, scratch

A100 = (108, 2048)
F32 = Launch(arg_bytes=4, scalar_bytes=4)


def contiguous(shape):
    strides, step = [], 1
    for s in reversed(shape):
        strides.insert(0, step)
        step *= s
    return strides


@pytest.mark.parametrize("shape, reduced, expected", [
    ((1024, 256), {0}, (2097152, 8)),      # a Linear(., 256)'s bias gradient over 1024 rows
    ((1024, 1024), {0}, (8388608, 32)),
    ((64, 16, 768), {0, 1}, (6291456, 24)),  # over two leading dims: coalesced into one
    ((16, 64, 256), {0, 1, 2}, (128, 4)),  # a loss's mean over everything
    ((1024, 256), {1}, (0, 0)),            # along rows: each block reduces its own outputs
    ((16, 8), {0}, (0, 0)),                # too few values per thread to split
])
def test_scratch_matches_native_mode(shape, reduced, expected):
    assert scratch(list(shape), contiguous(shape), reduced, F32, *A100) == expected


def test_the_device_sets_the_split():
    # many outputs: the blocks per output are what fills the device, so fewer SMs take a smaller staging buffer
    shape = [4096, 8192]
    big, small = (scratch(shape, contiguous(shape), {0}, F32, *device) for device in (A100, (40, 1024)))
    assert big == (4 * 8192 * 27 * 128, 4 * 64) and small == (4 * 8192 * 5 * 128, 4 * 64)


def test_accumulator_and_vector_width():
    # a (value, index) pair accumulates in 16 bytes, Welford's state too (and runs 2 values per thread)
    pair = scratch([1024, 256], [256, 1], {0}, Launch(16, 4), *A100)
    welford = scratch([1024, 256], [256, 1], {0}, Launch(16, 4, vt0=2, input_vec_size=2), *A100)
    assert pair == (8388608, 8) and welford[0] == 8388608


def test_iteration_puts_reduced_dims_first_and_coalesces():
    shape, out, inp = iteration([64, 16, 768], contiguous((64, 16, 768)), {0, 1}, 4)
    assert shape == [1024, 768] and out == [0, 1] and inp == [3072, 4]
    shape, out, inp = iteration([256, 1024], [1, 256], {1}, 4)  # a transposed input, reduced along its rows
    assert shape == [1024, 256] and out == [0, 1] and inp == [1024, 4]


def test_empty_and_scalar_inputs():
    assert scratch([0, 8], [8, 1], {0}, F32, *A100) == (0, 0)
    assert scratch([], [], set(), F32, *A100) == (0, 0)
