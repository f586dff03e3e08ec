"""Issue 4's acceptance on the machine's real Docker Engine: what a user sees in a plain Debian container run
with `--runtime=fakegpu` (nvidia-smi, pynvml), the same image without the variable, the demo script that
`make demo` runs, and the fakegpu/cuda image with no runtime at all. Expected values come from the profiles
through `fakegpu.devices` (the one parser), never from literals here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.conftest import REPO
from tests.container.conftest import LABEL, docker, need, run

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("fakegpu_runtime")]
NATIVE = REPO / "native" / "build"
STATE_ROOT = Path("/run/fakegpu")


def need_native() -> None:
    need((NATIVE / "lib" / "libnvidia-ml.so.1").exists() and (NATIVE / "bin" / "nvidia-smi").exists(),
         f"native build missing in {NATIVE} (run `make native`)")


def smi_list(spec: str) -> list[str]:
    """`nvidia-smi -L` as a real board would print it for these devices."""
    return [f"GPU {d.index}: {d.profile.data['name']} (UUID: {d.uuid})" for d in resolve_devices(spec, seed="0")]


def test_heterogeneous_spec_lists_every_device_in_order():
    need_native()
    result = run("-e", "FAKEGPU_DEVICES=h100:2,l4", "--", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_list("h100:2,l4")
    names = [line.split(": ", 1)[1].split(" (UUID")[0] for line in result.stdout.splitlines()]
    assert names == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA L4"]


def test_processes_with_a_cleaned_environment_still_see_the_devices():
    # env -i, su - and sudo drop FAKEGPU_DEVICES; on a real host the GPUs stay visible, so the shims fall
    # back to the table the runtime mounted at /run/fakegpu/devices.tbl.
    need_native()
    result = run("-e", "FAKEGPU_DEVICES=a100:2", "--", "env", "-i", "nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_list("a100:2")


def test_query_gpu_csv():
    need_native()
    result = run("-e", "FAKEGPU_DEVICES=a100:4", "--",
                 "nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader")
    assert result.returncode == 0, result.stderr
    expected = [f"{d.index}, {d.profile.data['name']}, {d.profile.data['memory']['total_bytes'] // 2**20} MiB"
                for d in resolve_devices("a100:4")]
    assert result.stdout.splitlines() == expected


PYNVML_SCRIPT = """
import json, pynvml
pynvml.nvmlInit()
devices = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    name = pynvml.nvmlDeviceGetName(h)
    devices.append({"name": name if isinstance(name, str) else name.decode(), "uuid": pynvml.nvmlDeviceGetUUID(h),
                    "total": pynvml.nvmlDeviceGetMemoryInfo(h).total})
pynvml.nvmlShutdown()
print(json.dumps({"module": pynvml.__file__, "devices": devices}))
"""


def test_pynvml_from_the_host_venv_sees_the_devices(tmp_path):
    """nvidia-ml-py (pure Python, the test extra) mounted read-only into the plain Debian image's python3."""
    need_native()
    try:
        import pynvml
    except ImportError:
        need(False, "nvidia-ml-py is not installed (pip install -e '.[test]')")
    module = Path(pynvml.__file__).resolve()
    script = tmp_path / "list_devices.py"
    script.write_text(PYNVML_SCRIPT)
    tmp_path.chmod(0o755)
    result = run("-e", "FAKEGPU_DEVICES=h100:2,l4", "-e", "PYTHONPATH=/opt/fakegpu-test",
                 "-v", f"{module}:/opt/fakegpu-test/pynvml.py:ro", "-v", f"{script}:/opt/fakegpu-test/list.py:ro",
                 "--", "python3", "/opt/fakegpu-test/list.py")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["module"] == "/opt/fakegpu-test/pynvml.py"
    expected = [{"name": d.profile.data["name"], "uuid": d.uuid, "total": d.profile.data["memory"]["total_bytes"]}
                for d in resolve_devices("h100:2,l4", seed="0")]
    assert got["devices"] == expected


def test_same_image_without_the_variable_has_no_gpu_files():
    """No FAKEGPU_DEVICES: no device nodes, no NVML library anywhere the loader or a search finds it, no
    nvidia-smi, no /run/fakegpu; and no state folder on the host."""
    before = set(os.listdir(STATE_ROOT)) if STATE_ROOT.exists() else set()
    script = (
        "ls -d /dev/nvidia* 2>/dev/null && echo FOUND-DEV; "
        "command -v nvidia-smi && echo FOUND-SMI; "
        "find / -xdev \\( -name 'libnvidia-ml*' -o -name 'nvidia-smi' -o -name 'devices.tbl' \\) 2>/dev/null "
        "| sed 's/^/FOUND-FILE /'; "
        "test -e /run/fakegpu && echo FOUND-RUN; "
        "python3 -c \"import ctypes\ntry:\n ctypes.CDLL('libnvidia-ml.so.1'); print('FOUND-NVML')\n"
        "except OSError: print('no nvml')\"; "
        "env | grep -E '^(FAKEGPU|NVIDIA)_' | sed 's/^/FOUND-ENV /'; echo done"
    )
    for extra in ([], ["-e", "FAKEGPU_DEVICES=void"], ["-e", "FAKEGPU_DEVICES="]):
        result = run(*extra, "--", "sh", "-c", script)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "no nvml" in out and out.rstrip().endswith("done")
        found = [line for line in out.splitlines() if line.startswith("FOUND") and "FAKEGPU_DEVICES=" not in line]
        assert found == [], (extra, found)
    after = set(os.listdir(STATE_ROOT)) if STATE_ROOT.exists() else set()
    assert after <= before


def test_demo_script_runs_end_to_end():
    """What `make demo` runs after installing: base image, runtime registration, nvidia-smi in a container."""
    need_native()
    need(os.geteuid() == 0, "the demo registers the runtime and needs root")
    fakegpu = Path(sys.executable).with_name("fakegpu")
    result = subprocess.run([str(REPO / "images" / "demo.sh")], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "FAKEGPU": str(fakegpu), "FAKEGPU_DEMO_LABEL": LABEL})
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    for line in smi_list("a100:2,h100"):
        assert line in result.stdout
    assert "NVIDIA-SMI" in result.stdout and "81559MiB" in result.stdout  # the full table, H100's NVML total
    assert "no nvidia-smi, no /dev/nvidia*" in result.stdout
    assert docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.strip() == ""


def test_demo_script_fails_loudly_without_the_native_build(tmp_path):
    """A missing step is a failed demo, not a skipped one."""
    need(os.geteuid() == 0, "the demo needs root")
    fake_repo = tmp_path / "repo"
    (fake_repo / "images").mkdir(parents=True)
    (fake_repo / "images" / "demo.sh").write_bytes((REPO / "images" / "demo.sh").read_bytes())
    (fake_repo / "images" / "demo.sh").chmod(0o755)
    fakegpu = Path(sys.executable).with_name("fakegpu")
    result = subprocess.run([str(fake_repo / "images" / "demo.sh")], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "FAKEGPU": str(fakegpu)})
    assert result.returncode != 0 and "no native build" in result.stderr


def test_cuda_image_needs_no_runtime():
    """fakegpu/cuda:<version>, built by images/build.sh (reused when cached), with plain runc."""
    need_native()
    need(os.geteuid() == 0, "building images needs the Docker daemon as root")
    built = subprocess.run([str(REPO / "images" / "build.sh")], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, f"{built.stdout}\n{built.stderr}"
    from fakegpu import __version__

    image = f"fakegpu/cuda:{__version__}"
    assert docker("image", "inspect", image).returncode == 0, built.stdout
    # runc named explicitly: even a daemon whose default runtime is fakegpu must not be what makes this work.
    result = run("-e", "FAKEGPU_DEVICES=h100:2", "--", "nvidia-smi", "-L", image=image, runtime="runc")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == smi_list("h100:2")
