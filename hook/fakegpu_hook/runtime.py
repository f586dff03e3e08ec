"""`fakegpu-container-runtime`: an OCI runtime that wraps runc and acts only on `create`.

Every other command is handed to the low-level runtime untouched (exec, same argv). On `create`, a container
whose environment asks for fake GPUs gets the FakeGPU hook added to its config.json; any other container's
config.json is not rewritten at all. Only the standard library is imported before the exec.
"""

from __future__ import annotations

import os
import sys
import time

from fakegpu_hook.contract import FAULTS_VARIABLE, RUNC_OPTIONS_WITH_VALUE

_STARTED = time.monotonic()  # for inject.log: what `create` costs once Python is up

# Docker calls the runtime 4-6 times per container (create, start, state, kill, delete): every import here
# is paid on each, so the pass-through path touches os and sys only.

# runc's (and crun's) global options that take a value, written with one dash or two; anything else starting
# with '-' before the command is a flag. The sh front and the C fast path apply the same rule, from one table.
_GLOBAL_WITH_VALUE = {d + o for o in RUNC_OPTIONS_WITH_VALUE for d in ("-", "--")}


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


def _option(args: list[str], *names: str) -> str | None:
    """The value of the first of create's options named `names` ("--opt v" or "--opt=v"), else None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def find_bundle(args: list[str]) -> str:
    """--bundle/-b from create's own arguments, else the current directory, as runc does."""
    bundle = _option(args, "--bundle", "-b")
    return os.getcwd() if bundle is None else bundle


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


def find_container_id(args: list[str]) -> str:
    """create's last argument is the container id; '' when it cannot name a folder."""
    cid = args[-1] if args else ""
    if not cid or cid.startswith("-") or "/" in cid or cid in (".", ".."):
        return ""
    return cid


def _user_namespace(spec) -> bool:
    namespaces = (spec.data.get("linux") or {}).get("namespaces") or []
    return any(isinstance(ns, dict) and ns.get("type") == "user" for ns in namespaces)


class Prepared:
    """What a create that got devices leaves for after runc: the host's table and the driver, for
    /proc/driver/nvidia."""

    __slots__ = ("driver", "host_dir", "table")

    def __init__(self, host_dir: str, table: str, driver: str) -> None:
        self.host_dir, self.table, self.driver = host_dir, table, driver


def prepare_create(bundle: str, settings, container_id: str = "") -> Prepared | None:
    """Validate the request, write the device table, then either prepare the root and add the mounts and
    device nodes (injection "runtime") or add the hook (injection "hook"); raises with a message meant for
    the `docker run` user. Returns what the step after runc needs, when a table was written."""
    from fakegpu_hook.env import RequestError, device_request, env_lookup, requested_driver, resolve_request
    from fakegpu_hook.oci import Spec

    spec = Spec.load(os.path.join(bundle, "config.json"))
    # Validate here, before runc starts anything, so a bad request fails `docker run` with the parser's message.
    try:
        request = device_request(spec.env, settings.honour_nvidia_env, settings.inventory_spec())
        if request is None:
            return None
        from fakegpu.devices import DEFAULT_SEED

        # The hook runs with a minimal environment, so FAKEGPU_SEED from dockerd's environment is not used here.
        seed = request.seed if request.seed is not None else DEFAULT_SEED
        devices = resolve_request(request, seed)
        driver = requested_driver(spec.env, settings.driver_version)
    except RequestError as exc:
        raise RuntimeError_(str(exc)) from exc
    settings = settings.resolved()
    host_dir = ""
    if container_id:
        # The devices are resolved already: write the table now, for runc's mounts or for the hook.
        from fakegpu.devices.table import write_table
        from fakegpu_hook.contract import DEVICE_TABLE_NAME
        from fakegpu_hook.statedir import StateRootError, make_container_dir

        try:
            host_dir = make_container_dir(settings.state_root, container_id)
            write_table(os.path.join(host_dir, DEVICE_TABLE_NAME), devices, request.spec, seed, request.visible,
                        driver)
        except (OSError, StateRootError) as exc:
            cleanup_state(container_id, settings.state_root)  # a folder made half-way goes too
            raise RuntimeError_(f"cannot write the device table: {exc}" if host_dir else str(exc)) from exc
        plan = env_lookup(spec.env, FAULTS_VARIABLE)
        if plan:
            try:
                _put_fault_plan(plan, [d.uuid for d in devices], host_dir)
            except BaseException:
                cleanup_state(container_id, settings.state_root)
                raise
    try:
        # In a user namespace runc cannot mknod (it would bind the host's /dev/nvidia*, which do not exist):
        # the hook makes stand-ins there.
        if settings.injection == "runtime" and host_dir and not _user_namespace(spec):
            _inject_by_runtime(spec, bundle, settings, host_dir, [d.minor_number for d in devices],
                               request.capabilities, request.summary(len(devices), seed), driver)
        else:
            _add_hook(spec, settings, prepared=bool(host_dir))
        spec.flush()
    except BaseException:
        if host_dir:
            cleanup_state(container_id, settings.state_root)
        raise
    from fakegpu_hook.contract import DEVICE_TABLE_NAME

    return Prepared(host_dir, os.path.join(host_dir, DEVICE_TABLE_NAME), driver) if host_dir else None


# A plan is a few lines; this bounds what a root process parses from a container's environment.
MAX_FAULT_PLAN = 64 * 1024


def _add_own_site_packages() -> None:
    """The front starts Python without site (`-I -S`, fakegpu_hook/front.py): an editable install then has the
    checkout on sys.path but not its interpreter's site-packages, where the dependencies are. Appended, after the
    standard library and FakeGPU's own folders, and without their .pth files: the interpreter's own folders, as
    trusted as the interpreter."""
    import sysconfig

    for key in ("purelib", "platlib"):
        folder = sysconfig.get_paths()[key]
        if folder not in sys.path and os.path.isdir(folder):
            sys.path.append(folder)


def _put_fault_plan(text: str, uuids: list[str], host_dir: str) -> None:
    """FAKEGPU_FAULTS in a container: the plan's own text (YAML or JSON), never a path, as the runtime runs as
    root on the host and reads nothing for a container from elsewhere. Its faults go on the container's board
    (its /run/fakegpu), each GPU in the container's numbering and each `at` counted from now, so nothing has
    to run in the container to time them. A bad plan fails the create with the plan's message."""
    _add_own_site_packages()  # the plan's parser and schema check use PyYAML and jsonschema
    from fakegpu.errors import FakeGPUError
    from fakegpu.faults import board
    from fakegpu.faults.plan import is_plan_text, load_text, records
    from fakegpu_hook.statedir import shared_state_dir

    where = f"{FAULTS_VARIABLE} (the container's fault plan)"
    if len(text) > MAX_FAULT_PLAN:
        raise RuntimeError_(f"{where}: {len(text)} characters; a plan is at most {MAX_FAULT_PLAN}")
    if not is_plan_text(text):
        raise RuntimeError_(f"{where}: give the plan itself, e.g. {FAULTS_VARIABLE}='{{\"faults\": [{{\"xid\": 79, "
                            f"\"device\": 1, \"at\": \"20s\"}}]}}'; in a container it is not read from a file")
    try:
        found = records(load_text(text, FAULTS_VARIABLE), uuids, time.time_ns())
        board.append(shared_state_dir(host_dir), found)
    except FakeGPUError as exc:
        raise RuntimeError_(exc.message) from exc
    except (OSError, board.BoardFull, board.UnsafeBoard) as exc:
        raise RuntimeError_(f"cannot write the container's fault board: {exc}") from exc


def _inject_by_runtime(spec, bundle: str, settings, host_dir: str, minors: list[int], capabilities,
                       summary: str, driver: str) -> None:
    """Everything the hook would do, minus its process: the targets are made in the container root from here
    (the root is mounted at create, and no container process exists yet), and runc bind-mounts onto them and
    makes the device nodes from config.json. One Python process per container start instead of two."""
    from fakegpu.locations import COMPILED_CATALOG_TABLE
    from fakegpu_hook.contract import CONTAINER_DEVICE_TABLE, DEVICE_TABLE_NAME
    from fakegpu_hook.inject import check_covering_mounts, oci_devices, oci_mounts, plan_injection, prepare_targets
    from fakegpu_hook.modifiers import AddDevices, AddMounts, ModifierList, SetEnv
    from fakegpu_hook.rootfs import Root, RootfsError
    from fakegpu_hook.statedir import shared_state_dir, write_log

    # The log stays on the host (host_dir is root's alone): it names host paths no container should learn.
    lines = [summary]
    try:
        with Root(spec.root_path(bundle), cache_dirs=True) as root:
            plan = plan_injection(root, settings.native_lib_dir, settings.nvidia_smi,
                                  os.path.join(host_dir, DEVICE_TABLE_NAME), COMPILED_CATALOG_TABLE,
                                  shared_state_dir(host_dir), minors, capabilities, driver)
            check_covering_mounts(root, plan, spec.data.get("mounts"))
            prepare_targets(root, plan)
    except (OSError, RootfsError) as exc:
        raise RuntimeError_(f"cannot prepare the container root: {exc}") from exc
    lines += plan.notes
    lines.append(f"libraries go to {plan.lib_dir}")
    lines += [f"mount {src} -> {dest}" for src, dest in [*plan.dirs, *plan.files]]
    lines += [f"link {path} -> {target}" for path, target in plan.links]
    lines.append(f"device nodes: {len(plan.nodes)} under /dev (made by runc)")
    ModifierList([AddMounts(oci_mounts(plan)), AddDevices(oci_devices(plan)),
                  SetEnv("FAKEGPU_DEVICE_TABLE", CONTAINER_DEVICE_TABLE)]).modify(spec)
    lines.append(f"prepared in {(time.monotonic() - _STARTED) * 1000:.1f} ms after the runtime's imports began")
    stamp = time.strftime("%H:%M:%S")
    write_log(os.path.join(host_dir, "inject.log"), "".join(f"{stamp} {line}\n" for line in lines))



def _add_hook(spec, settings, prepared: bool) -> None:
    from fakegpu_hook.contract import CONTAINER_DEVICE_TABLE
    from fakegpu_hook.modifiers import AddHook, ModifierList, SetEnv

    args = ["--native-dir", settings.native_lib_dir, "--nvidia-smi", settings.nvidia_smi,
            "--state-root", settings.state_root, "--inventory", settings.inventory_spec()]
    if not settings.honour_nvidia_env:
        args.append("--ignore-nvidia-env")
    if settings.driver_version:
        args += ["--driver", settings.driver_version]
    if settings.hook_stage == "prestart":
        args.append("--join-mount-ns")
    if prepared:
        # The table is written: `--prepared` spares the hook a second resolution (it checks the table's spec
        # against the container's and redoes it on a mismatch).
        args.append("--prepared")
    ModifierList([
        AddHook(hook_path(settings.hook_path), args, stage=settings.hook_stage),
        SetEnv("FAKEGPU_DEVICE_TABLE", CONTAINER_DEVICE_TABLE),
    ]).modify(spec)


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
    from fakegpu_hook.contract import CONFIG_VARIABLE, DEFAULT_CONFIG, SETTINGS

    variable, default = SETTINGS["low_level_runtime"]
    if os.environ.get(variable):
        return os.environ[variable]
    if not os.path.exists(os.environ.get(CONFIG_VARIABLE) or DEFAULT_CONFIG):
        return default
    return None


def _low_level_path(low: str) -> str | None:
    if os.path.sep in low:
        return low if os.path.isfile(low) and os.access(low, os.X_OK) else None
    return _which(low)


def exec_low_level(argv: list[str], low: str) -> int:
    target = _low_level_path(low)
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
    prepared = None
    try:
        if command == "create":
            # Found before anything changes: a create that cannot exec runc must leave no state folder behind.
            if not _low_level_path(settings.low_level_runtime):
                raise RuntimeError_(f"low-level runtime {settings.low_level_runtime!r} not found (not on PATH, or "
                                    "not an executable file)")
            prepared = prepare_create(find_bundle(argv[index + 1:]), settings, find_container_id(argv[index + 1:]))
        elif command == "delete":
            cleanup_state(argv[-1] if len(argv) > index + 1 else "", settings.state_root)
    except Exception as exc:  # every failure must reach `docker run` as one readable line
        report_error(argv, str(exc))
        return 1
    if prepared is not None:
        procfs = procfs_binary(settings.resolved().native_lib_dir)
        if os.access(procfs, os.X_OK):
            return create_with_procfs(argv, index, settings, prepared, procfs)
    return exec_low_level(argv, settings.low_level_runtime)


def procfs_binary(native_lib_dir: str) -> str:
    """fakegpu-procfs of the native build whose libraries the container gets (<lib>/../bin)."""
    return os.path.join(os.path.dirname(native_lib_dir.rstrip("/")), "bin", "fakegpu-procfs")


def _spawn(path: str, argv: list[str], stderr_fd: int | None = None) -> int:
    """Run a program and wait: its exit status as the shell gives it. fork/exec, not subprocess: milliseconds
    of imports at every container start."""
    child = os.fork()
    if child == 0:
        try:
            if stderr_fd is not None:
                os.dup2(stderr_fd, 2)
            os.execv(path, argv)
        finally:
            os._exit(127)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def create_with_procfs(argv: list[str], index: int, settings, prepared: Prepared, procfs: str) -> int:
    """runc refuses OCI mounts under /proc, so /proc/driver/nvidia cannot be in config.json: runc creates the
    container (its init then waits for `start`; nothing of the image has run), and fakegpu-procfs mounts the
    tree into the container's mount namespace. Should that fail, the container is deleted again and the create
    fails, leaving nothing behind. Without a --pid-file (containerd always passes one) there is no process to
    name: the container starts without the tree, and inject.log says so."""
    low = settings.low_level_runtime
    code = _spawn(_low_level_path(low) or low, [low, *argv])
    if code != 0:
        return code  # runc has reported its own error
    args = argv[index + 1:]
    log = os.path.join(prepared.host_dir, "inject.log")
    pid_file = _option(args, "--pid-file")
    try:
        with open(pid_file or "", encoding="ascii") as f:
            pid = f.read(31).strip(" \t\n")
    except (OSError, ValueError):
        pid = ""
    if not (pid.isdigit() and 0 < int(pid) <= 0x7FFFFFFF):
        _note(log, "/proc/driver/nvidia: not mounted: runc was given no --pid-file that names the container")
        return 0
    read_end, write_end = os.pipe()
    try:
        code = _spawn(procfs, [procfs, "--pid", pid, "--table", prepared.table, "--driver", prepared.driver],
                      stderr_fd=write_end)
    finally:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as r:
            message = r.read(4096).decode("utf-8", "replace").strip()
    if code == 0:
        _note(log, "/proc/driver/nvidia: mounted over the container's /proc/driver (read-only tmpfs)")
        return 0
    container_id = find_container_id(args)
    _spawn(_low_level_path(low) or low, [low, *argv[:index], "delete", "--force", container_id])
    cleanup_state(container_id, settings.state_root)
    report_error(argv, f"cannot mount /proc/driver/nvidia into the container: "
                       f"{message.removeprefix('fakegpu-procfs: ') or f'fakegpu-procfs exited {code}'}")
    return 1


def _note(log: str, line: str) -> None:
    try:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")
    except OSError:
        pass  # the log is diagnostics only


if __name__ == "__main__":
    sys.exit(main())
