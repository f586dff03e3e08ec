"""`fakegpu capabilities` without the native build: library names, what the tables say, bad --from-report input,
and an unbuilt tree under --strict. (Against the build: tests/native_cuda/test_capabilities.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakegpu.analyze.capabilities import capabilities, descriptions, resolve
from fakegpu.analyze.capabilities.tables import TABLES_DIR, TablesMissing, load
from fakegpu.cli.main import app
from fakegpu.errors import UsageError
from fakegpu.reports import validate


@pytest.fixture(scope="module")
def unbuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lib = tmp_path_factory.mktemp("nobuild") / "lib"
    lib.mkdir()
    return lib


def test_every_table_has_its_line_and_no_line_is_stale(unbuilt: Path) -> None:
    names = {lib.name for lib in load(unbuilt)}
    assert names == {"nvml"} | {p.stem for p in (TABLES_DIR / "cuda" / "api").glob("*.tsv")}
    assert set(descriptions.LIBRARIES) == names
    assert set(descriptions.ALIASES.values()) <= names


def test_library_names_resolve_case_and_aliases(unbuilt: Path) -> None:
    libraries = load(unbuilt)
    assert resolve(["driver", "RUNTIME", "cublaslt", "libcudnn", "fakecuda", "cuda"], libraries) == [
        "cuda", "cudart", "cublasLt", "cudnn", "fakecuda"]
    with pytest.raises(UsageError, match=r"'cudnnn': no such library \(did you mean cudnn\?\); accepted: nvml, "):
        resolve(["cudnnn"], libraries)


def test_an_unknown_library_is_a_usage_error_in_json_too() -> None:
    result = CliRunner().invoke(app, ["capabilities", "--library", "ncll", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["status"] == "error" and "did you mean nccl?" in doc["errors"][0]["message"]


def test_tables_are_read_as_written(unbuilt: Path) -> None:
    report = capabilities(["nvml", "cublas"], lib_dir=unbuilt)
    validate(report, "capabilities")
    nvml, cublas = report["libraries"]
    assert {r["name"] for r in nvml["unsupported_declared"]} == {"nvmlDeviceSetPersistenceMode",
                                                                 "nvmlDeviceSetPowerManagementLimit"}
    assert all(r["reason"] for r in nvml["unsupported_declared"])
    table = (TABLES_DIR / "cuda" / "api" / "cublas.tsv").read_text().splitlines()
    rows = [ln.split("\t") for ln in table if ln and not ln.startswith("#")]
    assert [(r["name"], r["file"]) for r in cublas["implemented"]] == sorted((r[0], r[2]) for r in rows)
    assert report["fakecuda"] is None and report["strict"] is None and report["hits"] is None


def test_strict_on_an_unbuilt_tree_fails_saying_so(unbuilt: Path) -> None:
    report = capabilities(["cudart"], strict=True, lib_dir=unbuilt)
    assert not report["built"] and not report["strict"]["ok"]
    assert [(d["library"], d["kind"]) for d in report["strict"]["drift"]] == [("cudart", "not-built")]
    assert report["libraries"][0]["builds"] == []


def test_tables_outside_a_checkout_are_named(tmp_path: Path) -> None:
    with pytest.raises(TablesMissing, match="FakeGPU checkout"):
        load(tmp_path, tables_dir=tmp_path)


@pytest.mark.parametrize("content,message", [
    (None, "no such file or folder"),
    ("{not json", "not a readable JSON report"),
    ('{"schema": "fakegpu.cluster-report/v1"}', "cluster-report: it carries no per-call list"),
    ('{"hello": 1}', "no schema key: not a FakeGPU process report; accepted: native-process, nvml-process"),
    ('{"schema": "fakegpu.nvml-process/v1", "library": "nvml", "mode": "native", "pid": 1, "unsupported": {}}',
     "breaks the nvml-process schema"),
])
def test_bad_reports_are_refused_naming_the_file(tmp_path: Path, unbuilt: Path, content: str | None,
                                                 message: str) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message) as caught:
        capabilities(["cudart"], reports=[path], lib_dir=unbuilt)
    assert str(path) in caught.value.message


def test_a_folder_without_reports_is_refused(tmp_path: Path, unbuilt: Path) -> None:
    with pytest.raises(UsageError, match=r"no process report in it \(expected fakegpu-native-\*\.json or nvml-"):
        capabilities(["cudart"], reports=[tmp_path], lib_dir=unbuilt)


# what each library's recording path is called in its sources (driver/written.c, blas/record.c, dnn/record.c)
RECORDING_CALL = {"cuda": "fgd_written_kernel(", "cudart": "cuLaunchKernel(", "cublas": "fgblas_record(",
                  "cublasLt": "fgblas_record(", "cudnn": "fgdnn_launch("}


FOLDER = {"cuda": "driver", "cudart": "runtime", "cublas": "blas", "cublasLt": "blas", "cudnn": ""}


def _source(library: str, file: str) -> str:
    """The text of the source file an impl row names (relative to its library's folder; cuDNN's to native/cuda)."""
    return (TABLES_DIR / "cuda" / FOLDER[library] / file).read_text()


def test_recorded_functions_are_the_ones_that_only_record(unbuilt: Path) -> None:
    assert set(RECORDING_CALL) == set(descriptions.RECORDED)
    report = capabilities(list(descriptions.RECORDED), lib_dir=unbuilt)
    for lib in report["libraries"]:
        recorded = [f for f in lib["implemented"] if f["recorded"]]
        assert recorded, f"{lib['library']}: its RECORDED pattern matches no impl row"
        for f in recorded:
            assert RECORDING_CALL[lib["library"]] in _source(lib["library"], f["file"]), f["name"]
    cublas = next(lib for lib in report["libraries"] if lib["library"] == "cublas")
    # in cuBLAS the split is by file: every routine of gemm.c, level2.c and solve.c records, nothing else does
    assert {f["file"] for f in cublas["implemented"] if f["recorded"]} == {"gemm.c", "level2.c", "solve.c"}
    assert not any(f["recorded"] for f in cublas["implemented"] if f["file"] not in {"gemm.c", "level2.c", "solve.c"})
