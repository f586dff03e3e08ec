"""`fakegpu-hook`: the OCI hook (createContainer stage) that puts fake GPUs into a container root.

Runs as root at container start, in the container's mount namespace before pivot_root, so its bind mounts
belong to the container and vanish with it. It reads the OCI state from stdin, resolves devices from the
bundle's config.json, writes the device table under the state root on the host, and mounts the table, the
native shims, nvidia-smi and the state folder into the container; device nodes go into its /dev.
Errors: one line on stderr (runc shows it in `docker run`'s error), exit 1, nothing left mounted.
"""

from __future__ import annotations

import os
import sys
import time

# No argparse, pathlib or shutil on the way in: each costs milliseconds, paid at every container start.

# The runtime already gives the hook an explicit environment; scrubbing again guards other callers (podman
# hooks.d, manual runs) against loader and interpreter variables from wherever they came.
_UNSAFE_ENV = ("LD_", "PYTHON", "GCONV_PATH", "LOCPATH")


def _scrub_environment() -> None:
    for key in list(os.environ):
        if key.startswith(_UNSAFE_ENV):
            del os.environ[key]


# The hook's options: the runtime (or a hooks.d/CDI file) writes them, so the set is small and fixed.
_VALUE_OPTIONS = {"--native-dir": "native_dir", "--nvidia-smi": "nvidia_smi", "--state-root": "state_root",
                  "--inventory": "inventory", "--nvidia-profile": "nvidia_profile", "--driver": "driver"}
# Only a prestart hook runs in the host's mount namespace; a createContainer hook is already inside the
# container's, where the state's pid is the container's own pid 1 and names nothing on the host's /proc.
# --prepared: the runtime has resolved the devices and written <state root>/<id>/devices.tbl.
# --honour-nvidia-env is the default now; hook files written before still pass it.
_FLAG_OPTIONS = {"--honour-nvidia-env": ("honour_nvidia_env", True),
                 "--ignore-nvidia-env": ("honour_nvidia_env", False),
                 "--join-mount-ns": ("join_mount_ns", True), "--prepared": ("prepared", True)}


class HookArgs:
    def __init__(self) -> None:
        from fakegpu_hook.settings import DEFAULTS

        self.native_dir = ""
        self.nvidia_smi = ""
        self.state_root = DEFAULTS["state_root"]
        self.inventory = DEFAULTS["inventory"]
        self.nvidia_profile = DEFAULTS["nvidia_profile"]
        self.driver = DEFAULTS["driver_version"]  # the host's setting; empty: the default
        self.honour_nvidia_env = DEFAULTS["honour_nvidia_env"]
        self.join_mount_ns = False
        self.prepared = False


class UsageError_(Exception):
    pass


def _parse_args(argv: list[str]) -> HookArgs:
    args = HookArgs()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in _VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError_(f"option {name} needs a value")
                i += 1
                value = argv[i]
            setattr(args, _VALUE_OPTIONS[name], value)
        elif arg in _FLAG_OPTIONS:
            setattr(args, *_FLAG_OPTIONS[arg])
        else:
            options = ", ".join([*_VALUE_OPTIONS, *_FLAG_OPTIONS])
            raise UsageError_(f"unknown argument {arg!r} (options: {options}; the OCI state comes on stdin)")
        i += 1
    return args


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

    def save(self, path: str) -> None:
        from fakegpu_hook.statedir import write_log

        write_log(path, "\n".join(self.lines) + "\n")


def _fields(line: str) -> dict[str, str]:
    return dict(p.partition("=")[::2] for p in line.rstrip("\n").split("\t")[1:])


def prepared_table(path: str, spec: str, seed: str | None, visible: tuple[str, ...] | None = None,
                   driver: str | None = None) -> tuple[list[int], str] | None:
    """(the devices' minor numbers, seed) of a table the runtime wrote for this very request, else None."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if not line.startswith("#")]
        if not lines or not lines[0].startswith("fakegpu-device-table\t"):
            return None
        fields = _fields(lines[0])
        if fields.get("spec") != spec or (seed is not None and fields.get("seed") != seed):
            return None
        if fields.get("visible") != (None if visible is None else ",".join(visible)):
            return None
        if driver is not None:
            from fakegpu.driver import default_driver_version

            if fields.get("driver", default_driver_version()) != driver:  # a table without one: the default's
                return None
        minors = [int(_fields(line)["minor_number"]) for line in lines[1:] if line.startswith("device\t")]
        if len(minors) != int(fields["count"]):
            return None
        return minors, fields.get("seed", "")
    except (OSError, KeyError, ValueError):
        return None


def run(state_text: str, args: HookArgs, log: HookLog) -> None:
    from fakegpu.locations import COMPILED_CATALOG_TABLE
    from fakegpu_hook.contract import DEVICE_TABLE_NAME
    from fakegpu_hook.env import device_request, requested_driver, resolve_request
    from fakegpu_hook.inject import Injection, plan_injection
    from fakegpu_hook.oci import Spec, read_state
    from fakegpu_hook.rootfs import Root
    from fakegpu_hook.settings import Settings, inventory_spec
    from fakegpu_hook.statedir import make_container_dir, shared_state_dir

    state = read_state(state_text)
    bundle = state["bundle"]
    spec = Spec.load(os.path.join(bundle, "config.json"))
    request = device_request(spec.env, args.honour_nvidia_env, inventory_spec(args.inventory, args.nvidia_profile))
    if request is None:
        log("the container asks for no devices; nothing to do")
        return
    settings = Settings(native_lib_dir=args.native_dir, nvidia_smi=args.nvidia_smi).resolved()
    driver = requested_driver(spec.env, args.driver)

    host_dir = os.path.join(args.state_root, state["id"])
    table = os.path.join(host_dir, DEVICE_TABLE_NAME)
    prepared = (prepared_table(table, request.spec, request.seed, request.visible, driver) if args.prepared
                else None)
    if prepared is not None:
        minors, seed = prepared
        log(f"{request.summary(len(minors), seed)} (table by the runtime)")
    else:
        from fakegpu.devices import effective_seed
        from fakegpu.devices.table import write_table

        seed = effective_seed(request.seed)
        devices = resolve_request(request, seed)
        minors = [d.minor_number for d in devices]
        make_container_dir(args.state_root, state["id"], may_mount=False)
        write_table(table, devices, request.spec, seed, request.visible, driver)
        log(request.summary(len(minors), seed))

    if args.join_mount_ns:
        _enter_mount_namespace(state.get("pid"))
    with Root(spec.root_path(bundle)) as root:
        plan = plan_injection(root, settings.native_lib_dir, settings.nvidia_smi, table, COMPILED_CATALOG_TABLE,
                              shared_state_dir(host_dir), minors, request.capabilities, driver)
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
    try:
        args = _parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError_ as exc:
        print(f"fakegpu-hook: {exc}", file=sys.stderr)
        return 2
    state_text = sys.stdin.read()
    container_dir: str | None = None
    try:
        from fakegpu_hook.oci import read_state

        container_dir = os.path.join(args.state_root, read_state(state_text)["id"])
        run(state_text, args, log)
    except Exception as exc:
        import shutil

        from fakegpu.errors import FakeGPUError

        message = exc.message if isinstance(exc, FakeGPUError) else str(exc)
        print(f"fakegpu-hook: {message}", file=sys.stderr)
        if container_dir is not None:
            shutil.rmtree(container_dir, ignore_errors=True)
        return 1
    if container_dir is not None and os.path.isdir(container_dir):
        log.save(os.path.join(container_dir, "hook.log"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
