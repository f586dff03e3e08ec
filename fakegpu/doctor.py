"""Health checks behind `fakegpu doctor`: is this machine ready to fake GPUs, and if not, what fixes it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
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


def check_program(program: str, image: str | None = None) -> CheckResult:
    """Can FakeGPU serve this program: does it (or a library it loads from its own folders) carry a static CUDA
    runtime, which talks to the driver through interfaces FakeGPU does not implement? With `image`, the program
    is the image's (taken out of a created, never started container; its libraries are not followed)."""
    import shutil
    import tempfile

    from fakegpu.analyze.linkage import FIX, static_cuda_runtime
    from fakegpu.errors import shorten

    name = f"program {shorten(program)}" + (f" in {shorten(image)}" if image else "")
    with tempfile.TemporaryDirectory(prefix="fakegpu-doctor-") as tmp:
        if image:
            try:
                path, where = _program_from_image(image, program, Path(tmp))
            except FakeGPUError as exc:
                return CheckResult("program", FAIL, f"{name}: {exc.message}", "name a program the image has")
        else:
            where = shutil.which(program) or ""
            path = Path(where) if where else None
            if path is None:
                given = Path(program)
                why = ("a folder, not a program" if given.is_dir() else "not executable" if given.exists() else
                       "not found (not a file, not on PATH)")
                return CheckResult("program", FAIL, f"{name}: {why}", "name the program's path")
        found = static_cuda_runtime(path, {} if image else None)
    if found is not None:
        if image:  # the copy's path stands for the image's
            found = replace(found, path=Path(where))
        return CheckResult("program", FAIL, found.problem(where), FIX)
    scope = "" if image else " or the libraries it loads from its own folders"
    return CheckResult("program", PASS, f"{name}: no static CUDA runtime in it{scope}")


def _program_from_image(image: str, program: str, dest: Path) -> tuple[Path, str]:
    """(a copy in dest, the image's path) of the image's file at `program` (absolute, or found on the image's
    PATH), links followed inside the image. The container is created, never started, and removed again."""
    import posixpath
    import shutil
    import tarfile

    import docker.errors

    from fakegpu.errors import shorten

    try:
        client = _docker_client()
        config = client.images.get(image).attrs.get("Config") or {}
    except docker.errors.ImageNotFound as exc:
        raise FakeGPUError("no such image here (docker pull it first)") from exc
    except docker.errors.DockerException as exc:  # a malformed name, or no engine
        raise FakeGPUError(shorten(str(getattr(exc, "explanation", None) or exc), 200)) from exc
    env = dict(e.partition("=")[::2] for e in config.get("Env") or [])
    candidates = [program] if program.startswith("/") else [
        posixpath.join(d, program) for d in (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":") if d]
    container = client.containers.create(image, command=["true"], entrypoint=[], network_disabled=True)
    try:
        for found in candidates:
            path = found
            for _ in range(40):  # as the kernel, 40 links at most
                try:
                    stream, stat = container.get_archive(path)
                except docker.errors.NotFound:
                    break
                target = stat.get("linkTarget") or ""
                if target and target != path:
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                    continue
                archive = dest / "program.tar"
                with archive.open("wb") as f:
                    for chunk in stream:
                        f.write(chunk)
                with tarfile.open(archive) as tar:
                    member = next((m for m in tar.getmembers() if m.isfile()), None)
                    if member is None:
                        raise FakeGPUError(f"{shorten(path)} in the image is not a file")
                    src = tar.extractfile(member)
                    out = dest / "program"
                    with out.open("wb") as f:
                        shutil.copyfileobj(src, f, 1 << 20)
                return out, found
        raise FakeGPUError(f"not found in the image ({shorten(', '.join(candidates[:4]), 200)}"
                           f"{', ...' if len(candidates) > 4 else ''})")
    finally:
        container.remove(force=True)


CHECKS: tuple[Callable[[], CheckResult], ...] = (check_catalog, check_native, check_docker, check_runtime, check_torch)


def run_checks() -> list[CheckResult]:
    return [check() for check in CHECKS]
