"""One process's collectives across its own CUDA devices: what nn.DataParallel and torch.cuda.comm call.

torch.nn.parallel.comm (broadcast, scatter, gather) reaches C++ (`torch._C._broadcast_coalesced`, `_scatter`,
`_gather`, ...) that checks for CUDA tensors and copies with the driver, and its reduce_add goes to single-process
NCCL (`torch._C._nccl_reduce`, ...) whenever the inputs are CUDA tensors on distinct devices. Here each is the same
work on fake tensors, run under the function mode so that every buffer CUDA's version takes is taken from the
fake devices' models in the same shape: broadcast_coalesced flattens each bucket on the source device, copies the
flat buffer to every other device and hands out views of it (a replica's parameters live in those buckets, as
on CUDA); scatter's chunks that stay on their device are views; gather writes one fresh tensor on the destination.
The NCCL calls write their outputs in place and take no device memory of their own.

nn.DataParallel's autograd Functions (Broadcast, ReduceAddCoalesced, Gather, Scatter) check that their inputs are
not CPU tensors, and in backward the gradients autograd hands them are fresh tensors, which reach Python as plain
CPU tensors: backward.py badges them, as every custom Function's, with the devices CUDA's would be on. Their
background copy streams (`_get_stream`) are fake streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch._utils import _reorder_tensors_as, _take_tensors

from fakegpu.fakecuda.backward import under_mode
from fakegpu.fakecuda.dispatch import suspended
from fakegpu.fakecuda.tensor import FAKE_TYPES

# ncclRedOp_t, as torch.cuda.nccl passes it
_SUM, _PROD, _MAX, _MIN, _AVG = range(5)


class Collectives:
    """The replacements, bound to the active mode (its device resolution and the runtime's current device)."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode

    # -- torch.nn.parallel.comm's C++

    def broadcast(self, tensor: torch.Tensor, devices: Sequence[Any]) -> list[torch.Tensor]:
        source = _device_of(tensor)
        targets = self._indices(devices, "broadcast to")
        return [tensor if d == source else tensor.to(f"cuda:{d}", copy=True) for d in targets]

    def broadcast_out(self, tensor: torch.Tensor, out: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        for t in out:
            _check_fake(t, "broadcast_out's outputs")
            if t.shape != tensor.shape:
                raise RuntimeError(f"Output tensor must have the same shape as the input tensor: expected "
                                   f"{list(tensor.shape)}, got {list(t.shape)}")
            t.copy_(tensor)
        return list(out)

    def broadcast_coalesced(self, tensors: Sequence[torch.Tensor], devices: Sequence[Any],
                            buffer_size: int) -> list[list[torch.Tensor]]:
        targets = self._indices(devices, "broadcast to")
        source = targets[0]
        for t in tensors:
            if type(t) not in FAKE_TYPES or t._fc_index != source:
                raise RuntimeError(f"All tensors must be on devices[0]: {source}")
        outputs: list[list[torch.Tensor]] = [list(tensors)] + [[] for _ in targets[1:]]
        for chunk in _take_tensors(list(tensors), buffer_size):
            if any(t.is_sparse for t in chunk):
                for i, d in enumerate(targets[1:], 1):
                    outputs[i] += [t.to(f"cuda:{d}", copy=True) for t in chunk]
                continue
            flat = torch.cat([t.reshape(-1) for t in chunk])  # a temporary on the source device, as CUDA's
            for i, d in enumerate(targets[1:], 1):
                copy = flat.to(f"cuda:{d}", copy=True)
                offset = 0
                for t in chunk:  # views of the bucket, without autograd history, as CUDA's outputs are
                    outputs[i].append(copy.narrow(0, offset, t.numel()).view(t.shape).detach())
                    offset += t.numel()
            del flat
        return [outputs[0]] + [_reorder_tensors_as(o, tensors) for o in outputs[1:]]

    def scatter(self, tensor: torch.Tensor, devices: Sequence[Any], chunk_sizes: Sequence[int] | None, dim: int,
                streams: Any) -> list[torch.Tensor]:
        targets = self._indices(devices, "scatter to")
        if chunk_sizes is not None:
            if len(chunk_sizes) != len(targets):
                raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got "
                                   f"len(devices) = {len(targets)} and len(chunk_sizes) = {len(chunk_sizes)}")
            if sum(chunk_sizes) != tensor.size(dim):
                raise RuntimeError(f"Chunk sizes should sum to {tensor.size(dim)}, but got {sum(chunk_sizes)}")
            chunks = tensor.split(list(chunk_sizes), dim)
        else:
            chunks = tensor.chunk(len(targets), dim)
        source = tensor._fc_index if type(tensor) in FAKE_TYPES else -1  # (a host tensor is scattered too)
        out = []
        # (chunk() may make fewer chunks than there are devices: CUDA's returns as many)
        for i, (chunk, d) in enumerate(zip(chunks, targets, strict=False)):
            if d == source:
                out.append(chunk)
                continue
            with _on(streams, i):
                out.append(chunk.to(f"cuda:{d}", non_blocking=True))
        return out

    def scatter_out(self, tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int,
                    streams: Any) -> list[torch.Tensor]:
        sizes = [t.size(dim) for t in out]
        if sum(sizes) != tensor.size(dim):
            raise RuntimeError(f"Chunk sizes should sum to {tensor.size(dim)}, but got {sum(sizes)}")
        for i, (chunk, t) in enumerate(zip(tensor.split(sizes, dim), out, strict=True)):
            _check_fake(t, "scatter_out's outputs")
            with _on(streams, i):
                t.copy_(chunk, non_blocking=True)
        return list(out)

    def gather(self, tensors: Sequence[torch.Tensor], dim: int, destination: int | None) -> torch.Tensor:
        first = _check_gather(tensors, dim)
        if destination is None:
            destination = self.mode.runtime.current
        device = "cpu" if destination == -1 else f"cuda:{self._indices([destination], 'gather to')[0]}"
        shape = list(first.shape)
        shape[dim] = sum(t.size(dim) for t in tensors)
        result = torch.empty(shape, dtype=first.dtype, device=device)
        return self.gather_out(tensors, result, dim)

    def gather_out(self, tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int) -> torch.Tensor:
        _check_gather(tensors, dim)
        start = 0
        for t in tensors:
            out.narrow(dim, start, t.size(dim)).copy_(t, non_blocking=True)
            start += t.size(dim)
        return out

    # -- torch.cuda.nccl's single-process collectives

    def nccl_all_reduce(self, inputs, outputs, op: int, streams: Any = None, comms: Any = None) -> None:
        total = _reduced(_tensors(inputs), op)
        with _plain():
            for out in _tensors(outputs):
                out.copy_(total.view_as(out))

    def nccl_reduce(self, inputs, output, root: int, op: int, streams: Any = None, comms: Any = None) -> None:
        with _plain():
            _tensors([output])[0].copy_(_reduced(_tensors(inputs), op).view_as(output))

    def nccl_broadcast(self, inputs, root: int, streams: Any = None, comms: Any = None) -> None:
        tensors = _tensors(inputs)
        with _plain():
            for i, t in enumerate(tensors):
                if i != root:
                    t.copy_(tensors[root])

    def nccl_all_gather(self, inputs, outputs, streams: Any = None, comms: Any = None) -> None:
        tensors = _tensors(inputs)
        with _plain():
            gathered = torch.cat([t.reshape(-1) for t in tensors])
            for out in _tensors(outputs):
                out.copy_(gathered.view_as(out))

    def nccl_reduce_scatter(self, inputs, outputs, op: int, streams: Any = None, comms: Any = None) -> None:
        outs = _tensors(outputs)
        total = _reduced(_tensors(inputs), op).reshape(-1)
        with _plain():
            start = 0
            for out in outs:
                out.copy_(total[start:start + out.numel()].view_as(out))
                start += out.numel()

    # -- helpers

    def _indices(self, devices: Sequence[Any], what: str) -> list[int]:
        if not devices:
            raise RuntimeError(f"Expected at least one device to {what}")
        found = []
        for d in devices:
            index = self.mode.resolve(d)  # (raises CUDA's invalid device ordinal for one past the fake devices)
            if index is None:
                raise RuntimeError(f"Expected CUDA devices to {what}, got {d!r}")
            found.append(index)
        return found

    # -- nn.DataParallel's streams (its Functions' gradients are badged as every custom Function's: backward.py)

    def data_parallel(self) -> list[tuple[Any, str, Any]]:
        from torch.nn.parallel import _functions as f

        streams: dict[int, Any] = {}

        def get_stream(device: torch.device) -> Any:
            """A background stream per fake device, made once, as torch's own _get_stream keeps them."""
            if device.type != "cuda":
                return None
            index = self.mode.resolve(device)
            if index not in streams:
                streams[index] = torch.cuda.Stream(index)
            return streams[index]

        return [(f, "_get_stream", get_stream)]

    def replacements(self) -> list[tuple[Any, str, Any]]:
        comm = {"_broadcast": self.broadcast, "_broadcast_out": self.broadcast_out,
                "_broadcast_coalesced": self.broadcast_coalesced, "_scatter": self.scatter,
                "_scatter_out": self.scatter_out, "_gather": self.gather, "_gather_out": self.gather_out}
        nccl = {"_nccl_all_reduce": self.nccl_all_reduce, "_nccl_reduce": self.nccl_reduce,
                "_nccl_broadcast": self.nccl_broadcast, "_nccl_all_gather": self.nccl_all_gather,
                "_nccl_reduce_scatter": self.nccl_reduce_scatter}
        # even where the build has none: a CPU-only torch's nn.DataParallel needs comm's on fake devices, and
        # distributed.py answers torch.cuda.nccl.is_available() there as a CUDA build does
        names = {**comm, **nccl}
        return [(torch._C, name, under_mode(self.mode, fn)) for name, fn in names.items()] + self.data_parallel()


def _device_of(t: Any) -> int:
    _check_fake(t, "the input")
    return t._fc_index


def _check_fake(t: Any, what: str) -> None:
    if type(t) not in FAKE_TYPES:
        device = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise RuntimeError(f"Expected {what} to be a CUDA tensor, got one on {device}")


def _check_gather(tensors: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    if not -first.dim() <= dim < first.dim():  # (a scalar has no dimension to gather along)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-first.dim()}, "
                         f"{first.dim() - 1}], but got {dim})")
    for i, t in enumerate(tensors):
        _check_fake(t, "all tensors")
        if t.dim() != first.dim():
            raise RuntimeError(f"Expected all input tensors to have the same number of dimensions, but got "
                               f"{first.dim()} and {t.dim()}")
        for d in range(first.dim()):
            if d != dim % first.dim() and t.size(d) != first.size(d):
                raise RuntimeError(f"Input tensor at index {i} has invalid shape {list(t.shape)}, but expected "
                                   f"{list(first.shape)} in all dimensions but {dim}")
    return first


def _tensors(items: Any) -> list[torch.Tensor]:
    items = [items] if isinstance(items, torch.Tensor) else list(items)
    devices = set()
    for t in items:
        _check_fake(t, "every NCCL input and output")
        if not t.is_contiguous():
            raise RuntimeError("Tensors must be contiguous")
        devices.add(t._fc_index)
    if len(devices) != len(items):
        raise RuntimeError("Expected list of tensors on unique devices")
    return items


def _reduced(tensors: list[torch.Tensor], op: int) -> torch.Tensor:
    """The reduction of same-sized tensors, computed on the host without charging the devices (NCCL reduces in
    its own buffers)."""
    if len({t.numel() for t in tensors}) != 1:
        raise RuntimeError("Tensors must have the same number of elements")
    with _plain():
        flat = [t.reshape(-1) for t in tensors]
        if op in (_SUM, _AVG):
            total = torch.stack(flat).sum(0, dtype=flat[0].dtype)
            return total / len(flat) if op == _AVG else total
        if op == _PROD:
            return torch.stack(flat).prod(0, dtype=flat[0].dtype)
        if op == _MAX:
            return torch.stack(flat).amax(0)
        if op == _MIN:
            return torch.stack(flat).amin(0)
    raise RuntimeError(f"Unsupported NCCL reduction op {op}: accepted are sum (0), prod (1), max (2), min (3), "
                       "avg (4)")


def _on(streams: Any, i: int) -> Any:
    """The i-th copy's stream current while it runs, as CUDA's scatter does: its buffer then comes from that
    stream's pool (nn.DataParallel scatters a host batch on background streams: a segment of their own)."""
    stream = streams[i] if streams is not None and i < len(streams) else None
    return stream if stream is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _plain() -> Iterator[None]:
    """Ops on the host, neither badged nor charged: NCCL's work, which takes no device memory."""
    with torch._C.DisableTorchFunction(), suspended():
        yield
