"""`fakegpu-hook`: the OCI hook (createContainer stage) that puts fake GPUs into a container root.

Runs as root at container start, in the container's mount namespace before pivot_root, so its bind mounts
belong to the container and vanish with it. It reads the OCI state from stdin, resolves devices from the
bundle's config.json, writes the device table under the state root on the host, and mounts the table, the
native shims, nvidia-smi and the state folder into the container; device nodes go into its /dev.
Errors: one line on stderr (runc shows it in `docker run`'s error), exit 1, nothing left mounted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

# The runtime already gives the hook an explicit environment; scrubbing again guards other callers (podman
# hooks.d, manual runs) against loader and interpreter variables from wherever they came.
_UNSAFE_ENV = ("LD_", "PYTHON", "GCONV_PATH", "LOCPATH")


def _scrub_environment() -> None:
    for key in list(os.environ):
        if key.startswith(_UNSAFE_ENV):
            del os.environ[key]


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fakegpu-hook", description=__doc__.splitlines()[0])
    p.add_argument("--native-dir", default="")
    p.add_argument("--nvidia-smi", default="")
    p.add_argument("--state-root", default="/run/fakegpu")
    p.add_argument("--nvidia-profile", default="a100")
    p.add_argument("--honour-nvidia-env", action="store_true")
    # Only a prestart hook runs in the host's mount namespace; a createContainer hook is already inside the
    # container's, where the state's pid is the container's own pid 1 and names nothing on the host's /proc.
    p.add_argument("--join-mount-ns", action="store_true")
    return p.parse_args(argv)


def _enter_mount_namespace(pid: int | None) -> None:
    """At the prestart stage (older runc, podman) the hook runs in the host's namespace: join the
    container's, so mounts land in the container and not on the host."""
    if not pid:
        return
    ours, theirs = os.stat("/proc/self/ns/mnt"), os.stat(f"/proc/{pid}/ns/mnt")
    if (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, 0x00020000) != 0:  # CLONE_NEWNS
            raise OSError(ctypes.get_errno(), f"cannot join the mount namespace of pid {pid}")
    finally:
        os.close(fd)


class HookLog:
    """Lines to <state dir>/hook.log, never to stdout: runc folds a failing hook's output into its error."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(f"{time.strftime('%H:%M:%S')} {line}")

    def save(self, path: Path) -> None:
        try:
            path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        except OSError:
            pass


def run(state_text: str, args: argparse.Namespace, log: HookLog) -> None:
    from fakegpu.devices import effective_seed, resolve_devices
    from fakegpu.devices.table import write_table
    from fakegpu.profiles.catalog import COMPILED_CATALOG
    from fakegpu_hook.env import device_request
    from fakegpu_hook.inject import Injection, plan_injection
    from fakegpu_hook.oci import Spec, read_state
    from fakegpu_hook.rootfs import Root
    from fakegpu_hook.settings import Settings

    state = read_state(state_text)
    bundle = Path(state["bundle"])
    spec = Spec.load(bundle / "config.json")
    request = device_request(spec.env, args.honour_nvidia_env, args.nvidia_profile)
    if request is None:
        log("the container asks for no devices; nothing to do")
        return
    seed = effective_seed(request.seed)
    devices = resolve_devices(request.spec, seed=seed)
    settings = Settings(native_lib_dir=args.native_dir, nvidia_smi=args.nvidia_smi).resolved()

    host_dir = Path(args.state_root) / state["id"]
    host_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(host_dir, 0o1777)  # processes of any user in the container record their state here
    table = host_dir / "devices.tbl"
    write_table(table, devices, request.spec, seed)
    log(f"{len(devices)} devices from {request.source}={request.spec!r} seed={seed!r}")

    if args.join_mount_ns:
        _enter_mount_namespace(state.get("pid"))
    with Root(str(spec.root_path(bundle))) as root:
        plan = plan_injection(root, settings.native_lib_dir, settings.nvidia_smi, str(table),
                              os.path.splitext(str(COMPILED_CATALOG))[0] + ".tbl", str(host_dir),
                              len(devices))
        for note in plan.notes:
            log(note)
        log(f"libraries go to {plan.lib_dir}")
        injection = Injection(root, log)
        try:
            injection.apply(plan)
        except BaseException:
            injection.undo()
            raise


def main(argv: list[str] | None = None) -> int:
    log = HookLog()
    # Recorded before scrubbing, so a test (or a user) can see what environment the hook was really given.
    log(f"hook environment: {', '.join(sorted(os.environ))}")
    _scrub_environment()
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    state_text = sys.stdin.read()
    container_dir: Path | None = None
    try:
        from fakegpu_hook.oci import read_state

        container_dir = Path(args.state_root) / read_state(state_text)["id"]
        run(state_text, args, log)
    except Exception as exc:
        from fakegpu.errors import FakeGPUError

        message = exc.message if isinstance(exc, FakeGPUError) else str(exc)
        print(f"fakegpu-hook: {message}", file=sys.stderr)
        if container_dir is not None:
            shutil.rmtree(container_dir, ignore_errors=True)
        return 1
    if container_dir is not None and container_dir.is_dir():
        log.save(container_dir / "hook.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
