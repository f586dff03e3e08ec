"""Container cases (mode `container`): the command runs in a container of the case's image, made through the
Docker SDK with `--runtime=fakegpu` and FAKEGPU_DEVICES set to the case's device spec, so the runtime gives it
the fake GPUs (any image: the runtime mounts the shims and nvidia-smi, as `docker run --runtime=fakegpu` does).

The case's cwd and its case folder are mounted at their own paths (the cwd is the container's working folder),
so a script beside the manifest runs as `python3 script.py` and a file the command writes is there for the
JSON checks. At its timeout (or when the run is interrupted) the container is stopped, SIGTERM then SIGKILL,
which ends every process in it; every container carries LABEL=<this run's id> and is removed when its case
ends, and `cleanup` removes any left by a run cut short (Ctrl-C, a cancelled CI job), as
fakegpu.testing does with its own label.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fakegpu.errors import FakeGPUError
from fakegpu.validate.matrix import Case

LABEL = "fakegpu.validate"
RUNTIME = "fakegpu"
# One id per process: every container a run made carries it, so `cleanup` takes exactly those.
SESSION = uuid.uuid4().hex[:12]


class ContainerCaseError(FakeGPUError):
    """A container case cannot start: no engine, no image, the runtime not registered."""


def _client() -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except DockerException as exc:
        raise ContainerCaseError(f"Docker Engine not reachable: {exc}".splitlines()[0]) from None


def run(case: Case, stop: threading.Event | None, out_log: Path, err_log: Path,
        grace_s: float) -> tuple[int, bool, str]:
    """Run a container case to its end or its timeout: (exit status, timed out, what was done to end it)."""
    from docker.errors import APIError, ImageNotFound

    client = _client()
    mounts = {str(case.cwd): {"bind": str(case.cwd), "mode": "rw"},
              str(case.case_dir): {"bind": str(case.case_dir), "mode": "rw"}}
    try:
        container = client.containers.create(
            case.image, case.command, runtime=RUNTIME, environment={**case.env, "FAKEGPU_DEVICES": case.devices},
            labels={LABEL: SESSION, f"{LABEL}.case": case.id}, volumes=mounts, working_dir=str(case.cwd),
            detach=True)
    except ImageNotFound:
        raise ContainerCaseError(f"image {case.image!r} is not on this Docker Engine; pull or build it first "
                                 "(FakeGPU's own: images/build.sh)") from None
    except APIError as exc:
        raise ContainerCaseError(_api_problem(case, exc)) from None
    try:
        try:
            container.start()
        except APIError as exc:
            raise ContainerCaseError(_api_problem(case, exc)) from None
        status, timed_out = _wait(container, case.timeout_s, stop)
        ended = ""
        if timed_out:
            container.stop(timeout=int(max(1, grace_s)))
            status = _wait(container, 30.0, None)[0]
            ended = f"stopped its container {container.short_id} (SIGTERM, SIGKILL after {grace_s:g} s: every " \
                    "process in it)"
        out_log.write_bytes(container.logs(stdout=True, stderr=False))
        err_log.write_bytes(container.logs(stdout=False, stderr=True))
        return (137 if status is None else status), timed_out, ended
    finally:
        _remove(container)


def _api_problem(case: Case, exc: Any) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    if "runtime" in text.lower():
        return (f"cannot run {case.image!r} with --runtime={RUNTIME}: {text}; register it with "
                "`sudo fakegpu runtime install`")
    return f"cannot run a container of {case.image!r}: {text}"


def _wait(container: Any, limit: float, stop: threading.Event | None) -> tuple[int | None, bool]:
    """(exit status, False) once the container exits, or (None, True) at `limit` or when `stop` is set."""
    import requests

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        try:
            return int(container.wait(timeout=min(1.0, max(0.1, deadline - time.monotonic())))["StatusCode"]), False
        except requests.exceptions.RequestException:  # still running when the wait's timeout ended
            continue
    return None, True


def _remove(container: Any) -> None:
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True, v=True)
    except (APIError, NotFound):
        pass


def cleanup(session: str = SESSION) -> int:
    """Remove every container this run made (label LABEL=session) that is still there; how many."""
    import docker
    from docker.errors import APIError, DockerException, NotFound

    try:
        client = docker.from_env(timeout=30)
        left = client.containers.list(all=True, filters={"label": f"{LABEL}={session}"})
    except DockerException:
        return 0
    for container in left:
        try:
            container.remove(force=True, v=True)
        except (APIError, NotFound):
            pass
    return len(left)
