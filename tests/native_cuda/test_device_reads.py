"""Native mode says when the program reads a value a GPU would have computed (issue 21, point 11).

Kernels do not run, so a host read of memory a kernel was given returns what was there before, and control flow
built on it diverges (transformers' generate() loop never stops). libcuda keeps, per byte range, whether device
memory is host-known (copied in, set, copied from host-known memory) or may have been written by a kernel (a
pointer into it among the launch's arguments, read with the kernel's parameter layout from its module), and at a
device-to-host read of kernel-written bytes applies --on-device-read warn|error|ignore. `fakegpu run --timeout`
ends a run past its limit naming the last CUDA activity.

The C scenarios are compiled here by NVIDIA's nvcc (PyPI's nvidia-cuda-nvcc), once with SASS and PTX (the driver
reads the cubin) and once with PTX only (it reads the `.entry` declarations)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.errors import EXIT_DEVICE_READ, EXIT_TIMEOUT, EXIT_USAGE
from fakegpu.reports import validate
from tests.native_cuda.conftest import REPO, _require, run_fakegpu
from tests.native_cuda.test_static_runtime import CUDA, SOURCES

pytestmark = pytest.mark.native
SCRIPTS = Path(__file__).parent / "scripts"
WARNING = "the program read device memory that a kernel may have written"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory, cuda_build: Path) -> dict[str, Path]:
    nvcc = CUDA / "bin" / "nvcc"
    _require(f"no nvcc at {nvcc}: `make install` installs nvidia-cuda-nvcc", nvcc.is_file())
    out = tmp_path_factory.mktemp("nvcc-reads")
    devlib = out / "devlib"
    devlib.mkdir()
    (devlib / "libcudart.so").symlink_to(CUDA / "lib" / "libcudart.so.13")
    env = {**os.environ, "PATH": f"{nvcc.parent}:{os.environ['PATH']}"}
    built = {}
    for name, arch in (("cubin", []), ("ptx", ["-gencode", "arch=compute_80,code=compute_80"])):
        cmd = ["nvcc", "-cudart", "shared", "-L", str(devlib), *arch, "-o", name, str(SOURCES / "device_read.cu")]
        proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        built[name] = out / name
    return built


def scenario(program: Path, what: str, tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    rep = tmp_path / f"report-{program.name}-{what}"
    proc = run_fakegpu(["--devices", "a100", "--report-dir", str(rep), *flags, "--", str(program), what], timeout=60)
    (report,) = [json.loads(p.read_text()) for p in rep.glob("fakegpu-native-*.json")]
    validate(report, "native-process")
    return proc, report["device_reads"]


# scenario -> (kernel-written reads, kernel-written bytes, the kernels that wrote them)
EXPECTED = {
    "h2d": (0, 0, []),  # copied in and out; a kernel given another allocation changes nothing
    "kernel": (1, 1024, ["_Z4fillPff"]),
    "memset": (0, 0, []),  # the memset after the kernel made the bytes host-known again
    "d2d": (1, 1024, ["_Z4fillPff"]),  # a device copy of kernel output; then of host-known data (not counted)
    "suballoc": (1, 1024, ["_Z4fillPff"]),  # three tensors in one allocation: only the kernel's is read as its
    "struct": (1, 1024, ["_Z9fill_view5Views"]),  # the pointer is a member of a by-value struct argument
    "graph": (1, 1024, ["_Z4fillPff"]),  # capture ran nothing; the replay wrote it
    "2d": (1, 3 * 256 + 128, ["_Z4fillPff"]),  # a pitched read is one read (of its rows' span)
    "freed": (0, 0, []),  # freed and allocated again: nothing written yet
    "twice": (2, 1536, ["_Z4fillPff"]),
}


@pytest.mark.parametrize("build", ["cubin", "ptx"])
@pytest.mark.parametrize("what", sorted(EXPECTED))
def test_which_reads_are_of_kernel_output(programs: dict[str, Path], tmp_path: Path, build: str, what: str) -> None:
    proc, reads = scenario(programs[build], what, tmp_path)
    assert proc.returncode == 0 and f"done {what}" in proc.stdout, proc.stderr[-2000:]
    n, nbytes, kernels = EXPECTED[what]
    assert (reads["reads"], reads["bytes"], [k["name"] for k in reads["kernels"]]) == (n, nbytes, kernels)
    assert reads["policy"] == "warn" and reads["unknown_parameter_launches"] == 0
    assert proc.stderr.count(WARNING) == (1 if n else 0), proc.stderr  # once, at the first such read
    if n:
        assert reads["first"]["api"] == "cuMemcpy2D" if what == "2d" else reads["first"]["api"] == "cuMemcpy"
        assert f"through {reads['first']['api']}, last written by " in proc.stderr
        assert "--mode fakecuda" in proc.stderr and "--on-device-read error" in proc.stderr
    else:
        assert reads["first"] is None


def test_the_warning_names_the_kernel_as_a_person_reads_it(programs: dict[str, Path], tmp_path: Path) -> None:
    proc, _ = scenario(programs["cubin"], "struct", tmp_path)
    assert "1024 bytes through cuMemcpy, last written by fill_view\n" in proc.stderr  # demangled, no parameters


def test_error_policy_stops_at_the_first_read(programs: dict[str, Path], tmp_path: Path) -> None:
    proc, reads = scenario(programs["cubin"], "twice", tmp_path, "--on-device-read", "error")
    assert proc.returncode == EXIT_DEVICE_READ == 86
    assert "after-first-read" not in proc.stdout and WARNING in proc.stderr and "stopping here" in proc.stderr
    assert (reads["policy"], reads["reads"]) == ("error", 1)  # the report is still written, with the read


def test_ignore_policy_counts_silently(programs: dict[str, Path], tmp_path: Path) -> None:
    proc, reads = scenario(programs["cubin"], "twice", tmp_path, "--on-device-read", "ignore")
    assert proc.returncode == 0 and WARNING not in proc.stderr
    assert (reads["policy"], reads["reads"]) == ("ignore", 2)


def test_the_exit_status_is_one_value_in_c_and_python() -> None:
    source = (REPO / "native" / "cuda" / "driver" / "written.c").read_text()
    assert re.search(r"#define FGD_EXIT_DEVICE_READ (\d+)", source)[1] == str(EXIT_DEVICE_READ)


# ---- PyTorch ----


def _require_transformers() -> None:
    try:
        import transformers  # noqa: F401  (a test dependency: pyproject's [test] extra)
    except ImportError:
        _require("transformers is not installed (pip install -e '.[test]')", False)


@pytest.mark.torch
def test_gpt2_generate_warns_within_its_first_step(cuda_build, cuda_torch) -> None:
    _require_transformers()
    # Stopped after 3 forward passes.
    proc = run_fakegpu(["--devices", "a100", "--", sys.executable, str(SCRIPTS / "gpt2_generate.py"), "3"],
                       timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr
    assert err.count(WARNING) == 1 and "step 3" in err
    assert err.index("generate\n") < err.index(WARNING) < err.index("step 1\n"), err[-3000:]


@pytest.mark.torch
def test_gpt2_generate_runs_to_max_new_tokens(cuda_build, cuda_torch) -> None:
    """The stop check reads a kernel's output, i.e. stale bytes: the block the caching allocator gives it is the
    one MaxLengthCriteria's torch.full((batch,), is_done) just freed, and that fill is carried out, so generation
    ends exactly at max_new_tokens (what a memory plan needs: the KV cache grows to its full length), neither
    earlier nor never. Placement, not computation: the warning still says the value is a kernel's."""
    _require_transformers()
    proc = run_fakegpu(["--devices", "a100", "--timeout", "150", "--", sys.executable,
                        str(SCRIPTS / "gpt2_generate.py")], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "generated (1, 16)" in proc.stdout  # 4 prompt tokens and 12 new ones
    steps = re.findall(r"^step (\d+)$", proc.stderr, re.M)
    assert steps == [str(i) for i in range(1, 13)], steps
    assert proc.stderr.count(WARNING) == 1


@pytest.mark.torch
def test_gpt2_generate_with_error_policy_exits_at_once(cuda_build, cuda_torch, tmp_path: Path) -> None:
    _require_transformers()
    rep = tmp_path / "rep"
    started = time.monotonic()
    proc = run_fakegpu(["--devices", "a100", "--report-dir", str(rep), "--on-device-read", "error", "--",
                        sys.executable, str(SCRIPTS / "gpt2_generate.py")], timeout=180)
    assert proc.returncode == EXIT_DEVICE_READ, proc.stderr[-3000:]
    assert WARNING in proc.stderr and "stopping here" in proc.stderr and "step 1\n" not in proc.stderr
    assert time.monotonic() - started < 120  # the loop that never ends was never entered
    (report,) = [json.loads(p.read_text()) for p in rep.glob("fakegpu-native-*.json")]
    reads = report["device_reads"]
    assert reads["reads"] == 1 and reads["first"]["kernel"] == reads["kernels"][0]["name"]
    assert reads["first"]["api"] == "cuMemcpyAsync"


TRAINING = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(m.parameters())
x = torch.randn(64, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
w = torch.arange(10.0).cuda()  # host-known, read back after kernels were given its neighbours
for _ in range(3):
    opt.zero_grad(); out = m(x); loss = torch.nn.functional.cross_entropy(out, y); loss.backward(); opt.step()
torch.cuda.synchronize()
print("shape", tuple(out.shape), tuple(loss.shape), torch.cuda.memory_allocated() > 0, w.cpu().tolist()[:3])
"""


@pytest.mark.torch
def test_a_training_step_reading_host_known_values_prints_no_warning(cuda_build, torch_python, tmp_path) -> None:
    rep = tmp_path / "rep"
    proc = run_fakegpu(["--devices", "a100", "--report-dir", str(rep), "--", torch_python, "-c", TRAINING],
                       complete=lambda p: "shape" in p.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "shape (64, 10) () True [0.0, 1.0, 2.0]" in proc.stdout
    assert WARNING not in proc.stderr
    reads = [json.loads(p.read_text())["device_reads"] for p in rep.glob("fakegpu-native-*.json")]
    assert reads and all(r["reads"] == 0 and r["unknown_parameter_launches"] == 0 for r in reads)


@pytest.mark.torch
def test_loss_item_is_a_read_of_kernel_output(cuda_build, torch_python) -> None:
    code = "import torch; x = torch.ones(4, device='cuda') * 3; print('sum', x.sum().item())"
    proc = run_fakegpu(["--devices", "a100", "--", torch_python, "-c", code], complete=lambda p: "sum" in p.stdout)
    assert proc.returncode == 0 and WARNING in proc.stderr, proc.stderr[-3000:]
    assert "last written by at::native::reduce_kernel<" in proc.stderr


@pytest.mark.torch
@pytest.mark.parametrize("case, writer", [
    ("matmul", "cublas"),  # cublasGemmEx (torch 2.15) or cublasLtMatmul: the GEMM's output
    ("mv", "cublasSgemv_v2"),
    ("dot", "cublasSdot_v2"),  # torch's pointer mode is the device's: the result is a kernel's
    ("conv", "cudnn:ConvolutionFwd"),
    ("nccl_host", None),  # an all-reduce of host-known data is host-known: NCCL moves real bytes
    ("nccl_kernel", "at::native::vectorized_elementwise_kernel<"),  # ... of kernel output: that kernel's
])
def test_library_outputs(cuda_build, torch_python, case: str, writer: str | None) -> None:
    proc = run_fakegpu(["--devices", "a100", "--", torch_python, str(SCRIPTS / "library_outputs.py"), case],
                       complete=lambda p: "v " in p.stdout)
    assert proc.returncode == 0 and "v " in proc.stdout, proc.stderr[-3000:]
    if writer is None:
        assert WARNING not in proc.stderr, proc.stderr[-3000:]
    else:
        assert re.search(f"{WARNING}: \\d+ bytes through cuMemcpyAsync, last written by {re.escape(writer)}",
                         proc.stderr), proc.stderr[-3000:]


# ---- fills: the one kernel whose result is known (native/cuda/driver/fill.c) ----

FILLS = """
import sys, torch
def rss():  # resident host memory, bytes
    return int(open("/proc/self/statm").read().split()[1]) * 4096
print("v", torch.ones(3, device="cuda").cpu().tolist(), torch.full((2,), 2.5, device="cuda").cpu().tolist(),
      torch.zeros(2, dtype=torch.long, device="cuda").cpu().tolist(),
      torch.ones(2, dtype=torch.bool, device="cuda").cpu().tolist(),
      torch.full((2,), 1 + 2j, device="cuda").cpu().tolist(),
      torch.ones(2, dtype=torch.bfloat16, device="cuda").cpu().tolist(),
      torch.full((), 0.0, device="cuda").item(), flush=True)
big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
big.fill_(1); full = rss()
big.zero_(); zeroed = rss()
print("big", big[-4:].cpu().tolist(), (full - zeroed) >> 20, flush=True)
y = torch.zeros(4, device="cuda")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    with torch.cuda.graph(g):
        y.fill_(3.0)
before = y.cpu().tolist()
g.replay()
print("graph", before, y.cpu().tolist(), flush=True)
sys.stderr.write("strided\\n")
x = torch.zeros(4, 4, device="cuda")
x[:, 1].fill_(7)
print("strided", x.cpu()[0].tolist(), flush=True)
before = rss()
huge = torch.empty((64 << 20) + 1, dtype=torch.uint8, device="cuda")
huge.fill_(1)
print("huge", (rss() - before) >> 20, huge[:2].cpu().tolist())
"""


@pytest.mark.torch
@pytest.mark.parametrize("alloc_conf", ["", "expandable_segments:True"])
def test_fills_are_carried_out(cuda_build, torch_python, tmp_path: Path, alloc_conf: str, monkeypatch) -> None:
    """torch.full/ones/zeros/fill_/zero_ of a contiguous tensor read back as the GPU gives them, with no warning,
    also when a CUDA graph replays the fill; a zero fill gives back the host pages it covers (private mappings,
    and expandable segments' shared ones); a strided fill is still an ordinary kernel, and so is a nonzero fill
    past 64 MiB, which would spend that much host memory."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", alloc_conf)
    rep = tmp_path / "rep"
    proc = run_fakegpu(["--devices", "a100", "--report-dir", str(rep), "--", torch_python, "-c", FILLS],
                       complete=lambda p: "huge" in p.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {ln.split()[0]: ln.split(" ", 1)[1] for ln in proc.stdout.splitlines()}
    assert out["v"] == "[1.0, 1.0, 1.0] [2.5, 2.5] [0, 0] [True, True] [(1+2j), (1+2j)] [1.0, 1.0] 0.0"
    tail, dropped = out["big"].rsplit(" ", 1)
    assert tail == "[0, 0, 0, 0]" and int(dropped) >= 60  # of the 64 MiB the ones had touched
    assert out["graph"] == "[0.0, 0.0, 0.0, 0.0] [3.0, 3.0, 3.0, 3.0]"  # capture ran nothing; the replay did
    assert proc.stderr.count(WARNING) == 1 and proc.stderr.index("strided\n") < proc.stderr.index(WARNING)
    assert "last written by at::native::elementwise_kernel<" in proc.stderr
    (report,) = [json.loads(p.read_text()) for p in rep.glob("fakegpu-native-*.json")]
    validate(report, "native-process")
    reads = report["device_reads"]
    assert reads["carried_out_launches"] >= 8  # (zeros and zero_ are memsets in some versions)
    assert int(out["huge"].split()[0]) < 8 and reads["reads"] == 2  # the strided fill's, then the huge one's
    assert any("FillFunctorIhE" in k["name"] for k in reads["kernels"]), reads["kernels"]


ACCOUNTING_FILLS = """
import torch
print("zeros", torch.zeros(3, device="cuda").cpu().tolist(), flush=True)
print("ones", torch.ones(3, device="cuda").cpu().tolist())
"""


@pytest.mark.torch
def test_accounting_mode_keeps_zero_fills_only(cuda_build, cuda_torch) -> None:
    """Accounting mode keeps no bytes: device memory reads as zeros, so a zero fill is exact and a nonzero one
    stays a kernel's unknown output."""
    proc = run_fakegpu(["--devices", "a100", "--memory", "accounting", "--", sys.executable, "-c", ACCOUNTING_FILLS],
                       complete=lambda p: "ones" in p.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "zeros [0.0, 0.0, 0.0]\n" in proc.stdout
    assert proc.stderr.count(WARNING) == 1 and "FillFunctor<float>" in proc.stderr


# ---- --timeout ----

LOOP = """
import subprocess, sys, torch
child = subprocess.Popen(["sleep", "300"])
print("child", child.pid, flush=True)
x = torch.ones(16, device="cuda")
while True:
    x = x + 1
"""


@pytest.mark.torch
def test_timeout_ends_the_tree_and_names_the_last_cuda_activity(cuda_build, cuda_torch) -> None:
    started = time.monotonic()
    proc = run_fakegpu(["--devices", "a100", "--timeout", "10", "--", sys.executable, "-c", LOOP], timeout=120)
    assert proc.returncode == EXIT_TIMEOUT == 124, proc.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert "ran past --timeout 10 s; ended it (pid " in proc.stderr and "1 process it started" in proc.stderr
    assert re.search(r"its last CUDA activity: cuLaunchKernel of at::native::vectorized_elementwise_kernel<.*"
                     r"\(pid \d+, \d+\.\d\d s before it was ended\)", proc.stderr), proc.stderr[-2000:]
    child = int(proc.stdout.split()[1])
    assert not alive(child), "a process of the run was left behind"


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it (an orphan's parent is init, not the launcher)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_timeout_of_a_program_without_cuda(cuda_build) -> None:
    proc = run_fakegpu(["--timeout", "1", "--", "sleep", "30"], timeout=30)
    assert proc.returncode == EXIT_TIMEOUT
    assert "its last CUDA activity: none recorded (the program never called FakeGPU's CUDA libraries)" in proc.stderr


def test_a_run_within_its_timeout_keeps_its_status(cuda_build) -> None:
    proc = run_fakegpu(["--timeout", "30s", "--", "sh", "-c", "exit 7"], timeout=30)
    assert proc.returncode == 7 and proc.stderr == ""


@pytest.mark.parametrize("flags, accepted", [
    (["--timeout", "soon"], "expected a positive number of seconds, optionally with unit s, m or h"),
    (["--timeout", "0"], "expected a positive number of seconds"),
    (["--timeout", "-5"], "expected a positive number of seconds"),
    (["--on-device-read", "loud"], "is not a policy; expected one of: warn, error, ignore"),
    (["--mode", "fakecuda", "--on-device-read", "error"], "apply to native mode only"),
])
def test_bad_values_are_usage_errors(flags: list[str], accepted: str) -> None:
    proc = run_fakegpu([*flags, "--", "true"])
    assert proc.returncode == EXIT_USAGE and accepted in proc.stderr, proc.stderr
