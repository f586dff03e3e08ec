"""Which FakeGPU path runs what a repository found, and the command to try.

    cpu        no GPU use found: FakeGPU is not needed
    fakecuda   PyTorch on CUDA: fakecuda runs it with correct numerics on the CPU (`fakegpu preflight`)
    native     CUDA reached outside PyTorch's Python surface (NVML, CuPy, JAX/TF GPU, a prebuilt CUDA library):
               `fakegpu run` serves its CUDA and NVML calls, kernels are not run, so values are not valid
    container  started by a Dockerfile on a CUDA image or a compose service that reserves GPUs: FakeGPU's runtime
               (or its hook, for compose's reservation)
    real-gpu   custom CUDA kernels whose results are the point (Triton, CUDA extensions, flash_attn, ...): no fake
               computes them; native mode rehearses memory and control flow only

The order is that of severity: an entry point takes the most severe path among the sites it reaches (optional
sites, those that run only where an optional package is installed, are listed but do not decide)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

PATHS = ("cpu", "fakecuda", "native", "container", "real-gpu")
DEVICES = "a100:1"

# kind -> (path, why a site of this kind leads there)
KINDS: dict[str, tuple[str, str]] = {
    "torch-cuda": ("fakecuda", "PyTorch on CUDA: fakecuda runs it with real numerics on the CPU"),
    "torch-compile": ("fakecuda", "torch.compile: on CUDA it generates Triton kernels; fakecuda runs the eager "
                                  "ops (if compiling fails there, TORCH_COMPILE_DISABLE=1 runs eager)"),
    "distributed": ("fakecuda", "torch.distributed: fakecuda serves backend nccl on gloo with real collectives"),
    "distributed-cpu": ("cpu", "torch.distributed on gloo: runs on the CPU as it is"),
    "nvml": ("native", "NVML (pynvml / nvidia-ml-py): FakeGPU's libnvidia-ml answers under `fakegpu run`"),
    "cupy": ("native", "CuPy: its kernels are not run by any fake (values invalid); `fakegpu run` serves its "
                       "runtime calls, results need a real GPU"),
    "jax-gpu": ("native", "JAX on a GPU backend: only native mode's CUDA libraries can serve it (values invalid)"),
    "tensorflow-gpu": ("native", "TensorFlow GPU use: only native mode's CUDA libraries can serve it (values "
                                 "invalid)"),
    "prebuilt-cuda": ("native", "a prebuilt library with CUDA code: native mode loads it, its kernels do not run "
                                "(values invalid)"),
    "cpp-extension": ("real-gpu", "a CUDA extension built from source (torch.utils.cpp_extension): its kernels "
                                  "need a real GPU; fakecuda cannot run them, native mode does not execute them"),
    "cpp-extension-cpu": ("cpu", "a C++ (CPU) extension built with torch.utils.cpp_extension"),
    "triton-kernel": ("real-gpu", "a Triton kernel: compiled for and run on a real GPU only"),
    "flash-attn": ("real-gpu", "flash_attn: fused CUDA attention kernels, real GPU only"),
    "bitsandbytes": ("real-gpu", "bitsandbytes: quantized CUDA kernels, real GPU only"),
    "vllm": ("real-gpu", "vLLM: custom CUDA kernels (paged attention), real GPU only"),
    "xformers": ("real-gpu", "xformers: custom CUDA kernels, real GPU only"),
    "apex": ("real-gpu", "NVIDIA apex: fused CUDA kernels, real GPU only"),
    "deepspeed": ("real-gpu", "DeepSpeed: builds and runs its own CUDA ops; native mode can rehearse the launch "
                              "only"),
    "hub-kernels": ("real-gpu", "Hugging Face `kernels`: compiled CUDA kernels fetched from the Hub, real GPU only"),
    "tensorrt": ("real-gpu", "TensorRT: engines built for and run on a real GPU"),
    "mamba-ssm": ("real-gpu", "mamba_ssm / causal_conv1d: custom CUDA kernels, real GPU only"),
    "triton": ("cpu", "imports Triton (no kernel defined here)"),
    "jax": ("cpu", "imports JAX (no GPU device asked for)"),
    "tensorflow": ("cpu", "imports TensorFlow (no GPU use found)"),
}


def site_path(kind: str, detail: str) -> tuple[str, str]:
    """(path, kind as judged) of one site: a gloo process group or a C++-only extension needs no GPU."""
    if kind == "distributed" and "backend=gloo" in detail:
        kind = "distributed-cpu"
    elif kind == "cpp-extension" and "[C++ only]" in detail:
        kind = "cpp-extension-cpu"
    return KINDS.get(kind, ("cpu", kind))[0], kind


def worse(a: str, b: str) -> str:
    return a if PATHS.index(a) >= PATHS.index(b) else b


@dataclass
class Launch:
    """How an entry point is started by hand: the argv after the FakeGPU part."""

    argv: list[str]
    distributed: bool = False

    def text(self) -> str:
        return shlex.join(self.argv)


def command(path: str, launch: Launch, container: dict | None = None) -> tuple[str, str]:
    """(command to try, what it will and will not show) for an entry point on `path`."""
    run = launch.text()
    if path == "cpu":
        return run, "no GPU use found: it runs as it is, FakeGPU is not needed"
    if path == "fakecuda":
        if launch.distributed:
            return (f"fakegpu run --mode fakecuda --devices a100:2 -- {run}",
                    "fakecuda: real numerics on the CPU, nccl served by gloo, on two fake A100s")
        return (f"fakegpu preflight --devices {DEVICES} -- {run}",
                "fakecuda: real numerics on the CPU, peak memory per fake device and whether it fits")
    if path == "native":
        return (f"fakegpu run --devices {DEVICES} -- {run}",
                "native mode: CUDA and NVML calls served, kernels not run: values computed on the device are invalid")
    if path == "container" and container:
        if container["kind"] == "compose-gpu":
            return (f"sudo fakegpu runtime install --gpus --devices {DEVICES} && docker compose -f "
                    f"{shlex.quote(container['path'])} up",
                    "compose's GPU reservation served by FakeGPU's hook (restart dockerd after the install)")
        return (f"docker run --rm --runtime=fakegpu -e FAKEGPU_DEVICES={DEVICES} "
                f"$(docker build -q -f {shlex.quote(container['path'])} .)",
                "the image on fake GPUs through FakeGPU's runtime (`sudo fakegpu runtime install` once)")
    return (f"fakegpu run --devices {DEVICES} -- {run}",
            "needs a real GPU for its results: this native-mode run only rehearses memory and control flow (kernels "
            "are not executed)")
