"""The global-memory scratch of CUDA's reduction kernels (ATen's Reduce.cuh). No torch here.

A reduction that splits each output's inputs across thread blocks (sum, mean, amax, norm, var... over many
values into few outputs: a bias gradient, a loss's mean) takes two buffers from the caching allocator for the
call only: a staging buffer for the blocks' partial results and one semaphore per output block column. The CPU
kernel has neither, so fakecuda modeled none, and the 2-20 MiB staging buffers of bias-gradient sums were
missing from native mode's allocation sequence (the segments they open are why peak reserved came out 20% low
on a TransformerEncoder step). Whether a launch splits, and into how many blocks, follows the kernel's launch
configuration, which depends on the iteration's layout (TensorIterator's reordered, coalesced dimensions), the
accumulator's size and the device's SM count and threads per SM; it is replayed here rule by rule and checked
against native mode (PyTorch's own CUDA host code on simulated memory) in tests/fakecuda/test_reduce.py.
"""

from __future__ import annotations

from dataclasses import dataclass

_WARP = 32
_MIN_VALUES_PER_THREAD = 16
_MAX_VALUES_PER_THREAD = 256


@dataclass(frozen=True)
class Launch:
    """What one reduction launch is: the accumulator type's size and the kernel's vector widths."""

    arg_bytes: int  # sizeof(arg_t): the accumulator (float for half inputs, a (value, index) pair for argmax)
    scalar_bytes: int  # sizeof(scalar_t): the input element
    vt0: int = 4
    input_vec_size: int = 4
    max_threads: int = 512  # 256 for complex double


def iteration(shape: list[int], strides: list[int], reduced: set[int],
              elem: int) -> tuple[list[int], list[int], list[int]]:
    """TensorIterator's layout of a one-input reduction: (shape, output element strides, input byte strides),
    dims reordered fastest first with the reduced ones in front, then coalesced. The output is a fresh contiguous
    tensor over the kept dims (stride 0 on the reduced ones); its strides only order and coalesce dims, for
    which elements serve as well as bytes."""
    ndim = len(shape)
    out = [0] * ndim
    step = 1
    for d in reversed(range(ndim)):
        if d not in reduced:
            out[d] = step
            step *= shape[d]
    inp = [s * elem for s in strides]

    def should_swap(d0: int, d1: int) -> int:
        for k, st in enumerate((out, inp)):
            s0, s1 = st[d0], st[d1]
            if k == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(reversed(range(ndim)))
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    sh = [shape[p] for p in perm]
    ops = [[out[p] for p in perm], [inp[p] for p in perm]]
    if len(sh) > 1:
        prev = 0
        for d in range(1, len(sh)):
            if sh[prev] == 1 or sh[d] == 1 or all(sh[prev] * st[prev] == st[d] for st in ops):
                if sh[prev] == 1:
                    for st in ops:
                        st[prev] = st[d]
                sh[prev] *= sh[d]
            else:
                prev += 1
                if prev != d:
                    for st in ops:
                        st[prev] = st[d]
                    sh[prev] = sh[d]
        sh = sh[:prev + 1]
        ops = [st[:prev + 1] for st in ops]
    return sh, ops[0], ops[1]


def _last_pow2(n: int) -> int:
    return max(1, 1 << (n.bit_length() - 1)) if n > 0 else 1


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _output_vec_size(shape: list[int], inp: list[int], num_reduce_dims: int, scalar_bytes: int,
                     base_elements: int) -> int:
    vec = 4

    def update(n: int) -> None:
        nonlocal vec
        while n % vec:
            vec //= 2

    update(base_elements)
    update(shape[num_reduce_dims])
    for j, s in enumerate(inp):
        if j != num_reduce_dims:
            update(s // scalar_bytes)
    return vec


def scratch(shape: list[int], strides: list[int], reduced: set[int], launch: Launch, sm_count: int,
            threads_per_sm: int, storage_offset: int = 0) -> tuple[int, int]:
    """(staging bytes, semaphore bytes) one reduction launch takes; (0, 0) when it reduces within blocks."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return 0, 0
    sh, out, inp = iteration(shape, strides, reduced, launch.scalar_bytes)
    nreduce = sum(1 for s in out if s == 0)
    num_outputs = 1
    for s, o in zip(sh, out, strict=True):
        if o != 0:
            num_outputs *= s
    inputs_per_output = numel // num_outputs
    if sh:
        on_fastest = nreduce == len(sh) or inp[0] < inp[nreduce]
        if on_fastest:
            dim0, dim1, fastest = inputs_per_output, num_outputs, inp[0]
        else:
            dim0, dim1, fastest = num_outputs, inputs_per_output, inp[nreduce]
    else:
        on_fastest, fastest, dim0, dim1 = True, launch.scalar_bytes, 1, 1
    output_vec = 1
    if fastest == launch.scalar_bytes:
        if on_fastest and dim0 > 128 and nreduce == 1 and launch.vt0 >= launch.input_vec_size:
            dim0 //= launch.input_vec_size
        elif not on_fastest:
            output_vec = _output_vec_size(sh, inp, nreduce, launch.scalar_bytes, storage_offset)
            dim0 //= output_vec
    max_threads = launch.max_threads // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, _WARP)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    threads = width * height
    step_in = step_out = 1
    split_x = split_y = False
    if on_fastest:
        split_x, step_in = True, step_in * width
    else:
        step_out *= width
    values = _div_up(inputs_per_output, step_in)
    if values >= min(height * _MIN_VALUES_PER_THREAD, _MAX_VALUES_PER_THREAD):
        split_y, step_in = True, step_in * height
    else:
        step_out *= height
    values = _div_up(inputs_per_output, step_in)
    target = sm_count * (threads_per_sm // threads)
    grid_x = _div_up(num_outputs // output_vec, step_out)
    ctas = 1
    if split_y and values >= _MAX_VALUES_PER_THREAD and grid_x <= target:
        ctas = max(min(_div_up(target, grid_x), _div_up(values, _MIN_VALUES_PER_THREAD)),
                   _div_up(values, _MAX_VALUES_PER_THREAD))
    if ctas <= 1:
        return 0, 0
    staging = launch.arg_bytes * num_outputs * ctas
    if not split_x:
        staging *= width * output_vec
    return staging, 4 * grid_x
