"""The CLI as a user runs it: exit codes, JSON envelope, human tables, errors on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fakegpu import reports
from fakegpu.cli.main import app
from tests.conftest import run_cli

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def envelope(result) -> dict:
    doc = json.loads(result.stdout)
    assert doc["schema"] == "fakegpu.cli/v1"
    assert set(doc) == {"schema", "command", "status", "exit_code", "data", "errors"}
    reports.validate(doc)  # fakegpu/reports/schemas/cli.schema.json
    return doc


def test_profiles_list_json_lists_the_catalog() -> None:
    result = invoke("profiles", "list", "--json")
    assert result.exit_code == 0
    doc = envelope(result)
    assert doc["status"] == "ok" and doc["command"] == "profiles list"
    assert len(doc["data"]) >= 82
    assert {"id", "name", "aliases", "architecture", "memory_total_bytes"} <= set(doc["data"][0])


def test_profiles_list_filters_by_architecture() -> None:
    doc = envelope(invoke("profiles", "list", "--arch", "hopper", "--json"))
    assert doc["data"] and all(p["architecture"] == "hopper" for p in doc["data"])


def test_profiles_list_rejects_unknown_architecture_with_a_hint() -> None:
    result = invoke("profiles", "list", "--arch", "hoper")
    assert result.exit_code == 2
    assert "unknown architecture 'hoper' (did you mean 'hopper'?); accepted: " in result.stderr


def test_profiles_list_human_table() -> None:
    result = invoke("profiles", "list", "--arch", "ampere")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split()[:3] == ["ID", "NAME", "ARCH"]
    assert "NVIDIA A100-SXM4-80GB" in result.stdout


def test_profiles_show() -> None:
    doc = envelope(invoke("profiles", "show", "a100", "--json"))
    assert doc["data"]["name"] == "NVIDIA A100-SXM4-80GB"
    assert doc["data"]["sm_limits"]["max_threads_per_sm"] == 2048
    human = invoke("profiles", "show", "a100")
    assert "memory.total_bytes" in human.stdout and "85899345920" in human.stdout


def test_profiles_show_unknown_suggests() -> None:
    result = invoke("profiles", "show", "a10O", "--json")
    assert result.exit_code == 2
    doc = envelope(result)
    assert doc["status"] == "error" and doc["errors"][0]["code"] == "unknown-profile"
    assert "a100" in doc["errors"][0]["message"]


def test_devices_json_is_stable_across_processes() -> None:
    runs = [run_cli("devices", "a100:2,h100", "--json") for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    first, second = (json.loads(r.stdout)["data"] for r in runs)
    assert len(first) == 3
    assert [d["uuid"] for d in first] == [d["uuid"] for d in second]
    assert [d["name"] for d in first] == ["NVIDIA A100-SXM4-80GB"] * 2 + ["NVIDIA H100 80GB HBM3"]


def test_devices_typo_exits_non_zero_and_suggests() -> None:
    result = run_cli("devices", "a10O:2")
    assert result.returncode == 2
    assert "a10O" in result.stderr and "Did you mean: a100" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [["run", "--mode", "fakecuda", "--devices", "", "--", "true"],
                                  ["demo", "--devices", ""], ["cdi", "generate", "--devices", ""]])
def test_an_empty_devices_option_is_an_empty_spec_not_the_default(args) -> None:
    # `--devices "$SPEC"` with SPEC unset must not quietly become one A100 (or the runtime's inventory).
    result = run_cli(*args, env={"FAKEGPU_DEVICES": "h100:2"})
    assert result.returncode == 2, result.stdout
    assert "invalid device spec '': part '': the spec is empty" in result.stderr


@pytest.mark.parametrize(("args", "meant"), [
    (["run", "--mode", "fakecud", "--", "true"], "did you mean 'fakecuda'?"),
    (["run", "--mode", "native", "--memory", "ful", "--", "true"], "did you mean 'full'?"),
    (["run", "--on-device-read", "eror", "--", "true"], "did you mean 'error'?"),
    (["preflight", "--mode", "nativ", "--", "true"], "did you mean 'native'?"),
    (["bandwidth", "--nproc", "2", "--mode", "nativ"], "did you mean 'native'?"),
    (["bandwidth", "--nproc", "2", "--transport", "sockt"], "did you mean 'socket'?"),
    (["estimate-roofline", "-p", "h100", "--gemm", "8x8x8", "--launch", "grph"], "did you mean 'graph'?"),
])
def test_a_misspelt_mode_names_the_close_match(args, meant) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert meant in result.stderr and "expected one of" in result.stderr


def test_devices_writes_the_table(tmp_path) -> None:
    path = tmp_path / "devices.tbl"
    result = invoke("devices", "t4:2", "--seed", "s", "--table", str(path))
    assert result.exit_code == 0
    assert path.read_text().count("\ndevice\t") == 2


def test_devices_table_into_missing_folder_fails_cleanly(tmp_path) -> None:
    result = invoke("devices", "t4", "--table", str(tmp_path / "missing" / "t.tbl"))
    assert result.exit_code == 1
    assert "cannot write the device table" in result.stderr


def test_devices_table_that_cannot_be_written_leaves_nothing(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    for path in (tmp_path / "file" / "t.tbl", tmp_path / "folder"):
        result = invoke("devices", "t4", "--table", str(path))
        assert result.exit_code == 1 and f"cannot write the device table {path}: " in result.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["file", "folder"]  # no temporary table left


def test_python_dash_m_and_version() -> None:
    out = subprocess.run([sys.executable, "-m", "fakegpu", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("fakegpu ")


def test_import_stays_light() -> None:
    # The OCI hook imports the device code at every container start: no heavy or third-party imports.
    code = ("import sys, fakegpu, fakegpu.devices; fakegpu.devices.resolve_devices('a100:2');"
            "heavy = {'torch', 'docker', 'yaml', 'jsonschema', 'typer', 'safetensors'} & set(sys.modules);"
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.docker
def test_doctor_reports_every_check(docker_client) -> None:
    result = run_cli("doctor", "--json")
    doc = json.loads(result.stdout)
    checks = {c["name"]: c for c in doc["data"]}
    assert set(checks) == {"catalog", "native", "docker", "runtime", "torch"}
    assert checks["catalog"]["status"] == "pass"
    assert checks["docker"]["status"] == "pass"
    assert all(c["status"] in ("pass", "warn", "fail") for c in checks.values())
    assert all(c["fix"] for c in checks.values() if c["status"] != "pass")
    assert result.returncode == (3 if any(c["status"] == "fail" for c in checks.values()) else 0)


def test_doctor_fails_without_docker() -> None:
    result = run_cli("doctor", "--json", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    doc = json.loads(result.stdout)
    checks = {c["name"]: c for c in doc["data"]}
    assert checks["docker"]["status"] == "fail"
    assert result.returncode == 3 and doc["status"] == "error"


def test_doctor_program_says_why_a_path_is_no_program(tmp_path) -> None:
    from fakegpu.doctor import check_program

    data = tmp_path / "weights.bin"
    data.write_bytes(b"\x7fELF")
    assert check_program(str(data)).detail == f"program {str(data)!r}: not executable"
    assert check_program(str(tmp_path)).detail == f"program {str(tmp_path)!r}: a folder, not a program"
    missing = check_program(str(tmp_path / "nope"))
    assert missing.status == "fail" and missing.detail.endswith("not found (not a file, not on PATH)")


def test_doctor_refuses_an_empty_image() -> None:
    result = invoke("doctor", "--program", "true", "--image", "")
    assert result.exit_code == 2 and "--image '' names no image" in result.stderr
