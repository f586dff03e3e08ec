"""fakecuda's C++ extension (charge_hook.cpp, charge_fast.cpp, storage_watch.cpp, allocator.cpp, mode_fast.cpp),
compiled against the running torch, loaded from a cache.

A torch C++ extension is bound to one torch build (its C++ ABI, its headers), and the venvs and images here hold
several (2.10, 2.11, 2.15). So it is compiled per torch, into `$XDG_CACHE_HOME/fakegpu/fakecuda-ext/`, under a name
that is a digest of the sources, torch's version and git revision, Python's ABI tag and the C++ ABI flag; a process
loads the file whose name matches and never compiles on its own (g++ takes ~40 s). `make fakecuda-ext`, which
`make test` runs, builds it for each venv: `python -m fakegpu.fakecuda.extension`. An image without a compiler
carries the file its host built for the same torch wheel in the package's `prebuilt/` folder (fakegpu/pytorch:
images/build-pytorch.sh). Where it is not built, fakecuda charges through its Python TorchDispatchMode
(dispatch.ChargeMode) and allocator model (allocator.py): the same rules at a higher cost per op.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from fakegpu.errors import FakeGPUError

NAME = "fakegpu_charge_hook"
SOURCES = tuple(Path(__file__).resolve().parent / name for name in (
    "charge_hook.cpp", "charge_fast.cpp", "storage_watch.cpp", "allocator.cpp", "mode_fast.cpp", "busy_ring.cpp"))

# Compiler flags: part of the file name's digest, with the sources, so that changing them builds a new file
FLAGS = ("-O2", "-std=c++20")

_loaded: ModuleType | None = None


class ExtensionUnavailable(FakeGPUError):
    """The C++ extension is not built for this torch, or cannot be built or loaded."""


def cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fakegpu" / "fakecuda-ext"


def prebuilt_folder() -> Path:
    """Where an image ships the extension built on its host for the image's torch (images/build-pytorch.sh): the
    same file name, looked up when the cache has none."""
    return Path(__file__).resolve().parent / "prebuilt"


def built_path() -> Path:
    """Where the extension for the running torch lives once built (in the cache)."""
    import torch

    key = "\0".join([*(s.read_text() for s in SOURCES), *FLAGS, torch.__version__, str(torch.version.git_version),
                     sysconfig.get_config_var("EXT_SUFFIX") or "", str(int(torch._C._GLIBCXX_USE_CXX11_ABI))])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_folder() / f"{NAME}_{digest}{sysconfig.get_config_var('EXT_SUFFIX')}"


def build(force: bool = False) -> Path:
    """Compile the extension for the running torch (unless it is there already); the file's path."""
    target = built_path()
    if force or not target.exists():
        compile_for_torch(SOURCES, NAME, target)
    return target


def compile_for_torch(sources: Sequence[Path], name: str, target: Path) -> None:
    """Compile C++ sources into the Python extension module `name` at `target`, against the running torch."""
    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        raise ExtensionUnavailable(f"no C++ compiler {compiler!r} on PATH: fakecuda's C++ hook is compiled against "
                                   "the running torch (Debian: apt-get install g++; or set CXX)")
    import torch
    from torch.utils import cpp_extension

    target.parent.mkdir(parents=True, exist_ok=True)
    # written beside the target and renamed over it: a process loading it sees the old file or the whole new one
    fd, partial = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=target.parent)
    os.close(fd)
    command = [compiler, *FLAGS, "-shared", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", f"-DTORCH_EXTENSION_NAME={name}",
               f"-I{sysconfig.get_paths()['include']}", *(f"-I{p}" for p in cpp_extension.include_paths()),
               *(str(s) for s in sources), "-o", partial, *(f"-L{p}" for p in cpp_extension.library_paths()),
               *(f"-Wl,-rpath,{p}" for p in cpp_extension.library_paths()),
               "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            names = ", ".join(s.name for s in sources)
            raise ExtensionUnavailable(f"compiling {names} for torch {torch.__version__} failed "
                                       f"({compiler} exit {result.returncode}):\n{result.stderr[-4000:]}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def load_module(name: str, path: Path) -> ModuleType:
    """Import the extension module `name` from `path`."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExtensionUnavailable(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType:
    """The extension for the running torch, built before (ExtensionUnavailable when it is not)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    path = built_path()
    if not path.exists() and (prebuilt_folder() / path.name).exists():
        path = prebuilt_folder() / path.name
    if not path.exists():
        raise ExtensionUnavailable(f"fakecuda's C++ hook is not built for this torch (no {path}); build it with "
                                   f"{Path(sys.executable).name} -m fakegpu.fakecuda.extension")
    try:
        module = load_module(NAME, path)
    except ImportError as exc:  # a torch swapped under a cached file with the same version string
        raise ExtensionUnavailable(f"cannot load {path}: {exc}; rebuild it with "
                                   f"{Path(sys.executable).name} -m fakegpu.fakecuda.extension --force") from exc
    _loaded = module
    return module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    unknown = [a for a in argv if a != "--force"]
    if unknown:
        print(f"usage: python -m fakegpu.fakecuda.extension [--force]; unknown argument {unknown[0]!r}",
              file=sys.stderr)
        return 2
    try:
        path = build(force="--force" in argv)
    except ExtensionUnavailable as exc:
        print(f"fakecuda extension: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
