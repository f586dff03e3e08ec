"""`fakegpu-container-runtime`: an OCI runtime that wraps runc and acts only on `create`.

Every other command is handed to the low-level runtime untouched (exec, same argv). On `create`, a container
whose environment asks for fake GPUs gets the FakeGPU hook added to its config.json; any other container's
config.json is not rewritten at all. Only the standard library is imported before the exec.
"""

from __future__ import annotations

import os
import sys

# Docker calls the runtime 4-6 times per container (create, start, state, kill, delete): every import here
# is paid on each, so the pass-through path touches os and sys only.

# runc's global options that take a value; anything else starting with '-' before the command is a flag.
_GLOBAL_WITH_VALUE = {"--root", "--log", "--log-format", "--criu", "--rootless"}


class RuntimeError_(Exception):
    pass


def find_command(argv: list[str]) -> tuple[int, str | None]:
    """(index, name) of the runc subcommand in argv (argv[0] excluded), skipping global options."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return (i + 1, argv[i + 1]) if i + 1 < len(argv) else (-1, None)
        if arg.startswith("-"):
            if "=" not in arg and arg in _GLOBAL_WITH_VALUE:
                i += 1
            i += 1
            continue
        return i, arg
    return -1, None


def find_bundle(args: list[str]) -> str:
    """--bundle/-b from create's own arguments, else the current directory, as runc does."""
    for i, arg in enumerate(args):
        for opt in ("--bundle", "-b"):
            if arg == opt and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(opt + "="):
                return arg[len(opt) + 1:]
    return os.getcwd()


def _log_path(argv: list[str]) -> tuple[str | None, str]:
    path, fmt = None, "text"
    for i, arg in enumerate(argv):
        for opt in ("--log", "--log-format"):
            value = None
            if arg == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(opt + "="):
                value = arg[len(opt) + 1:]
            if value is not None:
                if opt == "--log":
                    path = value
                else:
                    fmt = value
    return path, fmt


def report_error(argv: list[str], message: str) -> None:
    """To stderr and, like runc, to the --log file: containerd shows the last JSON error line it finds there."""
    print(f"fakegpu-container-runtime: {message}", file=sys.stderr)
    path, fmt = _log_path(argv)
    if not path:
        return
    import json
    import time

    try:
        with open(path, "a", encoding="utf-8") as f:
            if fmt == "json":
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                f.write(json.dumps({"level": "error", "msg": f"fakegpu: {message}", "time": stamp}) + "\n")
            else:
                f.write(f"fakegpu: {message}\n")
    except OSError:
        pass


def hook_path(configured: str) -> str:
    if configured:
        return configured
    sibling = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "fakegpu-hook")
    if os.access(sibling, os.X_OK):
        return sibling
    found = _which("fakegpu-hook")
    if not found:
        raise RuntimeError_("cannot find fakegpu-hook beside the runtime or on PATH; set hook_path in the config")
    return found


def prepare_create(bundle: str, settings) -> None:
    """Validate the request and add the hook; raises with a message meant for the `docker run` user."""
    from fakegpu_hook.env import device_request
    from fakegpu_hook.modifiers import AddHook, ModifierList, SetEnv
    from fakegpu_hook.oci import Spec
    from fakegpu_hook.settings import CONTAINER_DEVICE_TABLE

    spec = Spec.load(os.path.join(bundle, "config.json"))
    request = device_request(spec.env, settings.honour_nvidia_env, settings.nvidia_profile)
    if request is None:
        return
    # Validate here, before runc starts anything, so a bad spec fails `docker run` with the parser's message.
    from fakegpu.devices import resolve_devices
    from fakegpu.errors import FakeGPUError

    try:
        resolve_devices(request.spec, seed=request.seed)
    except FakeGPUError as exc:
        message = exc.message
        part = getattr(exc, "part", None)
        if len(message) > 600 and part is not None:
            # containerd cuts long errors in the middle; keep the bad part and the reason in what survives.
            reason = getattr(exc, "reason", "")
            message = (f"invalid device spec ({len(request.spec)} characters): part {part[:80]!r}"
                       f"{'...' if len(part) > 80 else ''}: {reason}")
        raise RuntimeError_(f"{request.source}: {message}") from exc
    settings = settings.resolved()
    args = ["--native-dir", settings.native_lib_dir, "--nvidia-smi", settings.nvidia_smi,
            "--state-root", settings.state_root, "--nvidia-profile", settings.nvidia_profile]
    if settings.honour_nvidia_env:
        args.append("--honour-nvidia-env")
    if settings.hook_stage == "prestart":
        args.append("--join-mount-ns")
    ModifierList([
        AddHook(hook_path(settings.hook_path), args, stage=settings.hook_stage),
        SetEnv("FAKEGPU_DEVICE_TABLE", CONTAINER_DEVICE_TABLE),
    ]).modify(spec)
    spec.flush()


def cleanup_state(container_id: str, state_root: str) -> None:
    """On `delete`, drop the per-container folder the hook made; nothing else holds it once the container goes."""
    if container_id and "/" not in container_id and container_id not in (".", ".."):
        folder = os.path.join(state_root, container_id)
        if os.path.isdir(folder):
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def _which(name: str) -> str | None:
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _fast_low_level_runtime() -> str | None:
    """The low-level runtime without loading settings, when no config file can change it."""
    if os.environ.get("FAKEGPU_LOW_LEVEL_RUNTIME"):
        return os.environ["FAKEGPU_LOW_LEVEL_RUNTIME"]
    if not os.path.exists(os.environ.get("FAKEGPU_CONFIG") or "/etc/fakegpu/config.json"):
        return "runc"
    return None


def exec_low_level(argv: list[str], low: str) -> int:
    target = low if os.path.sep in low else _which(low)
    if not target:
        report_error(argv, f"low-level runtime {low!r} not found on PATH")
        return 127
    try:
        os.execv(target, [low, *argv])
    except OSError as exc:
        report_error(argv, f"cannot exec {target}: {exc.strerror}")
        return 126
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    index, command = find_command(argv)
    if command not in ("create", "delete"):
        low = _fast_low_level_runtime()
        if low is not None:
            return exec_low_level(argv, low)
    from fakegpu_hook.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as exc:
        report_error(argv, str(exc))
        return 1
    try:
        if command == "create":
            prepare_create(find_bundle(argv[index + 1:]), settings)
        elif command == "delete":
            cleanup_state(argv[-1] if len(argv) > index + 1 else "", settings.state_root)
    except Exception as exc:  # every failure must reach `docker run` as one readable line
        report_error(argv, str(exc))
        return 1
    return exec_low_level(argv, settings.low_level_runtime)


if __name__ == "__main__":
    sys.exit(main())
