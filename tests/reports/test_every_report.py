"""Every report FakeGPU writes, made by the code that writes it, against its schema in fakegpu/reports.

The test walks reports.names(): a schema without a producer below fails, so each new report comes with a real
run of its writer here. Producers run what users run (the CLI, `fakegpu run`, the native libraries), once per
session, and hand back the documents as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu import reports
from fakegpu.cli.main import app
from fakegpu.cluster import report as cluster_report
from tests.conftest import REPO
from tests.estimate.conftest import minilm_dir  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.torch, pytest.mark.native]
NATIVE_BIN = REPO / "native" / "build" / "bin"
# fakecuda's reports of a process that allocated, all-reduced over gloo and exited normally.
FAKECUDA_SCRIPT = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
dist.destroy_process_group()
print("ok", x.sum().item())
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    return {**env, **extra}


def _fakegpu(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _json_files(folder: Path, pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob(pattern))]


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.fixture(scope="module")
def fakecuda_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fakecuda-reports")
    env = _clean_env(FAKEGPU_REPORT_DIR=str(folder), PORT=_free_port())
    proc = _fakegpu("run", "--devices", "a100:1", "--mode", "fakecuda", "--", sys.executable, "-c", FAKECUDA_SCRIPT,
                    env=env)
    assert proc.returncode == 0 and "ok 1048576.0" in proc.stdout, proc.stderr[-3000:]
    return folder


def _cluster_state(root: Path, fakecuda_reports: Path) -> Path:
    """The host state folder a one-node cluster run leaves (fakegpu/cluster/models.py), holding the real
    reports of the fakecuda run."""
    root.mkdir()
    (root / "cluster.json").write_text(json.dumps({
        "name": "walk", "run_id": "r1", "nodes": 1, "devices": "a100:1", "mode": "fakecuda",
        "image": "fakegpu/pytorch:latest", "nproc_per_node": 1, "created": 0}))
    node = root / "reports" / "node-0"
    node.mkdir(parents=True)
    for path in fakecuda_reports.glob("*.json"):
        (node / path.name).write_text(path.read_text())
    (root / "run.json").write_text(json.dumps({
        "command": ["python", "-c", "..."], "started": 1.0, "ended": 2.0, "exit_code": 0,
        "nodes": [{"node": "node-0", "rank": 0, "exit_code": 0, "status": "ok", "reason": ""}]}))
    return root


def _cli_data(*args: str) -> dict:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    return doc["data"]  # the envelope around it is pinned by tests/unit/test_cli.py


def _decoder_config(tmp: Path) -> Path:
    """plan-serving plans decoders (the estimates' model is an encoder): a small llama config, no weights."""
    folder = tmp / "serving-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16"}))
    return folder


def _estimates(model: Path, tmp: Path) -> dict[str, list[dict]]:
    llm = CliRunner().invoke(app, ["estimate-llm", "--model-dir", str(model), "--json", "--prompt-tokens", "16"])
    assert llm.exit_code == 0, llm.output
    prediction = tmp / "prediction.json"
    prediction.write_text(llm.stdout)
    observation = tmp / "observation.json"
    observation.write_text(json.dumps({
        "schema": "fakegpu.observation/v1", "workload": {"batch_size": 1, "prompt_tokens": 16},
        "measurements": [{"phase": "peak", "metric": "max_memory_allocated", "bytes": 100_000_000}]}))
    return {
        "estimate-llm": [json.loads(llm.stdout)["data"]],
        "plan-training": [_cli_data("plan-training", "--model-dir", str(model), "--json", "--micro-batch", "2"),
                          # the Megatron path adds its per-stage section
                          _cli_data("plan-training", "--model-dir", str(model), "--json", "--framework", "megatron",
                                    "--tensor-parallel", "2", "--pipeline-parallel", "2", "--gpus", "4",
                                    "--sequence-parallel", "--recompute", "selective")],
        "plan-serving": [_cli_data("plan-serving", "--model-dir", str(_decoder_config(tmp)), "--profile", "l4",
                                   "--json")],
        "calibrate-compare": [_cli_data("calibrate", "compare", str(prediction), str(observation), "--json")],
        # one op, and a model step on two boards
        "estimate-roofline": [_cli_data("estimate-roofline", "--profile", "h100", "--gemm", "8192x8192x8192", "--json"),
                              _cli_data("estimate-roofline", "--profile", "a100", "--profile", "h200", "--model-dir",
                                        str(model), "--phase", "prefill", "--seq-len", "16", "--json")],
        # the stack's figures alone (inside the estimates above too)
        "workspace-profile": [_cli_data("workspace-profiles", "show", "--profile", "h200", "--json"),
                              _cli_data("workspace-profiles", "show", "--torch", "2.15.0+cu132", "--compute-capability",
                                        "12.0", "--json")],
    }


@pytest.fixture(scope="module")
def written(fakecuda_run: Path, minilm_dir: Path, tmp_path_factory) -> dict[str, list[dict]]:  # noqa: F811
    """Report name -> the documents its writer wrote."""
    tmp = tmp_path_factory.mktemp("walk")
    out: dict[str, list[dict]] = {
        "fakecuda-process": [json.loads(p.read_text()) for p in sorted(fakecuda_run.glob("*.json"))
                             if not p.name.endswith(".activity.json")],
        "fakecuda-activity": _json_files(fakecuda_run, "*.activity.json"),
        "cluster-report": [cluster_report.merge(_cluster_state(tmp / "cluster", fakecuda_run))],
    }
    pre = _fakegpu("preflight", "--devices", "a100:1", "--json", "--", sys.executable, "-c",
                   "import torch; torch.zeros(1 << 20, device='cuda')", env=_clean_env())
    assert pre.returncode == 0, pre.stderr[-3000:]
    out["preflight"] = [json.loads(pre.stdout)["data"]]

    native = tmp / "native"
    bench = _fakegpu("run", "--devices", "a100:1", "--report-dir", str(native), "--", str(NATIVE_BIN / "cuda-bench"),
                     "10", env=_clean_env())
    assert bench.returncode == 0, bench.stderr[-3000:]
    out["native-process"] = _json_files(native, "fakegpu-native-*.json")
    # NVML writes its report only when a call it does not support was made.
    nvml = tmp / "nvml"
    nvml.mkdir()
    code = ("import pynvml as n\nn.nvmlInit()\n"
            "try: n.nvmlDeviceGetGpuOperationMode(n.nvmlDeviceGetHandleByIndex(0))\n"
            "except n.NVMLError_NotSupported: print('not supported')\n")
    smi = _fakegpu("run", "--devices", "a100:1", "--", sys.executable, "-c", code,
                   env=_clean_env(FAKEGPU_REPORT_DIR=str(nvml)))
    assert smi.returncode == 0 and "not supported" in smi.stdout, smi.stderr[-3000:]
    out["nvml-process"] = _json_files(nvml, "nvml-*.json")
    out.update(_estimates(minilm_dir, tmp))
    # fakegpu validate: a case that passes and one that fails a check, on the example manifest's profiles.
    manifest = tmp / "validate.yaml"
    manifest.write_text('matrix: {profile: [t4, "a100:2"]}\ncases:\n  - name: smi\n    command: [nvidia-smi, -L]\n'
                        '    expect: {stdout_contains: "GPU 1:"}\n')
    checked = _fakegpu("validate", str(manifest), "--out", str(tmp / "validate"), env=_clean_env())
    assert checked.returncode == 1, checked.stdout + checked.stderr
    out["validate"] = [json.loads((tmp / "validate" / "report.json").read_text())]
    # The performance models and the repository scan, on the data their README examples use.
    out["simulate-topology"] = [_cli_data("simulate-topology", "--nodes", "2", "--profile", "h100", "--fabric",
                                          "ib-ndr400", "--sizes", "1MiB:16MiB", "--json")]
    out["replay-trace"] = [_cli_data("replay-trace", str(REPO / "tests" / "data" / "traces" / "ddp-2rank"),
                                     "--profile", "a100", "--json"),
                           # the what-if onto a fabric: collectives priced by the topology model
                           _cli_data("replay-trace", str(REPO / "tests" / "data" / "traces" / "ddp-2rank"),
                                     "--nodes", "2", "--gpus-per-node", "1", "--fabric", "ib-ndr400", "--json")]
    out["analyze-repo"] = [_cli_data("analyze-repo", str(REPO / "examples" / "analyze-repo"), "--json")]
    # every library and fakecuda, the export audit, and the NVML run's unsupported call above
    out["capabilities"] = [_cli_data("capabilities", "--strict", "--from-report", str(nvml), "--json")]
    out["analyze-kernel"] = [_cli_data("analyze-kernel", "--profile", "h100", str(REPO / "examples" / "analyze-kernel"
                                                                                  / "scale.ptx"), "--json")]
    # a real sweep: two fakecuda ranks on this host
    swept = _fakegpu("bandwidth", "--nproc", "2", "--mode", "fakecuda", "--devices", "a100:2", "--sizes", "8B:4KiB",
                     "--iters", "2", "--warmup", "1", "--json", env=_clean_env())
    assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr[-3000:]
    out["bandwidth"] = [json.loads(swept.stdout)["data"]]
    # The envelope, around a result and around an error.
    ok, bad = (CliRunner().invoke(app, ["devices", spec, "--json"]) for spec in ("h100:2", "a10O:2"))
    assert (ok.exit_code, bad.exit_code) == (0, 2)
    out["cli"] = [json.loads(ok.stdout), json.loads(bad.stdout)]
    return out


@pytest.mark.parametrize("name", reports.names())
def test_every_report_carries_its_schema_id_and_validates(name: str, written: dict[str, list[dict]]) -> None:
    assert name in written, f"report {name!r} has a schema but no producer in this test: add its writer's run"
    docs = written[name]
    assert docs, f"the {name} writer wrote nothing"
    for doc in docs:
        assert doc["schema"] == reports.schema_id(name)
        reports.validate(doc)  # by the id the document carries

