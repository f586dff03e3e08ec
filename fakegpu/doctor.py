"""Health checks behind `fakegpu doctor`: is this machine ready to fake GPUs, and if not, what fixes it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from fakegpu import locations
from fakegpu.errors import FakeGPUError

PASS, WARN, FAIL = "pass", "warn", "fail"
REPO_ROOT = Path(locations.CHECKOUT)
RUNTIME_NAME = "fakegpu"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def check_catalog() -> CheckResult:
    from fakegpu.profiles import load_catalog

    try:
        catalog = load_catalog()
    except FakeGPUError as exc:
        return CheckResult("catalog", FAIL, exc.message, "reinstall fakegpu, or run `make catalog` in a checkout")
    if (REPO_ROOT / "profiles" / "schema.json").exists():  # a source checkout: the sources must compile to it
        from fakegpu.profiles.compile import compile_catalog, stale_outputs

        try:
            stale = stale_outputs(compile_catalog())
        except FakeGPUError as exc:
            return CheckResult("catalog", FAIL, exc.message.splitlines()[0], "fix the profiles named by `make catalog`")
        if stale:
            return CheckResult("catalog", FAIL, "compiled catalog is older than profiles/", "run `make catalog`")
    return CheckResult("catalog", PASS, f"{len(catalog)} profiles, schema and invariants hold")


def check_native() -> CheckResult:
    lib = Path(locations.native_lib_dir()) / "libnvidia-ml.so.1"
    if lib.exists():
        return CheckResult("native", PASS, f"shims built in {lib.parent}")
    return CheckResult("native", WARN, f"no native shims at {lib.parent}", "run `make` (needs a C compiler)")


def _docker_client():
    import docker  # imported here: `import fakegpu` must stay light

    return docker.from_env(timeout=5)


def check_docker() -> CheckResult:
    try:
        client = _docker_client()
        version = client.version().get("Version", "?")
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        return CheckResult("docker", FAIL, f"Docker Engine not reachable: {exc}".splitlines()[0],
                           "start the daemon (systemctl start docker) or set DOCKER_HOST")
    return CheckResult("docker", PASS, f"Docker Engine {version} reachable")


def check_runtime() -> CheckResult:
    try:
        runtimes = _docker_client().info().get("Runtimes", {})
    except Exception:
        return CheckResult("runtime", WARN, "cannot ask the engine for its runtimes", "see the docker check")
    if RUNTIME_NAME in runtimes:
        return CheckResult("runtime", PASS, f"runtime {RUNTIME_NAME!r} registered with the engine")
    return CheckResult("runtime", WARN, f"runtime {RUNTIME_NAME!r} not registered", "run `fakegpu runtime install`")


def check_torch() -> CheckResult:
    if importlib.util.find_spec("torch") is None:
        return CheckResult("torch", WARN, "torch is not installed (needed for fakecuda only)",
                           "pip install 'fakegpu[torch]'")
    return CheckResult("torch", PASS, f"torch {importlib.metadata.version('torch')} importable")


CHECKS: tuple[Callable[[], CheckResult], ...] = (check_catalog, check_native, check_docker, check_runtime, check_torch)


def run_checks() -> list[CheckResult]:
    return [check() for check in CHECKS]
