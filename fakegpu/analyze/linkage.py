"""Does a program link the CUDA runtime statically? nvcc does so by default (`-cudart static`), and CMake's
CUDA_RUNTIME_LIBRARY defaults to Static too. Such a runtime talks to libcuda through private interfaces that
FakeGPU deliberately does not implement, so the program sees no devices and garbage properties instead of failing:
`fakegpu run` asks here first and stops with the fix."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fakegpu.analyze.elf import NotELF, read_elf

# Entry points every CUDA runtime defines; a program that defines them and needs no libcudart.so carries its own.
CUDART_SYMBOLS = frozenset({"cudaGetDeviceCount", "cudaMalloc", "cudaLaunchKernel", "__cudaRegisterFatBinary"})
# The static runtime's shared-memory names ("/cudart.shm.%x..."), present in a stripped binary too.
STATIC_MARKER = b"/cudart.shm."
_SCAN_LIMIT = 1 << 30  # a stripped file is searched for the marker up to this size
_SYSTEM_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
FIX = ("rebuild it with the shared runtime: `nvcc -cudart shared ...`, or in CMake "
       "`set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)` (or the target property CUDA_RUNTIME_LIBRARY Shared)")


@dataclass(frozen=True)
class StaticRuntime:
    path: Path  # the program, or the library of it, that carries the runtime
    evidence: str

    def problem(self, program: str) -> str:
        """What was found and why it cannot work, without the fix."""
        where = "" if str(self.path) == program else f" (in {self.path}, which it loads)"
        return (f"{program} links the CUDA runtime statically{where}: {self.evidence}. A static CUDA runtime "
                "talks to the driver through private interfaces FakeGPU does not implement, so the program would "
                "see no devices rather than fake ones")

    def message(self, program: str) -> str:
        return f"{self.problem(program)}; {FIX}"


def _contains(path: Path, marker: bytes) -> bool:
    overlap = len(marker) - 1
    with path.open("rb") as f:
        tail, read = b"", 0
        while read < _SCAN_LIMIT and (chunk := f.read(1 << 22)):
            if marker in tail + chunk:
                return True
            tail, read = chunk[-overlap:], read + len(chunk)
    return False


def _static_runtime_in(path: Path) -> StaticRuntime | None:
    try:
        info = read_elf(path, set(CUDART_SYMBOLS))
    except (NotELF, OSError, ValueError):
        return None  # a script, or nothing we can read: the program speaks for itself
    if (info.soname or "").startswith("libcudart.so") or any(n.startswith("libcudart.so") for n in info.needed):
        return None  # the runtime itself, or a user of the shared one
    found = sorted(info.defined & CUDART_SYMBOLS)
    if found:
        return StaticRuntime(path, f"it defines {', '.join(found)} and needs no libcudart.so")
    if not info.has_symtab and _contains(path, STATIC_MARKER):
        return StaticRuntime(path, "it is stripped, holds the static runtime's shared-memory names "
                                   f"({STATIC_MARKER.decode()}*) and needs no libcudart.so")
    return None


def _libraries(program: Path, environ: dict[str, str]) -> list[Path]:
    """The program's own DT_NEEDED libraries found where it looks first (RUNPATH/RPATH, LD_LIBRARY_PATH), not in
    the system's folders: one level, which is what stays cheap."""
    try:
        info = read_elf(program, set())
    except (NotELF, OSError, ValueError):
        return []
    origin = str(program.resolve().parent)
    folders = [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for p in info.search_path]
    folders += [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    found = []
    for name in info.needed:
        for folder in folders:
            candidate = Path(folder) / name
            if candidate.is_file() and not str(candidate.resolve()).startswith(_SYSTEM_DIRS):
                found.append(candidate)
                break
    return found


def static_cuda_runtime(program: str | os.PathLike[str], environ: dict[str, str] | None = None
                        ) -> StaticRuntime | None:
    """The static CUDA runtime in `program` or in a library it loads from its own folders; None when there is
    none (or the file is not an ELF program)."""
    program = Path(program)
    environ = dict(os.environ if environ is None else environ)
    for path in [program, *_libraries(program, environ)]:
        found = _static_runtime_in(path)
        if found:
            return found
    return None
