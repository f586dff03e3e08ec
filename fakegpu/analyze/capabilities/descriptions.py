"""What each native library's hand-written (`impl`) functions do in native mode, in a line a user can act on, and
which of them only record the work.

The API tables say which functions are written by hand, not what "written" means for each library: an NVML query
answers from the device model, while a cuBLAS GEMM is validated and counted but not computed. These lines say
that per library (from native/README.md, which has the detail), and RECORDED names the implemented functions whose
work is validated and recorded but never done (kernel launches, GEMMs, cuDNN executions). Tests hold both to the
tables (a new table without a line fails, a pattern that matches no impl row fails) and RECORDED to the sources
(each such function's file calls the library's recording path)."""

from __future__ import annotations

# name -> (title, what its implemented functions do in native mode)
LIBRARIES: dict[str, tuple[str, str]] = {
    "nvml": ("NVML (libnvidia-ml)",
             "queries answer from the device model (profiles, shared per-process memory, the load model); "
             "changes a container cannot make answer NO_PERMISSION"),
    "cuda": ("CUDA driver (libcuda)",
             "devices, contexts, memory (allocations, VMM, pools), streams, events, graphs are real; "
             "kernel launches are recorded (parameters read, kernels not executed; PyTorch's constant fills are "
             "carried out)"),
    "cudart": ("CUDA runtime (libcudart)",
               "device, memory, stream and graph calls forward to libcuda for real; kernel registration and "
               "launches are recorded (counted per kernel, not executed)"),
    "cublas": ("cuBLAS (libcublas)",
               "handles and settings are real; GEMM, gemv, ger, dot, trsm/getrs are validated and counted with "
               "FLOPs, not computed"),
    "cublasLt": ("cuBLASLt (libcublasLt)",
                 "descriptors and heuristics are real; cublasLtMatmul is validated and counted, not computed"),
    "cudnn": ("cuDNN (libcudnn)",
              "handles, descriptors, the backend graph API are real; executions and batch norm are validated "
              "and recorded as kernel launches, not computed"),
    "nccl": ("NCCL (libnccl)",
             "communicators are real; collectives complete at the call and move real data between ranks of one "
             "host (rank-local across hosts)"),
    "cufft": ("cuFFT (libcufft)", "nothing is implemented"),
    "curand": ("cuRAND (libcurand)", "nothing is implemented (PyTorch links it but imports nothing)"),
    "cusolver": ("cuSOLVER (libcusolver)", "nothing is implemented"),
    "cusparse": ("cuSPARSE (libcusparse)", "only the error string is implemented"),
    "cusparseLt": ("cuSPARSELt (libcusparseLt)", "nothing is implemented"),
    "cufile": ("cuFile / GPUDirect Storage (libcufile)", "nothing is implemented"),
    "cupti": ("CUPTI (libcupti)", "the activity API: torch.profiler sees the simulated kernels, copies and fills, "
              "priced as --timeline prices them; the callback API never calls back"),
    "nvrtc": ("NVRTC (libnvrtc)", "only the error string is implemented: runtime compilation fails"),
    "nvshmem_host": ("NVSHMEM (libnvshmem_host)", "nothing is implemented"),
}
# impl rows whose work is recorded, not done, by name (re.match); every other impl row does its work for real
RECORDED: dict[str, str] = {
    "cuda": r"cuLaunch(Kernel|KernelEx|CooperativeKernel)$",
    "cudart": r"(__cudaLaunchKernel(_ptsz)?|cudaLaunch(Kernel|KernelExC|CooperativeKernel))$",
    "cublas": r"cublas([SDCZ](gemm|gemv|ger|dot|trsm|getrs)|Gemm)",
    "cublasLt": r"cublasLtMatmul$",
    "cudnn": r"cudnn(BackendExecute|BatchNormalization(ForwardTrainingEx|BackwardEx|ForwardInference))$",
}
FAKECUDA = "fakecuda"
FAKECUDA_TITLE = "fakecuda (torch.cuda in Python, math on the CPU)"
FAKECUDA_BEHAVIOUR = ("torch.cuda's low-level entry points below are replaced; torch's own Python above them "
                      "(memory_allocated, memory_summary, get_device_name, ...) runs unchanged over them; CUDA "
                      "tensors' ops run on the CPU with real numerics")
# The classes the tables carry, and the generated rest, as the report explains them.
CLASSES = {
    "implemented": "written by hand (an `impl` row of the library's API table); what that means per library is "
                   "its line, and `recorded` marks those whose work is validated and counted, never done",
    "unsupported-declared": "a `stub` row of the table: not supported on purpose, with the reason",
    "stub": "every other function of the library's header (or that CUDA-built PyTorch imports): returns the "
            "library's not-supported status, is counted in the process report, and aborts the program under "
            "FAKEGPU_UNSUPPORTED_API=error",
}
ALIASES = {"driver": "cuda", "libcuda": "cuda", "runtime": "cudart", "nvidia-ml": "nvml", "cublaslt": "cublasLt",
           "cusparselt": "cusparseLt", "nvshmem": "nvshmem_host"}
