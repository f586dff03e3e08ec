"""Input bounds: the same numbers in C and Python, checked before any other work, refused cheaply and briefly."""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.devices import MAX_SEED_LENGTH, MAX_SPEC_LENGTH, resolve_devices
from fakegpu.errors import InvalidDeviceSpec, InvalidSeed
from tests.conftest import REPO
from tests.hook.conftest import DATA, MOCK_BIN

CREATE = REPO / "native" / "build" / "bin" / "fakegpu-create"
PY_RUNTIME = Path(sys.executable).with_name("fakegpu-container-runtime")


def test_c_and_python_state_the_same_limits():
    header = (REPO / "native" / "common" / "fg_devices.h").read_text()
    c = {m[0]: int(m[1]) for m in re.findall(r"#define (FG_MAX_\w+) (\d+)", header)}
    assert c["FG_MAX_SPEC_LENGTH"] == MAX_SPEC_LENGTH and c["FG_MAX_SEED_LENGTH"] == MAX_SEED_LENGTH


@pytest.mark.parametrize("spec", ["x" * 20_000, "a100:2" + " " * 1_000_000, "a100," * 300])
def test_the_parser_refuses_past_the_limit_without_echoing(spec):
    with pytest.raises(InvalidDeviceSpec) as exc:
        resolve_devices(spec)
    assert "at most 1024" in exc.value.message and len(exc.value.message) < 400


def test_a_long_unknown_name_costs_no_edit_distance():
    import time

    start = time.process_time()
    with pytest.raises(InvalidDeviceSpec) as exc:
        resolve_devices("q" * 1000)
    assert time.process_time() - start < 0.2 and "Did you mean" not in exc.value.message


def test_seeds_past_the_limit_are_refused_and_long_ones_stay_distinct():
    with pytest.raises(InvalidSeed, match="at most 128"):
        resolve_devices("a100:2", seed="s" * (MAX_SEED_LENGTH + 1))
    devices = resolve_devices("a100:3", seed="s" * MAX_SEED_LENGTH)
    assert len({d.uuid for d in devices}) == 3


def _bundle(tmp_path: Path, env: list[str]) -> Path:
    b = tmp_path / "b"
    shutil.copytree(DATA / "bundles" / "gpu", b)
    shutil.copytree(DATA / "rootfs" / "debian", b / "rootfs", symlinks=True)
    data = json.loads((b / "config.json").read_text())
    data["process"]["env"] = [e for e in data["process"]["env"] if not e.startswith("FAKEGPU_")] + env
    (b / "config.json").write_text(json.dumps(data))
    return b


def _pycode() -> str:
    from fakegpu_hook import front

    return front._pycode("fakegpu_hook.runtime", str(PY_RUNTIME), front.package_path())


# What each variable needs beside it to be read at all.
_COMPANION = {"FAKEGPU_DEVICES": [], "FAKEGPU_SEED": ["FAKEGPU_DEVICES=a100:2"], "NVIDIA_VISIBLE_DEVICES": [],
              "NVIDIA_DRIVER_CAPABILITIES": ["NVIDIA_VISIBLE_DEVICES=all"]}


@pytest.mark.parametrize("entry", ["python", "c"])
@pytest.mark.parametrize("var,value", [("FAKEGPU_DEVICES", "a100:2" + " " * 1_000_000),
                                       ("FAKEGPU_SEED", "s" * 10_000),
                                       ("NVIDIA_VISIBLE_DEVICES", "0," * 500_000),
                                       ("NVIDIA_DRIVER_CAPABILITIES", "utility," * 100_000)])
def test_the_runtime_refuses_a_megabyte_in_under_half_a_second(entry, var, value, tmp_path):
    """The whole create, as dockerd runs it (C hands the refusal to Python, which words it): under 0.5 s of CPU,
    one short line on stderr and in runc's JSON log, config.json untouched, no state folder."""
    if entry == "c" and not CREATE.exists():
        pytest.skip("native/build/bin/fakegpu-create not built (run `make`)")
    env_list = [f"{var}={value}", *_COMPANION[var]]
    b = _bundle(tmp_path, env_list)
    before = (b / "config.json").read_bytes()
    env = {"PATH": f"{MOCK_BIN}:/usr/bin:/bin", "MOCK_RUNC_LOG": str(tmp_path / "runc.log"),
           "FAKEGPU_CONFIG": str(tmp_path / "no-config.json"), "FAKEGPU_STATE_ROOT": str(tmp_path / "state")}
    args = ["--log", str(tmp_path / "log.json"), "--log-format", "json", "create", "--bundle", str(b), "ctr-1"]
    cmd = ([str(PY_RUNTIME), *args] if entry == "python" else
           [str(CREATE), "--python", sys.executable, "--pycode", _pycode(), "--native-default", "/nonexistent",
            "--catalog", str(REPO / "fakegpu" / "data" / "catalog.tbl"), "--", *args])
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    assert result.returncode == 1
    assert f"{var}" in result.stderr and "at most" in result.stderr and len(result.stderr) < 600, result.stderr
    log = (tmp_path / "log.json").read_text().splitlines()
    assert len(log) == 1 and len(log[0]) < 800 and "at most" in json.loads(log[0])["msg"]
    assert (b / "config.json").read_bytes() == before and not (tmp_path / "state" / "ctr-1").exists()
    assert not (tmp_path / "runc.log").exists()
    assert used < 0.5, f"{used:.2f} s of CPU"
