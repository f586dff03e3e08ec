"""--workspace-file: a user's workspace profile moves the estimates by exactly what it overrides (the context into
nvidia-smi and the fit, the cuBLAS workspace into allocated memory), for the stack it names."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.reports import validate

MiB = 1 << 20
KiB = 1 << 10
# The built-in A100 figures (ampere-ada, pytorch): context 420 MiB, +74 at the first launch, +53 with cuBLAS; an
# 8320 KiB cuBLAS workspace.
MINE = """\
format: 1
entries:
  - name: our-a100-torch26
    match: {compute_capability: "8.0", torch: ">=2.6,<2.7"}
    figures:
      context_created: {value: 520MiB, source: "nvidia-smi on our A100 after torch.cuda.init()"}
      context_cublas: {value: 73MiB, source: "nvidia-smi on our A100 after the first matmul"}
      cublas_workspace: {value: 32MiB, source: "torch.backends.cuda.cublas_workspace_size() on our A100"}
"""
CONTEXT_DELTA = (520 - 420 + 73 - 53) * MiB
WORKSPACE_DELTA = 32 * MiB - 8320 * KiB


def _report(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["data"]
    validate(report)
    return report


def _outside(phase: dict) -> int:
    return phase["nvidia_smi_used"] - phase["max_memory_reserved"]


def test_estimate_llm_moves_by_exactly_the_overridden_figures(models, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(MINE)
    base_args = ("estimate-llm", "--model-dir", str(models["qwen3-8b"]), "--target-profile", "a100",
                 "--torch-version", "2.6.0+cu124")
    base = _report(*base_args)
    user = _report(*base_args, "--workspace-file", str(mine))
    assert user["runtime"]["non_pytorch_bytes"] - base["runtime"]["non_pytorch_bytes"] == CONTEXT_DELTA
    assert user["runtime"]["cublas_workspace_bytes"] == 32 * MiB
    applied = user["runtime"]["workspace_profile"]["figures"]
    assert applied["context_created"]["entry"] == "our-a100-torch26" and applied["context_created"]["origin"] == (
        f"{mine}:3")
    assert applied["context_first_launch"]["entry"] == "ampere-ada"  # not overridden: the built-in figure
    for name, phase in base["phases"].items():
        got = user["phases"][name]
        assert _outside(got) - _outside(phase) == CONTEXT_DELTA, name
        workspace = WORKSPACE_DELTA if "cublas_workspace" in phase["components"] else 0
        assert got["max_memory_allocated"] - phase["max_memory_allocated"] == workspace, name
    # the fit: torch's budget shrinks by the context, nvidia-smi's by the context and the extra reserved memory
    reserved = user["peak"]["max_memory_reserved"] - base["peak"]["max_memory_reserved"]
    t_user, t_base = user["target"], base["target"]
    assert t_user["torch_headroom_bytes"] - t_base["torch_headroom_bytes"] == -(CONTEXT_DELTA + reserved)
    assert t_user["nvidia_smi_headroom_bytes"] - t_base["nvidia_smi_headroom_bytes"] == -(CONTEXT_DELTA + reserved)


def test_plan_training_uses_the_file_and_its_default_stack(models, tmp_path):
    mine = tmp_path / "mine.yaml"
    # the file names its stack, so no --torch-version is needed
    mine.write_text(MINE.replace("entries:", "default_stack: {torch: 2.6.0+cu124}\nentries:").replace(
        "cublas_workspace: {value: 32MiB", "cublaslt_workspace: {value: 2MiB"))
    args = ("plan-training", "--model-dir", str(models["tiny"]), "--target-profile", "a100")
    base = _report(*args)
    user = _report(*args, "--workspace-file", str(mine))
    assert user["runtime"]["workspace_profile"]["stack"]["torch"] == "2.6.0+cu124"
    assert user["runtime"]["workspace_profile"]["stack"]["cuda"] == "12.4"
    for name, phase in base["phases"].items():
        got = user["phases"][name]
        assert _outside(got) - _outside(phase) == CONTEXT_DELTA, name
        assert got["max_memory_allocated"] == phase["max_memory_allocated"], name  # no workspace change here
        assert got["max_memory_reserved"] == phase["max_memory_reserved"], name
    for key in ("headroom_bytes", "torch_headroom_bytes", "nvidia_smi_headroom_bytes"):
        assert user["target"][key] - base["target"][key] == -CONTEXT_DELTA, key


def test_a_file_for_another_stack_changes_nothing_and_says_so(models, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(MINE)
    args = ("estimate-llm", "--model-dir", str(models["tiny"]), "--target-profile", "a100")
    base = _report(*args)
    user = _report(*args, "--workspace-file", str(mine))  # the default stack is torch 2.11: the entry does not match
    assert user["phases"] == base["phases"]
    assert any(str(mine) in n and "torch 2.11.0+cu130" in n for n in user["notes"])


def test_a_broken_workspace_file_is_a_usage_error_without_traceback(models, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(MINE.replace("context_created", "context_creatd"))
    result = CliRunner().invoke(app, ["plan-training", "--model-dir", str(models["tiny"]), "--workspace-file",
                                      str(mine)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{mine}:6: entries[0].figures.context_creatd: unknown key 'context_creatd'; did you mean " \
           "'context_created'?" in result.stderr
    bad = CliRunner().invoke(app, ["estimate-llm", "--model-dir", str(models["tiny"]), "--torch-version", "latest"])
    assert bad.exit_code == 2 and "torch version 'latest' is not a version" in bad.stderr
