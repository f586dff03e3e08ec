"""The library under abuse: many threads at once, missing or corrupt tables, garbage arguments. Clear
errors, never a crash."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from .conftest import NativeEnv

pytestmark = pytest.mark.native

HAMMER = r"""
import ctypes, threading
lib = ctypes.CDLL("libnvidia-ml.so.1")
errors = []

class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

def worker(seed):
    try:
        for i in range(1500):
            if lib.nvmlInit_v2() != 0:
                errors.append("init"); return
            n = ctypes.c_uint()
            lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2((seed + i) % n.value, ctypes.byref(h)) != 0:
                errors.append("handle"); return
            m = Mem()
            if lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) != 0 or m.total != 85899345920:
                errors.append("mem")
            name = ctypes.create_string_buffer(96)
            if lib.nvmlDeviceGetName(h, name, 96) != 0 or name.value != b"NVIDIA A100-SXM4-80GB":
                errors.append("name")
            t = ctypes.c_uint()
            lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(t))
            procs = (ctypes.c_ubyte * 4096)()
            cnt = ctypes.c_uint(64)
            lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(cnt), procs)
            lib.nvmlDeviceGetGpuOperationMode(h, None, None)
            lib.nvmlShutdown()
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print("errors", len(errors), errors[:5])
"""


def test_many_threads(native: NativeEnv) -> None:
    sleepers = []
    for dev in range(4):
        p = subprocess.Popen(["sleep", "60"])
        sleepers.append(p)
        native.register(p.pid, dev, (dev + 1) << 30, f"worker{dev}")
    try:
        out = native.python(HAMMER, devices="a100:4", FAKEGPU_STATE_TTL_MS="0")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    assert out.returncode == 0, out.stderr
    assert "errors 0 []" in out.stdout


GARBAGE = r"""
import ctypes
lib = ctypes.CDLL("libnvidia-ml.so.1")
lib.nvmlErrorString.restype = ctypes.c_char_p
h = ctypes.c_void_p()
out = []
# Before init: UNINITIALIZED, not a crash.
out.append(lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)))
out.append(lib.nvmlDeviceGetName(ctypes.c_void_p(1234), None, 0))
assert lib.nvmlInit_v2() == 0
bad = [None, ctypes.c_void_p(1), ctypes.c_void_p(0xdeadbeef), ctypes.c_void_p(-1)]
for handle in bad:
    out.append(lib.nvmlDeviceGetName(handle, ctypes.create_string_buffer(96), 96))
    out.append(lib.nvmlDeviceGetMemoryInfo(handle, None))
    out.append(lib.nvmlDeviceGetTopologyCommonAncestor(handle, handle, None))
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
out.append(lib.nvmlDeviceGetHandleByIndex_v2(99, ctypes.byref(h)))
out.append(lib.nvmlDeviceGetHandleByIndex_v2(0, None))
out.append(lib.nvmlDeviceGetHandleByUUID(None, ctypes.byref(h)))
out.append(lib.nvmlDeviceGetHandleByUUID(b"GPU-nope", ctypes.byref(h)))
out.append(lib.nvmlDeviceGetHandleByPciBusId_v2(b"zz:zz", ctypes.byref(h)))
out.append(lib.nvmlDeviceGetHandleBySerial(b"x" * 10000, ctypes.byref(h)))
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
out.append(lib.nvmlDeviceGetName(h, None, 96))
out.append(lib.nvmlDeviceGetName(h, ctypes.create_string_buffer(4), 4))
out.append(lib.nvmlDeviceGetMemoryInfo(h, None))
out.append(lib.nvmlDeviceGetTemperature(h, 99, ctypes.byref(ctypes.c_uint())))
out.append(lib.nvmlDeviceGetClockInfo(h, 1234, ctypes.byref(ctypes.c_uint())))
out.append(lib.nvmlDeviceGetNvLinkState(h, 99, ctypes.byref(ctypes.c_uint())))
out.append(lib.nvmlDeviceGetCpuAffinity(h, 0, None))
cnt = ctypes.c_uint(0)
out.append(lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(cnt), None))
out.append(lib.nvmlEventSetFree(None))
out.append(lib.nvmlEventSetWait_v2(None, None, 0))
mem2 = (ctypes.c_ubyte * 40)()
out.append(lib.nvmlDeviceGetMemoryInfo_v2(h, mem2))  # version 0: mismatch
for code in (0, 1, 3, 999, 12345, -1):
    assert lib.nvmlErrorString(code)
lib.nvmlShutdown(); lib.nvmlShutdown()
out.append(lib.nvmlShutdown())
print(out)
"""


def test_garbage_arguments(native: NativeEnv) -> None:
    out = native.python(GARBAGE, devices="a100:2")
    assert out.returncode == 0, out.stderr
    codes = ast.literal_eval(out.stdout)
    assert codes[:2] == [1, 1]  # UNINITIALIZED
    assert codes[2:14] == [2] * 12  # INVALID_ARGUMENT for every bad handle
    assert codes[14:] == [2, 2, 2, 6, 6, 6, 2, 7, 2, 2, 2, 2, 2, 0, 2, 2, 25, 1]


def init_result(native: NativeEnv, **env: str) -> tuple[int, str]:
    code = "import ctypes; print(ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2())"
    out = native.python(code, devices=None, FAKEGPU_DEBUG="1", **env)
    assert out.returncode == 0, out.stderr
    return int(out.stdout), out.stderr


def test_missing_table(native: NativeEnv, tmp_path: Path) -> None:
    rc, err = init_result(native, FAKEGPU_DEVICE_TABLE=str(tmp_path / "absent.tbl"))
    assert rc == 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    assert "absent.tbl" in err and "No such file" in err


def test_missing_catalog(native: NativeEnv, tmp_path: Path) -> None:
    rc, err = init_result(native, FAKEGPU_DEVICES="a100", FAKEGPU_CATALOG_TABLE=str(tmp_path / "none.tbl"))
    assert rc == 12 and "none.tbl" in err


CORRUPT = {
    "empty": "",
    "binary": "\x00\x01\x02garbage",
    "no-header": "device\tindex=0\tname=X\n",
    "wrong-format": "fakegpu-device-table\tformat=9\tcount=0\n",
    "count-mismatch": "fakegpu-device-table\tformat=1\tcount=3\n",
    "not-kv": "fakegpu-device-table\tformat=1\tcount=1\ndevice\tjunk\n",
    "missing-keys": "fakegpu-device-table\tformat=1\tcount=1\ndevice\tindex=0\tname=X\n",
    "bad-number": "fakegpu-device-table\tformat=1\tcount=1\ndevice\tindex=0\tname=X\tuuid=GPU-1\tpci_bus_id=0:1:0.0"
                  "\tmemory.total_bytes=lots\tcompute_capability=8.0\tpower.default_limit_w=1\n",
    "bad-order": "fakegpu-device-table\tformat=1\tcount=1\ndevice\tindex=5\tname=X\tuuid=GPU-1\tpci_bus_id=0:1:0.0"
                 "\tmemory.total_bytes=1\tcompute_capability=8.0\tpower.default_limit_w=1\n",
    "unknown-record": "fakegpu-device-table\tformat=1\tcount=0\nwhat\ta=b\n",
    "huge-line": "fakegpu-device-table\tformat=1\tcount=1\ndevice" + "\tk=v" * 5000 + "\n",
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_table(native: NativeEnv, tmp_path: Path, kind: str) -> None:
    table = tmp_path / "devices.tbl"
    table.write_text(CORRUPT[kind], encoding="latin-1")
    rc, err = init_result(native, FAKEGPU_DEVICE_TABLE=str(table))
    assert rc == 1, err  # NVML_ERROR_UNINITIALIZED
    assert "fakegpu: nvmlInit failed:" in err and str(table) in err


def test_corrupt_table_in_nvidia_smi(native: NativeEnv, tmp_path: Path) -> None:
    table = tmp_path / "devices.tbl"
    table.write_text(CORRUPT["missing-keys"])
    out = native.smi("-L", devices=None, FAKEGPU_DEVICE_TABLE=str(table))
    assert out.returncode == 255
    assert "Failed to initialize NVML: Uninitialized" in out.stdout
    assert "lacks" in out.stderr


def test_bad_spec_message(native: NativeEnv) -> None:
    rc, err = init_result(native, FAKEGPU_DEVICES="a100:2,h9000")
    assert rc == 1 and "unknown profile 'h9000'" in err


def test_quiet_without_debug(native: NativeEnv, tmp_path: Path) -> None:
    code = "import ctypes; print(ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2())"
    out = native.python(code, devices=None, FAKEGPU_DEVICE_TABLE=str(tmp_path / "absent"))
    assert out.stdout.strip() == "12" and out.stderr == ""
