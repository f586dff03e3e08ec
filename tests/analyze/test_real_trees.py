"""analyze-repo on trees nobody here wrote: the installed transformers, accelerate and torch packages, and this
project's own tests/ folder, each held to a small hand list made by reading the tree (grep): a known torch.cuda
call site, the known extension or kernel loaders, the console scripts and their verdicts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fakegpu.analyze.repo import analyze_repo
from fakegpu.reports import validate
from tests.analyze.conftest import REPO, entry

pytestmark = pytest.mark.slow


def _package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _line(root: Path, path: str, statement: str) -> int:
    """The line of a statement in the installed tree, as grep finds it: the hand list names statements, not line
    numbers, so it holds across releases; a release without the statement skips the check, naming it."""
    text = (root / path).read_text(encoding="utf-8") if (root / path).is_file() else ""
    for number, line in enumerate(text.splitlines(), 1):
        if statement in line:
            return number
    pytest.skip(f"{path} of this release has no {statement!r}: the hand list needs a look")


def _site(report: dict, kind: str, path: str, statement: str) -> dict:
    line = _line(Path(report["root"]), path, statement)
    found = [s for s in report["sites"] if (s["kind"], s["path"], s["line"]) == (kind, path, line)]
    assert found, f"no {kind} site at {path}:{line} ({statement})"
    return found[0]


@pytest.fixture(scope="module")
def transformers_report() -> dict:
    report = analyze_repo(_package("transformers"))
    validate(report)
    return report


@pytest.fixture(scope="module")
def torch_report() -> dict:
    report = analyze_repo(_package("torch"))
    validate(report)
    return report


def test_transformers(transformers_report):
    report = transformers_report
    is_available = "torch.cuda.is_available()"
    # in `transformers env`
    assert _site(report, "torch-cuda", "cli/system.py", f"pt_cuda_available = {is_available}")["detail"] == is_available
    # the Hub kernel loader: `from kernels import get_kernel as get_kernel_hub` inside a try, then its call
    hub = "integrations/hub_kernels.py"
    assert _site(report, "hub-kernels", hub, "from kernels import get_kernel as get_kernel_hub")["optional"] is True
    assert _site(report, "hub-kernels", hub, "return get_kernel_hub(")["detail"] == "kernels.get_kernel()"
    # flash-attn's import in the attention dispatcher, under `elif implementation == "flash_attention_2"`
    assert _site(report, "flash-attn", "modeling_flash_attention_utils.py",
                 "from flash_attn import flash_attn_func, flash_attn_varlen_func")["optional"] is True
    # the distribution's console script, from the entry_points.txt beside the package
    cli = entry(report, "cli/transformers.py")
    assert cli["name"] == "transformers" and cli["declared_by"][0]["how"] == "console-script"
    assert cli["verdict"] == "fakecuda"
    assert cli["command"] == "fakegpu preflight --devices a100:1 -- transformers"
    assert {r["kind"] for r in cli["reasons"] if r["optional"]} >= {"flash-attn", "bitsandbytes", "deepspeed"}
    assert any("flash-attn" in n and "real-gpu" in n for n in cli["notes"])
    assert report["summary"]["verdict"] == "fakecuda"
    assert report["skipped"] == {}


def test_accelerate():
    report = analyze_repo(_package("accelerate"))
    validate(report)
    is_available = "torch.cuda.is_available()"
    assert _site(report, "torch-cuda", "commands/env.py", f"pt_cuda_available = {is_available}")["detail"] == (
        is_available)
    scripts = {e["name"]: e for e in report["entries"] if e["declared_by"][0]["how"] == "console-script"}
    assert set(scripts) == {"accelerate", "accelerate-config", "accelerate-estimate-memory", "accelerate-launch",
                            "accelerate-merge-weights"}
    assert {e["verdict"] for e in scripts.values()} == {"fakecuda"}
    assert scripts["accelerate-launch"]["path"] == "commands/launch.py"


def test_torch(torch_report):
    report = torch_report
    # in collect_env's get_env_info path
    assert _site(report, "torch-cuda", "utils/collect_env.py", "cuda_available_str = str(torch.cuda.is_available())"
                 )["detail"] == "torch.cuda.is_available()"
    # the benchmark utilities build their Callgrind bindings with cpp_extension.load (C++ sources only)
    jit = _site(report, "cpp-extension", "utils/benchmark/utils/cpp_jit.py", "return cpp_extension.load(")
    assert jit["detail"].startswith("torch.utils.cpp_extension.load()")
    # the testing helper that wraps load_inline, passing its arguments on: named, not deciding
    wrapper = _site(report, "cpp-extension", "testing/_internal/common_utils.py",
                    "return cpp_extension.load_inline(*args, **kwargs)")
    assert wrapper["detail"] == "torch.utils.cpp_extension.load_inline() [sources not literal]" and wrapper["optional"]
    # Inductor's Triton helpers: `triton` comes from triton_compat, which imports it in a try: optional
    helper = _site(report, "triton-kernel", "_inductor/runtime/triton_helpers.py", "@triton.jit")
    assert helper["detail"] == "@triton.jit" and helper["optional"]
    native = {n["path"]: n["detail"] for n in report["native"]}
    assert "libcudart.so" in native["lib/libtorch_cuda.so"] and ".nv_fatbin" in native["lib/libtorch_cuda.so"]
    torchrun = entry(report, "distributed/run.py")
    assert (torchrun["name"], torchrun["verdict"]) == ("torchrun", "fakecuda")
    assert any(r["kind"] == "distributed" for r in torchrun["reasons"])
    collect_env = entry(report, "utils/collect_env.py")
    assert collect_env["command"] == "fakegpu preflight --devices a100:1 -- python -m torch.utils.collect_env"


def test_this_projects_tests_folder():
    report = analyze_repo(REPO / "tests")
    validate(report)
    assert _site(report, "torch-cuda", "data/probes/busy_loop.py", 'device="cuda:0"')["detail"] == 'device="cuda:0"'
    walk = entry(report, "native/pynvml_walk.py")
    assert walk["verdict"] == "native" and walk["reasons"][0]["kind"] == "nvml"
    assert walk["command"] == "fakegpu run --devices a100:1 -- python -m tests.native.pynvml_walk"
    assert entry(report, "fakecuda/test_distributed.py")["verdict"] == "fakecuda"
    native = {n["path"]: n["detail"] for n in report["native"]}
    assert native["data/cuda/count.cu"] == "1 __global__ kernel"
    # the placeholder libraries of the test root file systems are empty files: named, not dropped
    assert "data/rootfs/debian/usr/lib/x86_64-linux-gnu/libc.so.6" in [
        e["path"] for e in report["skipped"]["unreadable"]["examples"]]
