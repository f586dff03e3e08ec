"""Where fakecuda's memory figures are known not to equal CUDA's, op by op. No torch here.

The differential harness (tests/memory_fidelity, `make memory-fidelity`) runs PyTorch's op database under native
mode (PyTorch's real CUDA path on simulated memory, the oracle) and under fakecuda. The ops listed here are the
ones it finds off by more than 2% (op database, torch 2.15, one sample per op), with the reason, those a real H200
showed off (tests/data/gpu/h200/mem_opdb.json: the op database's first 1506 samples, torch 2.11; compared in
tests/real_gpu/test_fakecuda_memory.py), and the op families nothing has measured yet. The charging mode
(dispatch.py) counts the calls a process makes to them, and the preflight report lists them as the uncertainty of
its verdict: a verdict whose peak came from these ops should be checked with `fakegpu preflight --mode native`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    direction: str  # "low": fakecuda charges less than CUDA allocates; "high": more; "unchecked": not measured
    why: str


_SCRATCH = "its CUDA kernel takes scratch memory fakecuda does not model"

# ATen op (overload packet) names, as `torch.ops.aten.<name>` spells them
KNOWN: dict[str, Gap] = {
    "sort": Gap("low", f"{_SCRATCH} (cub's radix sort keys, values and temporary storage)"),
    "argsort": Gap("low", f"{_SCRATCH} (cub's radix sort)"),
    "msort": Gap("low", f"{_SCRATCH} (cub's radix sort)"),
    "topk": Gap("low", f"{_SCRATCH} (a radix select's buffers for large k)"),
    "embedding_bag": Gap("low", f"{_SCRATCH} (sorted indices and offsets for its segment sums)"),
    "_embedding_bag": Gap("low", f"{_SCRATCH} (sorted indices and offsets for its segment sums)"),
    "_unsafe_masked_index": Gap("low", f"{_SCRATCH} (index_put's sorted indices in backward)"),
    "_unsafe_masked_index_put_accumulate": Gap("low", f"{_SCRATCH} (sorted indices for accumulation)"),
    "_ctc_loss": Gap("low", f"{_SCRATCH} (alpha and beta tables in CUDA's layout)"),
    "slice_scatter": Gap("low", "CUDA's backward keeps a gradient copy the CPU formula does not"),
    "cumprod": Gap("high", "the CPU build's backward formula allocates more than CUDA's"),
    "linalg_lu_factor_ex": Gap("low", f"{_SCRATCH} (cuSOLVER / batched cuBLAS LU workspace and pivots)"),
    "_linalg_det": Gap("low", f"{_SCRATCH} (cuSOLVER / batched cuBLAS LU workspace and pivots)"),
    "_linalg_slogdet": Gap("low", f"{_SCRATCH} (cuSOLVER / batched cuBLAS LU workspace and pivots)"),
    "logdet": Gap("low", f"{_SCRATCH} (cuSOLVER / batched cuBLAS LU workspace and pivots)"),
    # measured on the H200 (torch 2.11): cuSOLVER's workspaces and info arrays, cuDNN's convolution workspaces
    **dict.fromkeys(["cholesky_inverse", "cholesky_solve", "geqrf", "ormqr", "linalg_qr", "_linalg_svd"],
                    Gap("low", "cuSOLVER takes workspaces and info arrays fakecuda does not model (a real H200: "
                               "geqrf of a 5 x 5 matrix peaks 3 MiB above fakecuda)")),
    **dict.fromkeys(["convolution", "convolution_backward"],
                    Gap("low", "cuDNN takes workspaces fakecuda does not model (a real H200: the operands in "
                               "another layout, e.g. a 9.2 MiB weight-gradient workspace for Conv1d(64, 128, 5) "
                               "on 16 x 64 x 512)")),
    "matrix_exp": Gap("low", "CUDA's matrix_exp keeps more temporaries than the CPU build's (a real H200: 10 KiB "
                             "at the peak for a 5 x 5 matrix, fakecuda 0.5 KiB)"),
}

# Ops native mode cannot run (FakeGPU's native libraries have no cuSOLVER or cuFFT), so the harness has no
# figure for them; both libraries take workspaces fakecuda does not model.
_CUSOLVER = Gap("unchecked", "cuSOLVER takes workspaces fakecuda does not model; native mode cannot run it to measure")
_CUFFT = Gap("unchecked", "cuFFT takes a plan and workspace fakecuda does not model; native mode cannot run it")
UNCHECKED: dict[str, Gap] = {
    **dict.fromkeys(["linalg_cholesky_ex", "cholesky", "_linalg_eigh", "linalg_eig", "linalg_householder_product",
                     "linalg_inv_ex", "linalg_ldl_factor_ex", "linalg_ldl_solve", "linalg_lstsq", "linalg_lu",
                     "linalg_lu_solve", "_linalg_solve_ex"], _CUSOLVER),
    **dict.fromkeys(["_fft_c2c", "_fft_r2c", "_fft_c2r"], _CUFFT),
}


def gap(name: str) -> Gap | None:
    """The known gap of an ATen op (its overload packet's name), or None where fakecuda matches CUDA."""
    return KNOWN.get(name) or UNCHECKED.get(name)


def uncertainty(calls: dict[str, int]) -> list[dict]:
    """The report's entries for the ops a run called (name -> calls), most called first."""
    out = []
    for name, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        g = gap(name)
        if g is not None:
            out.append({"op": f"aten.{name}", "calls": n, "direction": g.direction, "why": g.why})
    return out
