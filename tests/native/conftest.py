"""Fixtures for the native NVML library and nvidia-smi (built by `make native` into native/build).

Without a build these tests skip with the reason, unless CI=true: then they fail, because CI must build them.
Every run gets a clean FAKEGPU_* environment, a private state folder and a small catalog of four real profiles,
so golden files move only when those profiles change, not whenever profiles/ grows.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakegpu.profiles import Catalog, Profile, load_catalog
from fakegpu.profiles.table import render_catalog_table
from fakegpu.shared_state import WORK_MEMORY, StateFile

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "native" / "build"
LIB_DIR = BUILD / "lib"
SMI = BUILD / "bin" / "nvidia-smi"
DEVTOOL = BUILD / "bin" / "fakegpu-devices"
GOLDEN = REPO / "tests" / "golden"
IN_CI = os.environ.get("CI") == "true"
# The one driver the native libraries report by default (libcuda and NVML compile it in).
NATIVE_VERSIONS = json.loads((REPO / "fakegpu" / "data" / "native_versions.json").read_text(encoding="utf-8"))
NATIVE_DRIVER_VERSION = NATIVE_VERSIONS["driver_version"]
NATIVE_CUDA_VERSION = str(NATIVE_VERSIONS["cuda_version"])
MIB = 1 << 20


# Real profiles covering what the A100 does not: NVLink 4 and PCIe 5 (H100), PCIe-only without MIG (L4),
# fans and no ECC (RTX 4090). Golden files pin their facts: a profile edit shows up as a golden diff.
TEST_PROFILES = ("a100-sxm4-80gb", "h100-sxm5-80gb", "l4-24gb", "rtx-4090")


def golden_profiles() -> list[Profile]:
    catalog = load_catalog()
    return [catalog.get(name) for name in TEST_PROFILES]


@pytest.fixture(scope="session")
def native_build() -> Path:
    missing = [p for p in (LIB_DIR / "libnvidia-ml.so.1", SMI, DEVTOOL) if not p.exists()]
    if missing:
        reason = f"native build absent ({', '.join(str(p.relative_to(REPO)) for p in missing)}); run `make native`"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return BUILD


@pytest.fixture(scope="session")
def test_catalog(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Catalog]:
    profiles = golden_profiles()
    path = tmp_path_factory.mktemp("catalog") / "catalog.tbl"
    path.write_text(render_catalog_table(profiles), encoding="utf-8")
    return path, Catalog(profiles)


@dataclass
class NativeEnv:
    """Runs native binaries and Python snippets against the library with a controlled environment."""

    catalog: Path
    state_dir: Path
    entries: dict[int, StateFile] = field(default_factory=dict)

    def env(self, devices: str | None = None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
        env.update(
            FAKEGPU_CATALOG_TABLE=str(self.catalog),
            FAKEGPU_STATE_DIR=str(self.state_dir),
            FAKEGPU_CPU_COUNT="64",
            LD_LIBRARY_PATH=f"{LIB_DIR}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
            TZ="UTC",
        )
        if devices is not None:
            env["FAKEGPU_DEVICES"] = devices
        env.update(extra)
        return env

    def smi(self, *args: str, devices: str | None = "a100:2", timeout: float = 30,
            **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SMI), *args], capture_output=True, text=True, env=self.env(devices, **extra),
                              timeout=timeout)

    def python(self, code: str, devices: str | None = "a100:2", timeout: float = 120,
               **extra: str) -> subprocess.CompletedProcess[str]:
        import sys

        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=self.env(devices, **extra), timeout=timeout)

    def register(self, pid: int, device: int, used_bytes: int, name: str, kind: str = "C") -> Path:
        """Publish a process's use of a device, as its CUDA library would (fakegpu/shared_state.py)."""
        if pid not in self.entries:
            self.entries[pid] = StateFile(str(self.state_dir), pid, name, kind)
        self.entries[pid].set(device, used_bytes)
        return Path(self.entries[pid].path)

    @contextlib.contextmanager
    def working(self, pid: int, device: int, kind: int = WORK_MEMORY) -> Iterator[None]:
        """A registered process keeps the device busy while the block runs: back-to-back work of `kind` reported
        every few milliseconds, as a CUDA library reports a loop of launches (fakegpu/shared_state.py)."""
        stop = threading.Event()

        def mark() -> None:
            last = time.monotonic_ns()
            while not stop.is_set():
                now = time.monotonic_ns()
                self.entries[pid].busy(device, kind, last, now)
                last = now
                stop.wait(0.005)

        worker = threading.Thread(target=mark, daemon=True)
        worker.start()
        try:
            time.sleep(1.05)  # a whole second of busy slots, the window power is averaged over
            yield
        finally:
            stop.set()
            worker.join()

    def close(self) -> None:
        for entry in self.entries.values():
            entry.close(remove=False)
        self.entries.clear()


@pytest.fixture
def native(native_build: Path, test_catalog: tuple[Path, Catalog], tmp_path: Path) -> Iterator[NativeEnv]:
    state = tmp_path / "state"
    state.mkdir()
    env = NativeEnv(catalog=test_catalog[0], state_dir=state)
    yield env
    env.close()
