"""`fakegpu run`: start any command with fake GPUs, in native or fakecuda mode.

Both modes resolve the devices with THE parser (fakegpu.devices), write the device table into a private state
folder and point FAKEGPU_DEVICE_TABLE / FAKEGPU_STATE_DIR / FAKEGPU_DEVICES at it, so NVML, nvidia-smi and the
CUDA libraries of the child agree on one set of devices and one shared process state.

native: the child's CUDA libraries are FakeGPU's (native/build/lib). CUDA-built PyTorch finds NVIDIA's libraries
through DT_RPATH ($ORIGIN/../../nvidia/...), which the loader searches *before* LD_LIBRARY_PATH, so the library
path alone cannot win: ours are put in LD_PRELOAD. A preloaded object carries its SONAME, so every later
DT_NEEDED or dlopen of "libcudart.so.13" binds to it. Both the CUDA 13 and the CUDA 12 set are preloaded (see
NATIVE_LIBS), so a torch of either kind finds its own. Python's torch additionally preloads the nvidia wheels by
absolute path (torch/__init__.py, _preload_cuda_deps, searching sys.path for nvidia/<pkg>/lib/); a folder first
on PYTHONPATH that mirrors that layout with links to our libraries makes those loads resolve to ours too, so no
NVIDIA library is mapped at all.

fakecuda: FAKEGPU_RUNTIME=fakecuda and an interpreter-start hook (sitecustomize.py importing
fakegpu.fakecuda.envhook, chaining to any sitecustomize already on the path), made by `python_hook_dir()`.

native mode's device reads: kernels do not run, so a host read of memory a kernel would have written returns
values no GPU gives; libcuda tells such reads from reads of host-known data and applies
FAKEGPU_ON_DEVICE_READ=warn|error|ignore (`--on-device-read`; error exits with EXIT_DEVICE_READ).

As root, the command starts under native/build/bin/fakegpu-procfs, which mounts the devices' /proc/driver/nvidia
(version, params, gpus/<bus>/information) over /proc/driver in a private mount namespace of the command's own
and execs it; not root, or where that cannot be done, the command runs as before.

--timeout: the command runs in a process group of its own (as coreutils' timeout runs it); past the limit the
group and every descendant get SIGTERM, then SIGKILL after a grace period, and RunTimedOut names the program's
last CUDA activity, which libcuda keeps in a page shared with <run folder>/activity/<pid>.activity
(native/cuda/driver/activity.c).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.devices import DEFAULT_DEVICES, effective_seed, resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.driver import default_driver_version, driver_version_problem, is_driver_version
from fakegpu.errors import EXIT_TIMEOUT, EXIT_USAGE, FakeGPUError, shorten
from fakegpu.faults import board as fault_board
from fakegpu.faults import plan as fault_plan
from fakegpu.faults import replay
from fakegpu.faults.plan import Fault
from fakegpu.profiles.matching import did_you_mean

MODES = ("native", "fakecuda")
# native mode's device memory: "full" keeps the bytes written to the device; "accounting" reserves address
# space and counts, but drops writes (device memory reads as zeros), so loading a model costs no host RAM.
MEMORY_MODES = ("full", "accounting")
# native mode, a host read of device memory a kernel may have written (its values are not a GPU's): print one
# warning at the first (default), stop the program (exit status EXIT_DEVICE_READ), or only count it in the report.
DEVICE_READ_POLICIES = ("warn", "error", "ignore")
# --timeout: how long the command gets after SIGTERM before SIGKILL.
TIMEOUT_GRACE_S = 2.0

# Our libraries, in the order they are preloaded (a library before the ones that link it), and where the
# nvidia-* wheels put the real ones (torch's preloader layout: nvidia/<folder>/lib/<file>; CUDA 13 wheels share
# nvidia/cu13/lib, CUDA 12 wheels have a folder each). Both CUDA majors' sets are preloaded: their sonames and
# symbol version nodes differ (libcudart.so.12 vs .13), so a program binds to the set it was linked against
# and the other stays unused; libraries whose soname is the same in both majors are one build serving both.
NATIVE_LIBS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("libcuda.so.1", ("cu13",)),
    ("libcudart.so.13", ("cu13",)),
    ("libcublasLt.so.13", ("cu13",)),
    ("libcublas.so.13", ("cu13",)),
    ("libcudart.so.12", ("cuda_runtime",)),
    ("libcublasLt.so.12", ("cublas",)),
    ("libcublas.so.12", ("cublas",)),
    ("libnccl.so.2", ("nccl",)),
    ("libcudnn.so.9", ("cudnn",)),
    ("libcusparse.so.12", ("cu13", "cusparse")),
    ("libcusolver.so.12", ("cu13",)),
    ("libcusolver.so.11", ("cusolver",)),
    ("libcufft.so.12", ("cu13",)),
    ("libcufft.so.11", ("cufft",)),
    ("libcufile.so.0", ("cu13", "cufile")),
    ("libcusparseLt.so.0", ("cusparselt",)),
    ("libnvrtc.so.13", ("cu13",)),
    ("libnvrtc.so.12", ("cuda_nvrtc",)),
    ("libnvshmem_host.so.3", ("nvshmem",)),
    ("libcupti.so.13", ("cu13",)),
    ("libcupti.so.12", ("cuda_cupti",)),
    ("libcurand.so.10", ("cu13", "curand")),
)


_SITECUSTOMIZE = '''"""FakeGPU interpreter-start hook (written by fakegpu.launcher.python_hook_dir)."""
import fakegpu.fakecuda.envhook  # noqa: F401  (activates fakecuda when FAKEGPU_RUNTIME=fakecuda)


def _chain():
    # Run the sitecustomize this one shadows, if any: the next one on sys.path after our folder.
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_chain()
del _chain
'''




class LaunchError(FakeGPUError):
    """`fakegpu run` cannot set the child up (libraries not built, command not found)."""


class LaunchUsageError(LaunchError):
    """`fakegpu run` was called wrongly (unknown mode, no command): a usage error, exit 2."""

    exit_code = EXIT_USAGE
    code = "usage"


class RunTimedOut(FakeGPUError):
    """The command ran past `fakegpu run --timeout` and was ended; the message names its last CUDA activity."""

    exit_code = EXIT_TIMEOUT
    code = "timeout"


def parse_timeout(value: str) -> float:
    """Seconds of a --timeout value: a positive number, optionally with unit s, m or h (30, 1.5, 90s, 10m, 2h)."""
    from fakegpu.durations import seconds

    limit = seconds(value)
    if not limit:
        raise LaunchUsageError(f"--timeout {shorten(value)} is not a duration; expected a positive number of seconds, "
                               "optionally with unit s, m or h (30, 1.5, 90s, 10m, 2h)")
    return limit


@dataclass
class LaunchEnv:
    """What `fakegpu run` gives the child: its environment, and the private folder to remove afterwards."""

    env: dict[str, str]
    root: Path
    devices: list = field(default_factory=list)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def python_hook_dir(parent: str | os.PathLike[str]) -> Path:
    """Make `<parent>/pyhook/sitecustomize.py` (imports fakegpu.fakecuda.envhook, then chains to the
    sitecustomize it shadows) and return the folder, to be put first on PYTHONPATH.

    The one place the fakecuda interpreter-start hook is written: `fakegpu run --mode fakecuda` and
    `fakegpu preflight` both use it.
    """
    folder = Path(parent) / "pyhook"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    return folder


def prepend_python_hook(env: dict[str, str], root: str | os.PathLike[str]) -> None:
    """Put the start hook (python_hook_dir under `root`) and fakegpu's import root first on env's PYTHONPATH."""
    _prepend(env, "PYTHONPATH", str(python_hook_dir(root)), _fakegpu_import_root())


def _fakegpu_import_root() -> str:
    """The folder that holds the `fakegpu` package, so the hook imports it whatever the child's sys.path."""
    import fakegpu

    return str(Path(fakegpu.__file__).resolve().parent.parent)


def native_libraries(lib_dir: Path) -> list[Path]:
    """Our CUDA libraries in preload order; raises LaunchError naming what is missing."""
    paths = [lib_dir / name for name, _ in NATIVE_LIBS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise LaunchError(
            f"native mode needs FakeGPU's CUDA libraries in {lib_dir}, missing: {', '.join(missing)}; "
            "build them with `make native`"
        )
    return paths


def _wheel_mirror(root: Path, libs: list[Path]) -> Path:
    """A folder laid out like site-packages/nvidia/<pkg>/lib/, linking our libraries (see the module doc)."""
    mirror = root / "pynative"
    for (name, folders), path in zip(NATIVE_LIBS, libs, strict=True):
        for folder in folders:
            target = mirror / "nvidia" / folder / "lib" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path.resolve())
    return mirror


def nvidia_smi_binary(lib_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """FakeGPU's nvidia-smi beside the native libraries (<lib>/../bin, as the runtime finds it), or None when it
    is not built."""
    from fakegpu.locations import native_lib_dir

    path = Path(lib_dir or native_lib_dir()).parent / "bin" / "nvidia-smi"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def procfs_binary(lib_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """fakegpu-procfs beside the native libraries (<lib>/../bin), or None when it is not built."""
    from fakegpu.locations import native_lib_dir

    path = Path(lib_dir or native_lib_dir()).parent / "bin" / "fakegpu-procfs"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _with_procfs(command: list[str], env: Mapping[str, str], lib_dir: str | os.PathLike[str] | None) -> list[str]:
    # As root, the command runs under fakegpu-procfs, which gives it a private mount namespace with the fake
    # GPUs' /proc/driver/nvidia and execs it (the same pid: --timeout's process group is unchanged). Only when
    # the command resolves: a missing or non-executable one must still fail here, with our own message.
    if os.geteuid() != 0 or shutil.which(command[0], path=env.get("PATH", os.defpath)) is None:
        return command
    helper = procfs_binary(lib_dir)
    return command if helper is None else [str(helper), "--", *command]


def _tools_first_on_path(env: dict[str, str], root: Path, lib_dir: str | os.PathLike[str] | None) -> None:
    # Scripts and tools call `nvidia-smi` by name (torch.utils.collect_env, accelerate env, health checks): ours
    # comes first, alone in its folder so nothing else of the build shadows a command of the user's.
    smi = nvidia_smi_binary(lib_dir)
    if smi is not None:
        folder = root / "bin"
        folder.mkdir()
        (folder / "nvidia-smi").symlink_to(smi.resolve())
        _prepend(env, "PATH", str(folder))


def _nvml_alone_on_path(env: dict[str, str], root: Path, lib_dir: str | os.PathLike[str] | None) -> None:
    # fakecuda fakes torch.cuda in Python, but pynvml, nvitop, gpustat and torch's NVML-based queries in the same
    # process load libnvidia-ml.so.1 by name: ours must be found. Only NVML: the build's libcuda/libcudart next to
    # it would turn the CUDA build of torch onto native mode's path.
    from fakegpu.locations import native_lib_dir

    nvml = Path(lib_dir or native_lib_dir()) / "libnvidia-ml.so.1"
    if nvml.is_file():
        folder = root / "nvml"
        folder.mkdir()
        (folder / nvml.name).symlink_to(nvml.resolve())
        _prepend(env, "LD_LIBRARY_PATH", str(folder), sep=":")


def _prepend(env: dict[str, str], key: str, *entries: str, sep: str = os.pathsep) -> None:
    old = env.get(key, "")
    env[key] = sep.join([*entries, *([old] if old else [])])


def prepare(
    devices: str | None = None,
    mode: str = "native",
    base_env: Mapping[str, str] | None = None,
    lib_dir: str | os.PathLike[str] | None = None,
    seed: str | None = None,
    memory: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    driver: str | None = None,
    on_device_read: str | None = None,
    record_activity: bool = False,
    faults: Sequence[Fault] | None = None,
    telemetry_replay: str | os.PathLike[str] | None = None,
    timeline_dir: str | os.PathLike[str] | None = None,
    price_sheet: str | None = None,
) -> LaunchEnv:
    """Resolve the devices, write the table into a new private folder, and return the child's environment.

    `faults` (else $FAKEGPU_FAULTS: a plan file or the plan's text) go on the run's fault board, timed from now;
    `telemetry_replay` (else $FAKEGPU_TELEMETRY_REPLAY), a recording's path, is played from now (faults/replay.py).

    `on_device_read` is native mode's policy for host reads of kernel-written memory (DEVICE_READ_POLICIES);
    `record_activity` makes native mode's libcuda keep the last CUDA activity under <root>/activity (--timeout);
    `timeline_dir` makes each native-mode process append its GPU work to <timeline_dir>/<pid>.fgtl (--timeline);
    `price_sheet` (fakegpu.perf.timeline_price.price_sheet's text) prices the kernels a profiler in the program
    sees through native mode's CUPTI, as --timeline prices them (without it each lasts 1 us).
    Raises InvalidDeviceSpec for a bad spec and LaunchError for a bad mode or missing libraries.
    """
    if driver is not None and not is_driver_version(driver):
        raise LaunchUsageError(f"--driver: {driver_version_problem(driver)}")
    if mode not in MODES:
        raise LaunchUsageError(f"unknown mode {shorten(mode)}{did_you_mean(mode, MODES)}; expected one of: "
                               f"{', '.join(MODES)}")
    if memory is not None and memory not in MEMORY_MODES:
        raise LaunchUsageError(f"unknown memory mode {shorten(memory)}{did_you_mean(memory, MEMORY_MODES)}; "
                               f"expected one of: {', '.join(MEMORY_MODES)}")
    if on_device_read is not None and on_device_read not in DEVICE_READ_POLICIES:
        raise LaunchUsageError(f"--on-device-read {shorten(on_device_read)} is not a policy"
                               f"{did_you_mean(on_device_read, DEVICE_READ_POLICIES)}; expected one of: "
                               f"{', '.join(DEVICE_READ_POLICIES)}")
    if (memory is not None or report_dir is not None or on_device_read is not None or timeline_dir is not None) \
            and mode != "native":
        raise LaunchUsageError("--memory, --report-dir, --on-device-read and --timeline apply to native mode only")
    env = dict(os.environ if base_env is None else base_env)
    # --devices "" is a spec, and an invalid one; an empty $FAKEGPU_DEVICES is unset, as for any variable.
    spec = devices if devices is not None else env.get("FAKEGPU_DEVICES") or DEFAULT_DEVICES
    seed = effective_seed(seed if seed is not None else env.get("FAKEGPU_SEED"))
    resolved = resolve_devices(spec, seed=seed)  # raises InvalidDeviceSpec before anything is created
    if faults is None and env.get("FAKEGPU_FAULTS"):
        faults = fault_plan.from_environment(env["FAKEGPU_FAULTS"])
    # A fault on a GPU the run lacks is refused before anything is created, too.
    planned = fault_plan.records(faults or (), [d.uuid for d in resolved], time.time_ns())
    if mode == "native" and any(f.after_steps is not None for f in faults or ()):
        raise LaunchUsageError("a fault's after_steps: native mode cannot see training steps (it runs no code of "
                               "its own in the program's Python); use at, after_allocations or after_collectives, "
                               "or --mode fakecuda")
    recording = telemetry_replay or env.get("FAKEGPU_TELEMETRY_REPLAY")
    samples = replay.load(recording, [d.uuid for d in resolved]) if recording else []
    if mode != "native":
        _check_workspace_profiles(env)
    if mode == "native":
        from fakegpu.locations import native_lib_dir

        libs = native_libraries(Path(lib_dir or native_lib_dir()))
    root = Path(tempfile.mkdtemp(prefix="fakegpu-run-"))
    try:
        state = root / "state"
        state.mkdir()
        if planned:
            fault_board.append(str(state), planned)
        if samples:
            replay.write(state, samples, time.time_ns())
        table = root / "devices.tbl"
        # The table names the driver too, for the readers that do not see this environment (fakegpu-procfs).
        chosen = driver or env.get("FAKEGPU_DRIVER_VERSION") or ""
        write_table(table, resolved, spec, seed, driver=chosen if is_driver_version(chosen) else
                    default_driver_version())
        env.update(
            FAKEGPU_DEVICES=spec,
            FAKEGPU_SEED=seed,
            FAKEGPU_DEVICE_TABLE=str(table),
            FAKEGPU_STATE_DIR=str(state),
        )
        if driver is not None:  # NVML, nvidia-smi and libcuda all follow it (native/common/fg_driver.c)
            env["FAKEGPU_DRIVER_VERSION"] = driver
            env.pop("FAKEGPU_CUDA_VERSION", None)
        _tools_first_on_path(env, root, lib_dir)
        if mode == "native":
            env.pop("FAKEGPU_RUNTIME", None)
            if memory is not None:
                env["FAKEGPU_MEMORY"] = memory
            if report_dir is not None:  # one fakegpu-native-<pid>.json per process (reports: native-process)
                Path(report_dir).mkdir(parents=True, exist_ok=True)
                env["FAKEGPU_REPORT_DIR"] = str(Path(report_dir).resolve())
            if on_device_read is not None:
                env["FAKEGPU_ON_DEVICE_READ"] = on_device_read
            if record_activity:
                (root / "activity").mkdir()
                env["FAKEGPU_ACTIVITY_DIR"] = str(root / "activity")
            if timeline_dir is not None:  # native/cuda/common/fgc_timeline.h
                Path(timeline_dir).mkdir(parents=True, exist_ok=True)
                env["FAKEGPU_TIMELINE_DIR"] = str(Path(timeline_dir).resolve())
            if price_sheet is not None:  # torch.profiler's kernel durations (native/cuda/cupti/activity.c)
                env["FAKEGPU_PRICE_SHEET"] = price_sheet
            lib_folder = str(libs[0].parent.resolve())
            _prepend(env, "LD_PRELOAD", *(str(p.resolve()) for p in libs), sep=":")
            _prepend(env, "LD_LIBRARY_PATH", lib_folder, sep=":")
            _prepend(env, "PYTHONPATH", str(_wheel_mirror(root, libs)))
        else:
            env["FAKEGPU_RUNTIME"] = "fakecuda"
            prepend_python_hook(env, root)
            _nvml_alone_on_path(env, root, lib_dir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return LaunchEnv(env=env, root=root, devices=resolved)


def _check_workspace_profiles(env: dict[str, str]) -> None:
    """fakecuda reads FAKEGPU_WORKSPACE_PROFILES at interpreter start, where a broken file could only be printed
    and skipped: check the files here (WorkspaceProfileError, file:line) and hand the child absolute paths.
    Native mode's context figures are compiled in; it ignores the variable."""
    from fakegpu.profiles import workspace_profiles

    files = workspace_profiles.files_from_env(env)
    if files:
        workspace_profiles.load(files)
        env[workspace_profiles.ENV_VARIABLE] = os.pathsep.join(str(p.resolve()) for p in files)


def child_argv(command: Sequence[str], launch: LaunchEnv, mode: str = "native",
               lib_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """What `fakegpu run` starts for `command` in the environment `prepare` made: LaunchError when native mode
    cannot serve the program (it carries a static CUDA runtime); as root, under fakegpu-procfs. `fakegpu run` and
    `fakegpu validate`'s cases both start their commands through it."""
    if mode == "native":
        _refuse_a_static_cuda_runtime(command[0], launch.env)
    return _with_procfs(list(command), launch.env, lib_dir)


def run(
    command: Sequence[str],
    devices: str | None = None,
    mode: str = "native",
    lib_dir: str | os.PathLike[str] | None = None,
    memory: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    driver: str | None = None,
    on_device_read: str | None = None,
    timeout: str | float | None = None,
    faults: Sequence[Fault] | None = None,
    telemetry_replay: str | os.PathLike[str] | None = None,
    timeline_dir: str | os.PathLike[str] | None = None,
    price_sheet: str | None = None,
) -> int:
    """Run `command` with fake GPUs; returns its exit status (128+N when killed by signal N, as shells do).

    `timeout` (seconds, or a --timeout string such as "90s"): past it the command's whole process tree is ended
    and RunTimedOut raised, naming the last CUDA activity (native mode)."""
    if not command:
        raise LaunchUsageError("no command given: fakegpu run [--devices SPEC] [--mode native|fakecuda] -- CMD ...")
    limit = None if timeout is None else parse_timeout(str(timeout))
    launch = prepare(devices, mode, lib_dir=lib_dir, memory=memory, report_dir=report_dir, driver=driver,
                     on_device_read=on_device_read, record_activity=limit is not None and mode == "native",
                     faults=faults, telemetry_replay=telemetry_replay, timeline_dir=timeline_dir,
                     price_sheet=price_sheet)
    try:
        argv = child_argv(command, launch, mode, lib_dir)
        try:
            if limit is None:
                rc = _run_in_foreground(argv, launch.env)
            else:
                rc = _run_with_timeout(argv, launch, limit, mode)
        except FileNotFoundError as exc:
            raise LaunchError(f"command not found: {command[0]}") from exc
        except PermissionError as exc:
            raise LaunchError(f"cannot execute {command[0]}: permission denied") from exc
        return 128 - rc if rc < 0 else rc
    finally:
        launch.cleanup()


def _run_with_timeout(command: list[str], launch: LaunchEnv, limit: float, mode: str) -> int:
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    proc = subprocess.Popen(command, env=launch.env, **group)
    forwarded = _forward_signals(proc.pid)
    try:
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pass
        ended_at = time.monotonic_ns()
        ended = end_tree(proc)
        last = last_cuda_activity(launch.root / "activity", ended_at) if mode == "native" else (
            "not recorded (fakecuda mode; native mode records it)")
        others = f" and {ended - 1} process{'es' if ended != 2 else ''} it started" if ended > 1 else ""
        raise RunTimedOut(f"{shorten(command[0])} ran past --timeout {limit:g} s; ended it (pid {proc.pid}{others}: "
                          f"SIGTERM, SIGKILL after {TIMEOUT_GRACE_S:g} s); its last CUDA activity: {last}")
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # the launcher itself was interrupted: leave nothing behind
            end_tree(proc)


def _run_in_foreground(command: list[str], env: dict[str, str]) -> int:
    """Without --timeout the command stays in the launcher's process group, so a terminal's job control and an
    interactive program's reads work as they do without fakegpu. What a supervisor sends the launcher alone
    (SIGTERM, SIGHUP; SIGINT too unless a terminal sent it, which delivers it to the command itself) is passed on,
    and the launcher waits for the command and cleans up: dying at once would orphan the command and leave the
    run's folder behind."""
    proc = subprocess.Popen(command, env=env)

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    old: dict[int, object] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, forward)
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN if _terminal_sends_sigint() else forward)
    except ValueError:  # not the main thread: signals stay as they are
        pass
    try:
        return proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # the launcher itself failed: leave nothing behind
            end_tree(proc)


def _terminal_sends_sigint() -> bool:
    """The launcher runs in the foreground of a terminal, whose Ctrl-C reaches every process of the group."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False


def _forward_signals(pgid: int) -> dict[int, object]:
    """While the command runs in its own process group, what the terminal or a supervisor sends the launcher goes
    to the group too. Returns the handlers to restore (none outside the main thread, where Python cannot set them)."""
    def forward(sig: int, _frame: object) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    old: dict[int, object] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, forward)
    except ValueError:  # not the main thread
        pass
    return old


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])  # after "pid (comm) state"
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal_tree(proc: subprocess.Popen, pids: set[int], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group, which a process that left it does not belong to: hence pids too
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def end_tree(proc: subprocess.Popen, grace_s: float = TIMEOUT_GRACE_S) -> int:
    """SIGTERM to the group of `proc` (started as a group leader) and every descendant, SIGKILL to what is left
    after `grace_s`; waits for them to be gone. Returns how many processes there were. `fakegpu run --timeout`
    and `fakegpu validate`'s per-case timeouts both end a command's tree with it."""
    pids = _descendants(proc.pid)
    _signal_tree(proc, pids, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    pids |= _descendants(proc.pid)
    _signal_tree(proc, pids, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5.0  # orphans are reaped by init, not by us: wait until they are gone
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in pids):
        time.sleep(0.01)
    return 1 + len(pids)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"Z"


# native/cuda/driver/activity.c's page: magic, sequence, CLOCK_MONOTONIC ns, bytes, api[48], detail[432].
_ACTIVITY = struct.Struct("<8sQqQ48s432s")


def last_cuda_activity(folder: Path, now_ns: int | None = None) -> str:
    """The most recent CUDA call any process of the run recorded in `folder` (native mode, --timeout), in words."""
    latest: tuple[int, int, str, str, int] | None = None
    for path in folder.glob("*.activity") if folder.is_dir() else ():
        try:
            magic, seq, t_ns, nbytes, api, detail = _ACTIVITY.unpack(path.read_bytes()[: _ACTIVITY.size])
        except (OSError, struct.error):
            continue
        if magic != b"FGACT1\0\0" or not seq:
            continue
        entry = (t_ns, int(path.stem), _cstr(api), _cstr(detail), nbytes)
        if latest is None or entry > latest:
            latest = entry
    if latest is None:
        return "none recorded (the program never called FakeGPU's CUDA libraries)"
    t_ns, pid, api, detail, nbytes = latest
    what = api + (f" of {_kernel_name(detail)}" if detail else "") + (f", {nbytes} bytes" if nbytes else "")
    age = "" if now_ns is None else f", {max(0, now_ns - t_ns) / 1e9:.2f} s before it was ended"
    return f"{what} (pid {pid}{age})"


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _kernel_name(name: str, keep: int = 160) -> str:
    """A kernel's name as a person reads it: demangled (libstdc++'s __cxa_demangle, when there is one), without
    its return type and parameter list, cut to `keep` characters."""
    shown = name
    if name.startswith("_Z"):
        try:
            lib = ctypes.CDLL("libstdc++.so.6")
            demangle = lib.__cxa_demangle
            demangle.restype = ctypes.c_void_p
            status = ctypes.c_int()
            out = demangle(name.encode(), None, None, ctypes.byref(status))
            if out and status.value == 0:
                shown = ctypes.string_at(out).decode("utf-8", "replace")
                ctypes.CDLL(None).free(ctypes.c_void_p(out))
        except (OSError, AttributeError):
            pass
    shown = shown.removeprefix("void ")
    if shown != name and shown.endswith(")"):
        depth = 0
        for i in range(len(shown) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(shown[i], 0)
            if depth == 0:
                shown = shown[:i]
                break
    return shown if len(shown) <= keep else shown[: keep - 3] + "..."


def _refuse_a_static_cuda_runtime(program: str, env: dict[str, str]) -> None:
    from fakegpu.analyze.linkage import static_cuda_runtime

    path = shutil.which(program, path=env.get("PATH"))
    found = static_cuda_runtime(path, env) if path else None
    if found is not None:
        raise LaunchError(found.message(path))


def nvidia_smi(args: Sequence[str], devices: str | None = None) -> int:
    """`fakegpu nvidia-smi ARGS`: FakeGPU's nvidia-smi on the devices `fakegpu run` would give (--devices, else
    $FAKEGPU_DEVICES, else the default). Inside `fakegpu run` or a FakeGPU container, where the devices are
    chosen already (FAKEGPU_DEVICE_TABLE), on those, seeing the processes that run there."""
    smi = nvidia_smi_binary()
    if smi is None:
        from fakegpu.locations import native_lib_dir

        raise LaunchError(f"FakeGPU's nvidia-smi is not built (looked in {Path(native_lib_dir()).parent / 'bin'}); "
                          "build it with `make native`")
    if devices is None and os.environ.get("FAKEGPU_DEVICE_TABLE"):
        rc = subprocess.run([str(smi), *args], check=False).returncode
        return 128 - rc if rc < 0 else rc
    # fakecuda mode's environment is the devices and the state folder alone: nvidia-smi needs no CUDA library.
    return run([str(smi), *args], devices=devices, mode="fakecuda")


if __name__ == "__main__":  # pragma: no cover - debugging aid
    sys.exit(run(sys.argv[1:]))
