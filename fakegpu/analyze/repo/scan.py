"""One pass over a repository: every file the walk keeps is read at most once and handed to the reader of its
kind; the results are facts (sites, imports, dependencies, infrastructure, native code), no verdicts yet."""

from __future__ import annotations

import ast
import gc
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.analyze.elf import NotELF, read_elf
from fakegpu.analyze.repo import deps, infra
from fakegpu.analyze.repo.modules import ModuleIndex, module_name
from fakegpu.analyze.repo.python_imports import imports_by_pattern
from fakegpu.analyze.repo.python_scan import PythonFacts, has_trigger, needs_parse, scan_python
from fakegpu.analyze.repo.walk import MAX_TEXT_BYTES, File, Skips, walk
from fakegpu.user_files import loads_json

_TEXT_KINDS = {"python", "notebook", "cuda-source", "ptx", "pyproject", "setup-cfg", "entry-points", "requirements",
               "dockerfile", "compose", "ci", "conda", "script", "doc"}
_CUDA_LIBRARIES = re.compile(r"^lib(cudart|cuda|cublas|cublasLt|cudnn|nccl|cufft|curand|cusparse|cusolver|nvrtc)"
                             r"\.so")


@dataclass
class NativeFile:
    path: str
    kind: str  # cuda-source, ptx, cuda-binary, shared-object
    detail: str
    cuda: bool = True  # for a shared object: it links a CUDA library or carries device code


@dataclass
class Scan:
    root: Path
    files: int = 0
    bytes: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    skips: Skips = field(default_factory=Skips)
    python: dict[str, PythonFacts] = field(default_factory=dict)  # file -> facts (notebooks included)
    cells: dict[str, list[int]] = field(default_factory=dict)  # notebook -> first line of each code cell
    parsed: int = 0
    pattern_read: int = 0  # Python files with no trigger: imports read by pattern, not parsed
    index: ModuleIndex = field(default_factory=ModuleIndex)
    native: list[NativeFile] = field(default_factory=list)
    extension_modules: dict[str, NativeFile] = field(default_factory=dict)  # module file (.so) -> its facts
    dependencies: list[deps.Dependency] = field(default_factory=list)
    declared: list[deps.Declared] = field(default_factory=list)
    unread: list[deps.Unread] = field(default_factory=list)
    infra: list[infra.Infra] = field(default_factory=list)
    commands: list[infra.CommandRef] = field(default_factory=list)
    all_files: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _notebook_source(data: bytes) -> tuple[str, list[int]]:
    """A notebook's code cells as one source (IPython magics and shell lines blanked, so line numbers stay), and
    the line each cell starts at."""
    doc = loads_json(data)
    cells = doc.get("cells", []) if isinstance(doc, dict) else []
    lines: list[str] = []
    starts = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        starts.append(len(lines) + 1)
        for line in text.splitlines() or [""]:
            lines.append("" if line.lstrip().startswith(("%", "!")) else line)
    return "\n".join(lines) + "\n", starts


def _extension_module(rel: str) -> bool:
    """Whether a shared object is a Python extension module (`_C.cpython-311-x86_64-linux-gnu.so`, `x.abi3.so`,
    `fastops.so`), which an import can reach, rather than a library it links (`lib/libtorch_cuda.so`)."""
    name = rel.rpartition("/")[2]
    stem = name.split(".", 1)[0]
    tagged = ".cpython-" in name or ".abi3." in name or ".pypy" in name
    return stem.isidentifier() and (tagged or (name == stem + ".so" and not stem.startswith("lib")))


def _package_folders(files: list[File], root: Path) -> set[str]:
    return {f.rel.rpartition("/")[0] for f in files if f.rel.rpartition("/")[2] == "__init__.py"}


def _installed_scripts(root: Path, top: str) -> tuple[list[deps.Declared], str | None]:
    """For an installed package (site-packages/NAME), the console scripts of the distribution beside it whose
    entry points name this package: a tree without packaging files of its own still has its commands."""
    parent = root.parent
    for info in sorted(parent.glob("*.dist-info")):
        eps = info / "entry_points.txt"
        if not eps.is_file():
            continue
        try:
            text = eps.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = [d for d in deps.read_entry_points_txt(text, f"../{info.name}/entry_points.txt")
                 if d.target.split(".", 1)[0].split(":", 1)[0] == top]
        if found:
            return found, f"../{info.name}/entry_points.txt"
    return [], None


def scan(root: Path, max_bytes: int = MAX_TEXT_BYTES) -> Scan:
    """Walk and read the tree at `root` once."""
    # Syntax trees are many small objects that die young: the cyclic collector's passes over them cost a third of
    # the parsing time and free nothing, so it is off for the scan.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _scan(root, max_bytes)
    finally:
        if collecting:
            gc.enable()


def _scan(root: Path, max_bytes: int) -> Scan:
    start = time.perf_counter()
    result = Scan(root)
    files = list(walk(root, result.skips))
    result.all_files = [f.rel for f in files]
    packages = _package_folders(files, root)
    for f in files:
        result.files += 1
        result.bytes += f.size
        result.by_kind[f.kind] = result.by_kind.get(f.kind, 0) + 1
        if f.kind == "python" or (f.kind == "shared-object" and _extension_module(f.rel)):
            name, import_root = module_name(f.rel, packages, root.name)
            result.index.add(f.rel, name, import_root)
    for f in files:
        if f.kind == "shared-object":
            _shared_object(result, f)
        elif f.kind == "cuda-binary":
            result.native.append(NativeFile(f.rel, f.kind, f"{f.size} bytes of CUDA device code"))
        elif f.kind in _TEXT_KINDS:
            _text_file(result, f, max_bytes)
    if (root / "__init__.py").is_file() and not result.declared:
        found, _where = _installed_scripts(root, root.name)
        result.declared += found
    result.seconds = time.perf_counter() - start
    return result


def _shared_object(result: Scan, f: File) -> None:
    try:
        info = read_elf(f.path, symbol_tables=False)
    except (NotELF, ValueError, OSError) as exc:
        result.skips.add("unreadable", f.rel, error=str(exc).rsplit(": ", 1)[-1])
        return
    cuda_libs = sorted(n for n in info.needed if _CUDA_LIBRARIES.match(n))
    fatbin = bool(info.sections & {".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment"})
    if not cuda_libs and not fatbin:
        return
    parts = []
    if cuda_libs:
        parts.append("links " + ", ".join(cuda_libs))
    if fatbin:
        parts.append("carries CUDA device code (.nv_fatbin)")
    native = NativeFile(f.rel, "shared-object", "; ".join(parts))
    result.native.append(native)
    if f.rel in result.index.name_of:
        result.extension_modules[f.rel] = native


def _read(result: Scan, f: File, max_bytes: int) -> bytes | None:
    if f.size > max_bytes:
        detail: dict[str, object] = {"bytes": f.size, "limit": max_bytes}
        if f.kind == "python":
            try:
                with f.path.open("rb") as handle:
                    detail["mentions_gpu_terms"] = has_trigger(handle.read())
            except OSError:
                pass
        result.skips.add("too-large", f.rel, **detail)
        return None
    try:
        data = f.path.read_bytes()
    except OSError as exc:
        result.skips.add("unreadable", f.rel, error=exc.strerror or str(exc))
        return None
    if b"\0" in data[:8192]:
        result.skips.add("binary", f.rel)
        return None
    return data


def _python(result: Scan, f: File, data: bytes) -> None:
    name = result.index.name_of.get(f.rel, "")
    package = name if f.rel.endswith("__init__.py") else name.rpartition(".")[0]
    quick = imports_by_pattern(data, package)
    setup_py = f.rel.rpartition("/")[2] == "setup.py"
    if not setup_py and not needs_parse(data, quick.imports):
        result.python[f.rel] = quick
        result.pattern_read += 1
        return
    try:
        facts = scan_python(data, package)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        result.skips.add("syntax-error", f.rel, line=line, error=getattr(exc, "msg", str(exc)))
        result.python[f.rel] = quick  # the import graph still goes through it
        return
    except (RecursionError, MemoryError):  # generated code: an expression thousands of levels deep
        result.skips.add("too-deep", f.rel, error="nested too deeply for Python's parser",
                         mentions_gpu_terms=True)  # it was parsed because it has a trigger
        result.python[f.rel] = quick
        return
    result.parsed += 1
    result.python[f.rel] = facts
    if setup_py:
        try:
            text = data.decode("utf-8", "replace")
            found, scripts, unread = deps.read_setup_py(ast.parse(data), text, f.rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
        result.dependencies += found
        result.declared += scripts
        result.unread += unread


def _text_file(result: Scan, f: File, max_bytes: int) -> None:
    data = _read(result, f, max_bytes)
    if data is None:
        return
    if f.kind == "python":
        _python(result, f, data)
        return
    text = data.decode("utf-8", "replace")
    kind = f.kind
    if kind == "notebook":
        try:
            source, starts = _notebook_source(data)
        except (ValueError, TypeError):
            result.skips.add("unreadable", f.rel, error="not a valid notebook (JSON)")
            return
        try:
            result.python[f.rel] = scan_python(source)
            result.cells[f.rel] = starts
            result.parsed += 1
        except (SyntaxError, ValueError) as exc:
            result.skips.add("syntax-error", f.rel, line=getattr(exc, "lineno", None),
                             error=getattr(exc, "msg", str(exc)))
        except (RecursionError, MemoryError):
            result.skips.add("too-deep", f.rel, error="nested too deeply for Python's parser")
    elif kind == "cuda-source":
        kernels = text.count("__global__")
        result.native.append(NativeFile(f.rel, kind, f"{kernels} __global__ kernel{'s' if kernels != 1 else ''}"
                                        if kernels else "CUDA header/source, no __global__ kernel"))
    elif kind == "ptx":
        entries = len(re.findall(r"\.entry\s", text))
        result.native.append(NativeFile(f.rel, kind, f"PTX, {entries} kernel entr{'y' if entries == 1 else 'ies'}"))
    elif kind == "pyproject":
        found, scripts, unread = deps.read_pyproject(text, f.rel)
        result.dependencies += found
        result.declared += scripts
        result.unread += unread
    elif kind == "setup-cfg":
        found, scripts, unread = deps.read_setup_cfg(text, f.rel)
        result.dependencies += found
        result.declared += scripts
        result.unread += unread
    elif kind == "entry-points":
        result.declared += deps.read_entry_points_txt(text, f.rel)
    elif kind == "requirements":
        found, unread = deps.read_requirements(f.path, f.rel, result.root)
        result.dependencies += found
        result.unread += unread
    elif kind == "conda":
        found, unread = deps.read_conda(text, f.rel)
        result.dependencies += found
        result.unread += unread
    elif kind == "dockerfile":
        found, refs = infra.read_dockerfile(text, f.rel)
        result.infra += found
        result.commands += refs
    elif kind in ("compose", "ci"):
        found, problem = (infra.read_compose if kind == "compose" else infra.read_ci)(text, f.rel)
        result.infra += found
        if problem:
            result.unread.append(deps.Unread(f.rel, 1, problem))
        refs = infra.commands(text, f.rel)
        for ref in refs:  # a service's command in a compose file that reserves GPUs runs on them
            ref.in_gpu_image = kind == "compose" and bool(found)
        result.commands += refs
    elif kind in ("script", "doc"):
        result.infra += infra.gpus_flags(text, f.rel)
        result.commands += infra.commands(text, f.rel)
