"""FakeGPU's cuDNN (native/cuda/dnn/): the backend and legacy API through ctypes, then unmodified PyTorch training
a conv net with cuDNN in native mode."""

from __future__ import annotations

import json
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import all_of, reports, stdout_lines

pytestmark = pytest.mark.native

SCRIPTS = Path(__file__).with_name("scripts")

# cudnnStatus_t values (cudnn_graph.h)
SUCCESS, NOT_INITIALIZED, BAD_PARAM, NULL_POINTER, NOT_FINALIZED = 0, 1001, 2000, 2002, 2004
NOT_SUPPORTED, ARCH_MISMATCH = 3000, 3007
PARTS = ("MAJOR", "MINOR", "PATCHLEVEL")


def _header_version() -> tuple[int, int, int] | None:
    """The version in the cudnn_version.h our library was built against (the torch install's cuDNN wheel)."""
    for base in site.getsitepackages():
        header = Path(base, "nvidia", "cudnn", "include", "cudnn_version.h")
        if header.is_file():
            text = header.read_text()
            major, minor, patch = (int(re.search(rf"#define CUDNN_{k} (\d+)", text).group(1)) for k in PARTS)
            return major, minor, patch
    return None


def _probe(env: dict[str, str], tmp_path: Path) -> tuple[dict, dict | None]:
    env = dict(env, FAKEGPU_REPORT_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "cudnn_probe.py")], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = list(tmp_path.glob("fakegpu-native-*.json"))
    return json.loads(proc.stdout), json.loads(reports[0].read_text()) if reports else None


def test_backend_graph_executes_and_is_recorded(cuda_env: dict[str, str], tmp_path: Path) -> None:
    out, report = _probe(cuda_env, tmp_path)
    version = _header_version()
    if version:
        assert out["version"] == version[0] * 10000 + version[1] * 100 + version[2]
        assert out["properties"] == list(version)
    assert out["create_rc"] == SUCCESS and out["stream_rc"] == [SUCCESS, SUCCESS] and out["stream_kept"]
    assert [out["conv_finalize"], out["graph_finalize"], out["heur_finalize"], out["results_rc"]] == [SUCCESS] * 4
    # Three engines for one convolution: implicit GEMM without workspace, im2col with the unfolded input, and the
    # channels-last one of Hopper, which an A100 and 3 input channels leave out of heuristics' answer.
    assert out["engine_count"] == 3 and out["results"] == [2, 2]
    im2col = 8 * 3 * 3 * 3 * 32 * 32 * 4
    assert out["config_workspaces"] == [0, im2col] and out["plan_workspaces"] == [0, im2col]
    assert out["wide_config_workspaces"] == [0, 8 * 16 * 3 * 3 * 32 * 32 * 4]
    assert out["engine2_finalize"] == NOT_SUPPORTED
    assert out["execute"] == [SUCCESS, SUCCESS]
    assert out["runtime_error_after"] == 0, "cuDNN's refusals must not leave a sticky runtime error"
    assert out["threads"] == [SUCCESS] * 4
    assert out["tensor_get"] == [0, 4, [8, 16, 32, 32], [16 * 32 * 32, 32 * 32, 32, 1]]
    assert out["conv_get"] == [2, [1, 2], [1, 1], [1, 3], 1, 4, 2]
    assert out["bn_forward"] == SUCCESS
    assert report is not None
    launched = {k["name"]: k["launches"] for k in report["kernels"]["top"]}
    assert launched.get("cudnn:ConvolutionFwd") == 2 + 4 * 50, "every execution, from every thread, is one launch"
    assert launched.get("cudnn:BatchNormalizationForwardTraining") == 1


def test_invalid_calls_return_cudnn_statuses(cuda_env: dict[str, str], tmp_path: Path) -> None:
    out, report = _probe(cuda_env, tmp_path)
    assert out["null_handle_set_stream"] == BAD_PARAM
    assert out["null_create"] == NULL_POINTER
    assert out["bogus_descriptor_finalize"] == BAD_PARAM
    assert out["get_before_finalize"] == NOT_INITIALIZED
    assert out["finalize_incomplete_tensor"] == BAD_PARAM
    assert out["foreign_attribute"] == BAD_PARAM
    assert out["unfinalized_element"] == NOT_FINALIZED
    assert out["generated_stub"] == NOT_SUPPORTED
    assert out["shape_mismatch_finalize"] == BAD_PARAM
    assert out["set_after_finalize"] == NOT_INITIALIZED
    assert out["get_wrong_type"] == BAD_PARAM
    assert out["execute_host_pointer"] == BAD_PARAM
    assert out["execute_short_allocation"] == BAD_PARAM
    assert out["execute_no_workspace"] == NULL_POINTER
    assert out["execute_null_handle"] == BAD_PARAM
    assert out["execute_unfinalized_pack"] == BAD_PARAM
    assert out["error_string"] == "CUDNN_STATUS_BAD_PARAM"
    assert out["tensor_bad_dims"] == BAD_PARAM
    assert out["bn_forward_host_x"] == BAD_PARAM and out["bn_forward_negative_eps"] == BAD_PARAM
    assert out["destroy_rc"] == SUCCESS
    # Refused executions launch nothing: only the good ones (2, then 4 threads x 50) are in the report.
    assert report is not None
    launched = {k["name"]: k["launches"] for k in report["kernels"]["top"]}
    assert launched.get("cudnn:ConvolutionFwd") == 202
    assert report["unsupported"]["cudnn"] == {"cudnnCreatePoolingDescriptor": 1}


def test_hopper_ranks_the_channels_last_engine_first(cuda_env: dict[str, str], tmp_path: Path) -> None:
    """On an H200, cuDNN 9.19 ran a float NCHW convolution with copies of its operands as workspace (the capture in
    tests/data/gpu/h200; native/cuda/dnn/graph.c): forward x + w + 512 bytes, ranked before the others."""
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    table = tmp_path / "h200.tbl"
    write_table(table, resolve_devices("h200", seed="0"), "h200", "0")
    out, _ = _probe(dict(cuda_env, FAKEGPU_DEVICE_TABLE=str(table)), tmp_path)
    x, w = 8 * 16 * 32 * 32 * 4, 32 * 16 * 3 * 3 * 4
    assert out["wide_config_workspaces"] == [x + w + 512, 0, 8 * 16 * 3 * 3 * 32 * 32 * 4]
    assert out["engine2_finalize"] == SUCCESS
    assert out["config_workspaces"] == [0, 8 * 3 * 3 * 3 * 32 * 32 * 4]  # 3 input channels: not that engine


def test_pre_turing_device_is_an_arch_mismatch(cuda_env: dict[str, str], tmp_path: Path) -> None:
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    table = tmp_path / "v100.tbl"
    write_table(table, resolve_devices("tesla-v100-sxm2-32gb", seed="0"), "tesla-v100-sxm2-32gb", "0")
    out, _ = _probe(dict(cuda_env, FAKEGPU_DEVICE_TABLE=str(table)), tmp_path)
    assert out["create_rc"] == ARCH_MISMATCH


@pytest.mark.torch
@pytest.mark.slow
def test_conv_net_training_step_runs_on_cudnn(cuda_build, cuda_torch, tmp_path: Path) -> None:
    script = SCRIPTS / "conv_step.py"
    args = ["--devices", "a100", "--mode", "native", "--report-dir", str(tmp_path), "--", sys.executable, str(script)]
    proc = run_fakegpu(args, complete=all_of(stdout_lines("cudnn", "peak"), reports(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines() if ln.strip()}
    available, enabled, version = lines["cudnn"]
    assert available == "True" and enabled == "True" and int(version) >= 90000
    assert int(lines["peak"][0]) > 0
    report = json.loads(next(tmp_path.glob("fakegpu-native-*.json")).read_text())
    launched = {k["name"]: k["launches"] for k in report["kernels"]["top"]}
    # Two conv layers: two forward and two filter-gradient executions; the first layer's input needs no gradient,
    # so one data-gradient. Two BatchNorm2d layers, forward and backward each.
    assert launched.get("cudnn:ConvolutionFwd") == 2
    assert launched.get("cudnn:ConvolutionBwdFilter") == 2
    assert launched.get("cudnn:ConvolutionBwdData") == 1
    assert launched.get("cudnn:BatchNormalizationForwardTraining") == 2
    assert launched.get("cudnn:BatchNormalizationBackward") == 2
    assert "cudnn" not in report["unsupported"], report["unsupported"]
