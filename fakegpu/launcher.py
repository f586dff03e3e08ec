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
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.devices import DEFAULT_DEVICES, effective_seed, resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.errors import EXIT_USAGE, FakeGPUError, shorten

MODES = ("native", "fakecuda")
# native mode's device memory: "full" keeps the bytes written to the device; "accounting" reserves address
# space and counts, but drops writes (device memory reads as zeros), so loading a model costs no host RAM.
MEMORY_MODES = ("full", "accounting")

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


# What NVIDIA's driver versions look like: branch.minor[.patch] (535.104.05, 550.127.08, 580.95.05).
DRIVER_VERSION = re.compile(r"[1-9]\d{2}\.\d{1,3}(\.\d{1,3})?")


class LaunchError(FakeGPUError):
    """`fakegpu run` cannot set the child up (libraries not built, command not found)."""


class LaunchUsageError(LaunchError):
    """`fakegpu run` was called wrongly (unknown mode, no command): a usage error, exit 2."""

    exit_code = EXIT_USAGE
    code = "usage"


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


def _tools_first_on_path(env: dict[str, str], root: Path, lib_dir: str | os.PathLike[str] | None) -> None:
    # Scripts and tools call `nvidia-smi` by name (torch.utils.collect_env, accelerate env, health checks): ours
    # comes first, alone in its folder so nothing else of the build shadows a command of the user's.
    smi = nvidia_smi_binary(lib_dir)
    if smi is not None:
        folder = root / "bin"
        folder.mkdir()
        (folder / "nvidia-smi").symlink_to(smi.resolve())
        _prepend(env, "PATH", str(folder))


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
) -> LaunchEnv:
    """Resolve the devices, write the table into a new private folder, and return the child's environment.

    Raises InvalidDeviceSpec for a bad spec and LaunchError for a bad mode or missing libraries.
    """
    if driver is not None and not DRIVER_VERSION.fullmatch(driver):
        raise LaunchUsageError(f"--driver {shorten(driver)} is not a driver version; expected one like 580.95.05 or "
                               "550.127.08 (its branch decides the CUDA version it supports)")
    if mode not in MODES:
        raise LaunchUsageError(f"unknown mode {mode!r}; expected one of: {', '.join(MODES)}")
    if memory is not None and memory not in MEMORY_MODES:
        raise LaunchUsageError(f"unknown memory mode {memory!r}; expected one of: {', '.join(MEMORY_MODES)}")
    if (memory is not None or report_dir is not None) and mode != "native":
        raise LaunchUsageError("--memory and --report-dir apply to native mode only")
    env = dict(os.environ if base_env is None else base_env)
    spec = devices or env.get("FAKEGPU_DEVICES") or DEFAULT_DEVICES
    seed = effective_seed(seed if seed is not None else env.get("FAKEGPU_SEED"))
    resolved = resolve_devices(spec, seed=seed)  # raises InvalidDeviceSpec before anything is created
    if mode == "native":
        from fakegpu.locations import native_lib_dir

        libs = native_libraries(Path(lib_dir or native_lib_dir()))
    root = Path(tempfile.mkdtemp(prefix="fakegpu-run-"))
    try:
        state = root / "state"
        state.mkdir()
        table = root / "devices.tbl"
        write_table(table, resolved, spec, seed)
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
            lib_folder = str(libs[0].parent.resolve())
            _prepend(env, "LD_PRELOAD", *(str(p.resolve()) for p in libs), sep=":")
            _prepend(env, "LD_LIBRARY_PATH", lib_folder, sep=":")
            _prepend(env, "PYTHONPATH", str(_wheel_mirror(root, libs)))
        else:
            env["FAKEGPU_RUNTIME"] = "fakecuda"
            prepend_python_hook(env, root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return LaunchEnv(env=env, root=root, devices=resolved)


def run(
    command: Sequence[str],
    devices: str | None = None,
    mode: str = "native",
    lib_dir: str | os.PathLike[str] | None = None,
    memory: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    driver: str | None = None,
) -> int:
    """Run `command` with fake GPUs; returns its exit status (128+N when killed by signal N, as shells do)."""
    if not command:
        raise LaunchUsageError("no command given: fakegpu run [--devices SPEC] [--mode native|fakecuda] -- CMD ...")
    launch = prepare(devices, mode, lib_dir=lib_dir, memory=memory, report_dir=report_dir, driver=driver)
    try:
        if mode == "native":
            _refuse_a_static_cuda_runtime(command[0], launch.env)
        try:
            proc = subprocess.run(list(command), env=launch.env, check=False)
        except FileNotFoundError as exc:
            raise LaunchError(f"command not found: {command[0]}") from exc
        except PermissionError as exc:
            raise LaunchError(f"cannot execute {command[0]}: permission denied") from exc
        rc = proc.returncode
        return 128 - rc if rc < 0 else rc
    finally:
        launch.cleanup()


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
