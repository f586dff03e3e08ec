"""`fakegpu run`: device resolution, exit status, the fakecuda hook folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.launcher import prepare, python_hook_dir
from tests.native.conftest import NATIVE_CUDA_VERSION, NATIVE_DRIVER_VERSION
from tests.native_cuda.conftest import REPO, run_fakegpu


def test_bad_spec_is_a_usage_error() -> None:
    proc = run_fakegpu(["--devices", "nope:2", "--", "true"])
    assert proc.returncode == 2 and "invalid device spec" in proc.stderr


def test_bad_mode_and_missing_command_are_usage_errors() -> None:
    assert run_fakegpu(["--mode", "cuda", "--", "true"]).returncode == 2
    assert run_fakegpu([]).returncode == 2


def test_child_status_and_environment(cuda_build) -> None:
    proc = run_fakegpu(["--devices", "a100:2", "--", "sh", "-c", 'echo "$FAKEGPU_DEVICES"; exit 7'])
    assert proc.returncode == 7 and proc.stdout.strip() == "a100:2"


def test_native_env_preloads_our_libraries(cuda_build) -> None:
    launch = prepare("h100:1", "native", base_env={"PATH": "/usr/bin"}, lib_dir=cuda_build)
    try:
        pre = launch.env["LD_PRELOAD"].split(":")
        assert Path(pre[0]).name == "libcuda.so.1" and all(Path(p).is_file() for p in pre)
        assert Path(launch.env["FAKEGPU_DEVICE_TABLE"]).is_file()
        assert {Path(p).name for p in pre} >= {"libcudart.so.13", "libcudart.so.12"}, "both CUDA majors' sets"
        mirror = Path(launch.env["PYTHONPATH"].split(":")[0])
        assert (mirror / "nvidia" / "cu13" / "lib" / "libcudart.so.13").resolve() == (cuda_build / "libcudart.so.13")
        # CUDA 12 wheels: a folder per package (torch 2.10's _preload_cuda_deps looks there)
        for folder, name in (
            ("cuda_runtime", "libcudart.so.12"),
            ("cublas", "libcublasLt.so.12"),
            ("cusolver", "libcusolver.so.11"),
            ("cusparse", "libcusparse.so.12"),
        ):
            assert (mirror / "nvidia" / folder / "lib" / name).resolve() == cuda_build / name
        assert "FAKEGPU_CUDA_VERSION" not in launch.env  # the libraries' one default driver applies
    finally:
        launch.cleanup()
    assert not launch.root.exists()


def test_fakecuda_finds_our_nvml_and_nothing_else_of_the_build(cuda_build) -> None:
    """pynvml, nvitop and gpustat in a fakecuda process load libnvidia-ml.so.1 by name; the build's libcuda must
    stay out of reach, or the CUDA build of torch would take native mode's path."""
    launch = prepare("h100:1", "fakecuda", base_env={"PATH": "/usr/bin"}, lib_dir=cuda_build)
    try:
        folder = Path(launch.env["LD_LIBRARY_PATH"].split(":")[0])
        assert sorted(p.name for p in folder.iterdir()) == ["libnvidia-ml.so.1"]
        assert (folder / "libnvidia-ml.so.1").resolve() == cuda_build / "libnvidia-ml.so.1"
        assert "LD_PRELOAD" not in launch.env
    finally:
        launch.cleanup()
    code = ("import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); "
            "print(n.nvmlDeviceGetCount(), n.nvmlDeviceGetName(h))")
    proc = run_fakegpu(["--devices", "a100:2", "--mode", "fakecuda", "--", sys.executable, "-c", code])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "NVIDIA", "A100-SXM4-80GB"]


def test_hook_dir_chains_to_existing_sitecustomize(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os; os.environ['CHAINED'] = '1'\n")
    hook = python_hook_dir(tmp_path / "x")
    repo = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": f"{hook}:{repo}:{other}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; print(os.environ.get('CHAINED'), 'fakegpu.fakecuda.envhook' in sys.modules)",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.split() == ["1", "True"], out.stderr


# NVML's driver and CUDA versions and cuDriverGetVersion, as one line.
DRIVER_PROBE = """
import ctypes, os
lib = os.environ["FAKEGPU_LIB"]
cuda = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
nvml = ctypes.CDLL(os.path.join(lib, "libnvidia-ml.so.1"))
v, n = ctypes.c_int(), ctypes.c_int()
buf = ctypes.create_string_buffer(80)
assert cuda.cuDriverGetVersion(ctypes.byref(v)) == 0 and nvml.nvmlInit_v2() == 0
assert nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(n)) == 0
assert nvml.nvmlSystemGetDriverVersion(buf, 80) == 0
print(buf.value.decode(), v.value, n.value)
"""


def test_nvml_and_libcuda_report_one_driver(cuda_env: dict[str, str]) -> None:
    # A host has one driver: NVML (and so nvidia-smi) and cuDriverGetVersion agree, by default and when the
    # driver is chosen (its branch then decides the CUDA version: 550 ships CUDA 12.4).
    seen = {}
    for chosen in (None, "550.127.08", "570.133.20"):
        env = dict(cuda_env, **({"FAKEGPU_DRIVER_VERSION": chosen} if chosen else {}))
        out = subprocess.run([sys.executable, "-c", DRIVER_PROBE], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        seen[chosen] = out.stdout.split()
    assert seen == {None: [NATIVE_DRIVER_VERSION, NATIVE_CUDA_VERSION, NATIVE_CUDA_VERSION],
                    "550.127.08": ["550.127.08", "12040", "12040"], "570.133.20": ["570.133.20", "12080", "12080"]}


def test_the_device_table_names_the_driver_for_processes_without_the_variable(cuda_env: dict[str, str],
                                                                             tmp_path: Path) -> None:
    # In a container the runtime resolves the driver once and writes it into the table, which every process
    # there reads (docker exec ones too, whose environment is the image's); a process's own variable still wins.
    from fakegpu.devices import resolve_devices
    from fakegpu.devices.table import write_table

    seen = {}
    # A header near its longest (NVIDIA_VISIBLE_DEVICES's 4096 bytes of UUIDs come before driver=) reads the same.
    long_visible = [f"GPU-{k:036d}" for k in range(100)]
    for table_driver, variable, visible in (("550.127.08", None, None), ("550.127.08", "570.133.20", None),
                                            ("r550", None, None), ("535.104.05", None, long_visible)):
        table = tmp_path / f"devices-{table_driver}-{variable}.tbl"
        write_table(table, resolve_devices("a100:1", seed="0"), "a100:1", "0", visible, driver=table_driver)
        env = dict(cuda_env, FAKEGPU_DEVICE_TABLE=str(table),
                   **({"FAKEGPU_DRIVER_VERSION": variable} if variable else {}))
        out = subprocess.run([sys.executable, "-c", DRIVER_PROBE], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        seen[table_driver, variable] = out.stdout.split()
    assert seen == {("550.127.08", None): ["550.127.08", "12040", "12040"],
                    ("550.127.08", "570.133.20"): ["570.133.20", "12080", "12080"],
                    # not a driver version: ignored, the default stands
                    ("r550", None): [NATIVE_DRIVER_VERSION, NATIVE_CUDA_VERSION, NATIVE_CUDA_VERSION],
                    ("535.104.05", None): ["535.104.05", "12020", "12020"]}


def test_one_copy_of_the_native_versions(cuda_env: dict[str, str], tmp_path: Path) -> None:
    # fakegpu/data/native_versions.json is compiled into libcuda and NVML (tools/gen_cuda_versions.py).
    data = json.loads((REPO / "fakegpu" / "data" / "native_versions.json").read_text())
    code = """
import ctypes, os
lib = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], "libcuda.so.1"))
v = ctypes.c_int()
print(lib.cuDriverGetVersion(ctypes.byref(v)), v.value)
"""
    env = {k: v for k, v in cuda_env.items() if k != "FAKEGPU_CUDA_VERSION"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", str(data["cuda_version"])], out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"driver_version": "580", "cuda_version": 13000}')
    tool = str(REPO / "tools" / "gen_cuda_versions.py")
    gen = subprocess.run(
        [sys.executable, tool, "--json", str(bad), "--out", str(tmp_path / "h")], capture_output=True, text=True
    )
    assert gen.returncode == 1 and "driver_version must look like 580.95.05" in gen.stderr


def test_a_runtime_newer_than_the_driver_is_refused(cuda_env: dict[str, str]) -> None:
    # As a real driver: CUDA 13's runtime on a 550 driver (CUDA 12.4) answers cudaErrorInsufficientDriver (35);
    # CUDA 12's runtime runs on it (minor version compatibility) and on the default 580 driver alike.
    code = """
import ctypes, os, sys
rt = ctypes.CDLL(os.path.join(os.environ["FAKEGPU_LIB"], sys.argv[1]))
n = ctypes.c_int(-1)
v = ctypes.c_int()
rc = rt.cudaGetDeviceCount(ctypes.byref(n))
rt.cudaDriverGetVersion(ctypes.byref(v))
rt.cudaGetErrorString.restype = ctypes.c_char_p
print(rc, n.value, v.value, rt.cudaGetErrorString(rc).decode())
"""
    seen = {}
    for lib in ("libcudart.so.13", "libcudart.so.12"):
        for driver in ("550.127.08", None):
            env = dict(cuda_env, **({"FAKEGPU_DRIVER_VERSION": driver} if driver else {}))
            out = subprocess.run([sys.executable, "-c", code, lib], env=env, capture_output=True, text=True,
                                 timeout=60)
            assert out.returncode == 0, out.stderr
            seen[lib, driver] = out.stdout.strip().split(maxsplit=3)
    assert seen["libcudart.so.13", "550.127.08"] == [
        "35", "0", "12040", "CUDA driver version is insufficient for CUDA runtime version"]
    assert seen["libcudart.so.12", "550.127.08"][:3] == ["0", "2", "12040"]
    assert seen["libcudart.so.13", None][:3] == seen["libcudart.so.12", None][:3] == ["0", "2", NATIVE_CUDA_VERSION]


def test_bad_driver_version_is_a_usage_error() -> None:
    proc = run_fakegpu(["--driver", "550", "--", "true"])
    assert proc.returncode == 2 and "expected one like 580.95.05" in proc.stderr
    hostile = run_fakegpu(["--driver", "5" * 100_000, "--", "true"])
    assert hostile.returncode == 2 and "expected one like 580.95.05" in hostile.stderr
    assert len(hostile.stderr) < 2000  # a hostile value is named by its length, never echoed whole


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_a_signal_to_the_launcher_reaches_the_command_and_leaves_nothing(cuda_build, tmp_path: Path,
                                                                           sig: int) -> None:
    """A supervisor's signal to `fakegpu run` (no --timeout; no terminal, so SIGINT is the supervisor's too) goes
    on to the command, whose status the launcher returns after removing its run folder."""
    marker = tmp_path / "got"
    script = (f"import signal, sys, time; signal.signal({int(sig)}, lambda *a: (open({str(marker)!r}, 'w').close(), "
              f"sys.exit(3))); print('ready', flush=True); time.sleep(60)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "run", "--devices", "a100", "--", sys.executable, "-c",
                             script], env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        child = _children(proc.pid)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 3  # the command's own status, after its handler ran
    finally:
        if proc.poll() is None:
            proc.kill()
    assert marker.exists()
    assert not [p for p in child if Path(f"/proc/{p}").exists()]
    assert not list(tmp_path.glob("fakegpu-run-*")), "the run's folder was left behind"


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out
