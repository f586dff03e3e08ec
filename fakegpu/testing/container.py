"""`FakeGPUContainer`: a testcontainers-python container with fake GPUs.

    >>> with FakeGPUContainer("fakegpu/pytorch:latest", devices="a100:2") as c:   # doctest: +SKIP
    ...     c.python("import torch; print(torch.cuda.device_count())").output
    '2\\n'

Images with fakegpu inside (fakegpu/pytorch) need nothing else; any other image gets the devices from the
registered Docker runtime: `FakeGPUContainer("debian-image", runtime="fakegpu")`. Each process's report lands in
a host folder, read back with `reports()`. testcontainers' Ryuk reaper image cannot be pulled where there is no
registry, so it is turned off and every container carries LABEL=<session id> for `cleanup()`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # read by testcontainers when imported

from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

from fakegpu.devices import resolve_devices
from fakegpu.errors import FakeGPUError
from fakegpu.reports import schema_id

testcontainers_config.ryuk_disabled = True
LABEL = "fakegpu.testing"
SESSION = uuid.uuid4().hex[:12]
REPORTS_IN_CONTAINER = "/fakegpu/reports"
MODES = ("fakecuda", "native")


@dataclass
class ExecResult:
    exit_code: int
    output: str


class FakeGPUContainer(DockerContainer):
    def __init__(self, image: str = "fakegpu/pytorch:latest", devices: str = "a100:2", mode: str = "fakecuda",
                 runtime: str | None = None, seed: int = 0, ready_timeout: float = 60.0, **kwargs) -> None:
        if mode not in MODES:
            raise FakeGPUError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.devices = [d.uuid for d in resolve_devices(devices, seed=str(seed))]  # a bad spec fails here
        super().__init__(image, **kwargs)
        self.spec, self.mode, self.runtime, self.seed = devices, mode, runtime, seed
        self.ready_timeout = ready_timeout
        self.report_dir = Path(tempfile.mkdtemp(prefix="fakegpu-reports-"))

    def _configure(self) -> None:
        self.with_env("FAKEGPU_DEVICES", self.spec)
        self.with_env("FAKEGPU_SEED", str(self.seed))
        self.with_env("FAKEGPU_RUNTIME", self.mode)
        self.with_env("FAKEGPU_REPORT_DIR", REPORTS_IN_CONTAINER)
        self.with_volume_mapping(str(self.report_dir), REPORTS_IN_CONTAINER, "rw")
        self.with_command("sleep infinity")
        extra = {"labels": {LABEL: SESSION}}
        if self.runtime:
            extra["runtime"] = self.runtime
        self.with_kwargs(**extra)

    def start(self) -> FakeGPUContainer:
        self._configure()
        super().start()
        self._wait_for_gpus()
        return self

    def _wait_for_gpus(self) -> None:
        """Ready once `nvidia-smi -L` lists every device (the container has started and sees its GPUs)."""
        deadline = time.monotonic() + self.ready_timeout
        result = ExecResult(-1, "")
        while time.monotonic() < deadline:
            result = self.run("nvidia-smi", "-L")
            if result.exit_code == 0 and result.output.count("GPU ") == len(self.devices):
                return
            time.sleep(0.2)
        raise FakeGPUError(f"container did not show {len(self.devices)} GPUs within {self.ready_timeout} s: "
                           f"nvidia-smi -L -> {result.exit_code}: {result.output[-500:]}")

    def run(self, *argv: str) -> ExecResult:
        code, out = self.get_wrapped_container().exec_run(list(argv))
        return ExecResult(code, out.decode(errors="replace"))

    def python(self, code: str) -> ExecResult:
        return self.run("python3", "-c", code)

    def nvidia_smi(self, *args: str) -> str:
        result = self.run("nvidia-smi", *args)
        if result.exit_code != 0:
            raise FakeGPUError(f"nvidia-smi {' '.join(args)} failed ({result.exit_code}): {result.output}")
        return result.output

    def reports(self) -> list[dict]:
        """Every fakecuda process report written so far (one per process that has exited)."""
        docs = []
        for path in sorted(self.report_dir.glob("*.json")):
            doc = json.loads(path.read_text())
            if doc.get("schema") == schema_id("fakecuda-process"):
                docs.append(doc)
        return docs

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        try:
            super().stop(force, delete_volume)
        finally:
            shutil.rmtree(self.report_dir, ignore_errors=True)


def cleanup(session: str | None = SESSION) -> int:
    """Remove containers made by FakeGPUContainer (this session's, or every session's with None)."""
    import docker

    client = docker.from_env()
    label = f"{LABEL}={session}" if session else LABEL
    containers = client.containers.list(all=True, filters={"label": label})
    for c in containers:
        c.remove(force=True, v=True)
    return len(containers)
