"""`fakegpu-hook`: the OCI hook (createContainer stage) that puts fake GPUs into a container root.

Runs as root at container start, in the container's mount namespace before pivot_root, so its bind mounts
belong to the container and vanish with it. It reads the OCI state from stdin, resolves devices from the
bundle's config.json, writes the device table under the state root on the host, and mounts the table, the
native shims, nvidia-smi and the state folder into the container; device nodes go into its /dev.
Errors: one line on stderr (runc shows it in `docker run`'s error), exit 1, nothing left mounted.

`nvidia_main` is the same hook under NVIDIA's name (gpus.py installs it): dockerd runs it for `docker run
--gpus` at the prestart stage, in the host's mount namespace, with no options; it takes its settings from the
config file and joins the container's mount namespace itself.
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
# --poststop: the container is gone (the CDI spec's poststop hook); remove its host folder, nothing else.
_FLAG_OPTIONS = {"--honour-nvidia-env": ("honour_nvidia_env", True),
                 "--ignore-nvidia-env": ("honour_nvidia_env", False),
                 "--join-mount-ns": ("join_mount_ns", True), "--prepared": ("prepared", True),
                 "--poststop": ("poststop", True)}


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
        self.poststop = False
        # Run by dockerd as NVIDIA's hook (nvidia_main): a container our runtime prepared (its table is written)
        # is left to it; otherwise nothing of ours runs at `delete`, so the folder records its container's
        # process and each start sweeps the folders of containers gone.
        self.as_nvidia_hook = False
        # Set while the hook is in the container's mount namespace: our own, to go back to before cleaning up.
        self.host_mount_ns: int | None = None


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


def _outside_mount_namespace(pid: int | None) -> bool:
    """Whether the container's process `pid` has a mount namespace other than ours (a prestart hook)."""
    if not pid:
        return False
    ours, theirs = os.stat("/proc/self/ns/mnt"), os.stat(f"/proc/{pid}/ns/mnt")
    return (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino)


_CLONE_NEWNS = 0x00020000
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same on every architecture
_OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD = 1, 0x4, -100


def _setns(fd: int, what: str) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"cannot join {what}")


def _enter_mount_namespace(pid: int, carry: str) -> int:
    """At the prestart stage the hook runs in the host's mount namespace: join the container's, so mounts land
    in the container and not on the host. Returns a descriptor of our own namespace (the caller goes back
    with _leave_mount_namespace). `carry` (the state root) must be the host's folder in there too: the
    container's namespace was copied from the host's before the hook ran, so a tmpfs the hook has just
    mounted, or any mount on a host whose mounts do not propagate, is missing there; then a detached copy of
    the host's mount, made before joining, is attached at the same path (it goes with the namespace)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    host = os.stat(carry)
    tree = libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, carry.encode(), _OPEN_TREE_CLONE | os.O_CLOEXEC)
    tree_errno = ctypes.get_errno() if tree < 0 else 0
    try:
        ours = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd, f"the mount namespace of pid {pid}")
            finally:
                os.close(fd)
        except BaseException:
            os.close(ours)
            raise
        try:
            there = os.stat(carry)
            if (there.st_dev, there.st_ino) != (host.st_dev, host.st_ino):
                if tree < 0:
                    raise OSError(tree_errno, f"the state root {carry} is not the host's in the container's mount "
                                  "namespace and cannot be carried there (open_tree)")
                if libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, carry.encode(), _MOVE_MOUNT_F_EMPTY_PATH):
                    raise OSError(ctypes.get_errno(), f"cannot attach the state root {carry} in the container's "
                                  "mount namespace (move_mount)")
        except BaseException:
            _leave_mount_namespace(ours)
            raise
    finally:
        if tree >= 0:
            os.close(tree)
    return ours


def _leave_mount_namespace(ours: int) -> None:
    try:
        _setns(ours, "the hook's own mount namespace again")
    finally:
        os.close(ours)


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
    host_dir = os.path.join(args.state_root, state["id"])
    table = os.path.join(host_dir, DEVICE_TABLE_NAME)
    if args.as_nvidia_hook and os.path.exists(table):
        log("the fakegpu runtime prepared this container at create; nothing to do")
        return
    if args.as_nvidia_hook and not isinstance(state.get("pid"), int):
        # A prestart hook without the container's process would mount into the host's own namespace.
        raise ValueError("the OCI state on stdin has no container pid: nvidia-container-runtime-hook runs at "
                         "the prestart stage only, as dockerd adds it")
    spec = Spec.load(os.path.join(bundle, "config.json"))
    request = device_request(spec.env, args.honour_nvidia_env, inventory_spec(args.inventory, args.nvidia_profile))
    if request is None:
        log("the container asks for no devices; nothing to do")
        return
    settings = Settings(native_lib_dir=args.native_dir, nvidia_smi=args.nvidia_smi).resolved()
    driver = requested_driver(spec.env, args.driver)
    # Only outside the container's mount namespace may the hook mount the state root: inside, the tmpfs would
    # be the container's alone.
    outside = args.join_mount_ns and _outside_mount_namespace(state.get("pid"))

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
        make_container_dir(args.state_root, state["id"], may_mount=outside)
        if args.as_nvidia_hook:
            from fakegpu_hook.statedir import record_owner, sweep_exited

            record_owner(host_dir, state["pid"])
            for folder in sweep_exited(args.state_root, keep=state["id"]):
                log(f"removed {folder}: its container has stopped")
        write_table(table, devices, request.spec, seed, request.visible, driver)
        log(request.summary(len(minors), seed))

    if outside:
        args.host_mount_ns = _enter_mount_namespace(state["pid"], args.state_root)
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
    return _run_logged(sys.stdin.read(), args, log)


def poststop(state_text: str, args: HookArgs) -> int:
    """The container is gone: remove its host folder (table, log, shared state). On the CDI and hooks.d paths
    nothing else would: no runtime of ours runs `delete` there, and the pid a createContainer hook sees is not
    one the host can watch (under crun it reads as the host's pid 1). A failure is reported, never fatal to
    the container's removal, which has happened already."""
    from fakegpu_hook.oci import read_state
    from fakegpu_hook.statedir import remove_container_dir

    try:
        remove_container_dir(args.state_root, read_state(state_text, need_bundle=False)["id"])
    except Exception as exc:
        print(f"fakegpu-hook (poststop): {exc}", file=sys.stderr)
        return 1
    return 0


def _stopped(state_text: str) -> bool:
    """Whether the OCI state says the container has stopped: how a hooks.d file, which gives every stage the
    same arguments, reaches the poststop stage (runc and crun pass status "stopped" there; at createContainer
    it is "creating")."""
    import json

    try:
        state = json.loads(state_text)
    except ValueError:
        return False
    return isinstance(state, dict) and state.get("status") == "stopped"


def _run_logged(state_text: str, args: HookArgs, log: HookLog) -> int:
    if args.poststop or _stopped(state_text):
        return poststop(state_text, args)
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
        try:
            _back_home(args)
        except OSError as back:  # the host folder cannot be reached from here: say so rather than guess
            print(f"fakegpu-hook: {back}; {container_dir} is left on the host", file=sys.stderr)
            return 1
        if container_dir is not None:
            shutil.rmtree(container_dir, ignore_errors=True)
        return 1
    try:
        _back_home(args)
    except OSError as exc:
        print(f"fakegpu-hook: {exc}", file=sys.stderr)
        return 1
    if container_dir is not None and os.path.isdir(container_dir):
        log.save(os.path.join(container_dir, "hook.log"))
    return 0


def _back_home(args: HookArgs) -> None:
    """Back to the hook's own mount namespace, where the host folder is the host's."""
    if args.host_mount_ns is not None:
        ours, args.host_mount_ns = args.host_mount_ns, None
        _leave_mount_namespace(ours)


# NVIDIA's hook does nothing at these stages either; dockerd adds only prestart.
_NVIDIA_NOOP_STAGES = ("poststart", "poststop")


def nvidia_args() -> HookArgs:
    """The hook's options for a call by dockerd, which passes none: the settings (config file, FAKEGPU_*
    variables in dockerd's environment, which the hook inherits). NVIDIA's variables are always read: they
    are how dockerd asks."""
    from fakegpu_hook.settings import load_settings

    settings = load_settings()
    args = HookArgs()
    args.native_dir, args.nvidia_smi = settings.native_lib_dir, settings.nvidia_smi
    args.state_root, args.inventory = settings.state_root, settings.inventory
    args.nvidia_profile = settings.nvidia_profile
    args.honour_nvidia_env = args.join_mount_ns = args.as_nvidia_hook = True
    return args


def nvidia_main(argv: list[str] | None = None) -> int:
    """`nvidia-container-runtime-hook prestart`, as dockerd runs it for `docker run --gpus`: the OCI state on
    stdin, NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES in the bundle's config.json (dockerd appends
    them, so the last occurrence wins), injected as fakegpu-hook does."""
    log = HookLog()
    log(f"hook environment: {', '.join(sorted(os.environ))}")
    _scrub_environment()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0] in _NVIDIA_NOOP_STAGES:
        return 0
    if argv != ["prestart"]:
        from fakegpu.errors import shorten

        print(f"fakegpu-hook (as nvidia-container-runtime-hook): expected the one argument 'prestart', as dockerd "
              f"passes it; got {shorten(' '.join(argv)) if argv else 'none'}", file=sys.stderr)
        return 2
    try:
        args = nvidia_args()
    except Exception as exc:  # SettingsError: an unreadable config file fails every --gpus start, saying why
        print(f"fakegpu-hook: {exc}", file=sys.stderr)
        return 1
    return _run_logged(sys.stdin.read(), args, log)


if __name__ == "__main__":
    sys.exit(main())
