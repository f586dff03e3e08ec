"""The native libraries as their API tables and their build describe them.

Sources, each the one place its fact lives: the hand-written tables (`native/nvml/api.tsv`,
`native/cuda/api/<lib>.tsv`, read by tools/api_table.py, the generators' own reader), the lists the generators wrote
at build time (`native/build/gen/capabilities.tsv` for NVML, `gen/cuda/<lib>_capabilities.tsv` and
`gen/cuda12/...` for the CUDA libraries: every export, `impl` or `stub`) with their version scripts (`<lib>.map`,
whose node names the CUDA-major set a file belongs to), and the built files in `native/build/lib`.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

from fakegpu.locations import CHECKOUT, native_lib_dir

TABLES_DIR = Path(CHECKOUT) / "native"
NVML = "nvml"


@dataclass(frozen=True)
class Row:
    name: str
    cls: str  # "impl": written by hand in `file`; "stub": not supported on purpose, `note` says why
    file: str
    note: str


@dataclass
class Build:
    """One built file of a library and the generator's list of its exports."""

    file: str  # e.g. libcudart.so.13
    path: Path | None  # None: not built
    generated: Path | None  # the generator's <lib>_capabilities.tsv; None: not generated
    node: str  # the version-script node ("" when unversioned)
    listed: dict[str, str] = field(default_factory=dict)  # {export: "impl"|"stub"} from `generated`


@dataclass
class Library:
    name: str  # the table's short name: nvml, cuda, cudart, cublas, ...
    table: Path
    rows: dict[str, Row]
    builds: list[Build]

    @property
    def implemented(self) -> list[Row]:
        return [r for r in self.rows.values() if r.cls == "impl"]

    @property
    def declared_unsupported(self) -> list[Row]:
        return [r for r in self.rows.values() if r.cls == "stub"]


class TablesMissing(FileNotFoundError):
    """No API tables here: they are in a FakeGPU checkout (native/), not in an installed wheel."""


@cache
def _api_table() -> ModuleType:
    # The generators' reader, so the table format has one parser; it lives beside them in tools/.
    path = Path(CHECKOUT) / "tools" / "api_table.py"
    spec = importlib.util.spec_from_file_location("fakegpu_tools_api_table", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise TablesMissing(f"{path} not found: the API tables are read from a FakeGPU checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_rows(table: Path) -> dict[str, Row]:
    return {n: Row(n, *cells) for n, cells in _api_table().parse_rows(table).items()}


def read_listed(path: Path) -> dict[str, str]:
    """{name: impl|stub} of a generated capabilities list."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, cls = line.partition("\t")
        if name:
            out[name] = cls.strip()
    return out


def _node(map_file: Path) -> str:
    """The version node of a generated linker script (`libcudart.so.13 {`), "" for an unversioned one."""
    if not map_file.is_file():
        return ""
    found = re.search(r"^(\S*)\s*\{", map_file.read_text(encoding="utf-8"), re.M)
    return found[1] if found else ""


def _built_files(lib_dir: Path, name: str) -> list[str]:
    soname = re.compile(rf"^lib{re.escape(name)}\.so\.\d+$")
    if not lib_dir.is_dir():
        return []
    return sorted(p.name for p in lib_dir.iterdir() if soname.match(p.name))


def _cuda_builds(name: str, lib_dir: Path, gen_dir: Path) -> list[Build]:
    """A CUDA library's builds: one per generated set (gen/cuda, gen/cuda12), each paired with its file by the
    version node (libcudart.so.12), or, for a library built once (unversioned or a node like NVSHMEM), the one
    file of its name."""
    files = _built_files(lib_dir, name)
    sets = [d / f"{name}_capabilities.tsv" for d in (gen_dir / "cuda", gen_dir / "cuda12")]
    sets = [s for s in sets if s.is_file()]
    builds: list[Build] = []
    unclaimed = list(files)
    for listed in sets:
        node = _node(listed.with_name(f"{name}.map"))
        file = node if node in files else (unclaimed[0] if len(sets) == 1 and len(unclaimed) == 1 else "")
        if file in unclaimed:
            unclaimed.remove(file)
        builds.append(Build(file or node or f"lib{name}.so", lib_dir / file if file else None, listed, node,
                            read_listed(listed)))
    for file in unclaimed:  # built, yet no generated list names it
        builds.append(Build(file, lib_dir / file, None, ""))
    return builds


def load(lib_dir: Path | None = None, tables_dir: Path = TABLES_DIR) -> list[Library]:
    """Every library that has an API table, NVML first, with its builds under lib_dir (default: where `fakegpu
    run` takes the shims from); the generated lists are in lib_dir's sibling gen/."""
    lib_dir = Path(native_lib_dir()) if lib_dir is None else lib_dir
    gen_dir = lib_dir.parent / "gen"
    nvml_table = tables_dir / "nvml" / "api.tsv"
    cuda_tables = sorted((tables_dir / "cuda" / "api").glob("*.tsv"), key=lambda p: p.stem.lower())
    if not nvml_table.is_file() or not cuda_tables:
        raise TablesMissing(f"no API tables under {tables_dir} (native/nvml/api.tsv, native/cuda/api/*.tsv): "
                            "they are read from a FakeGPU checkout")
    nvml_file = "libnvidia-ml.so.1"
    nvml_list = gen_dir / "capabilities.tsv"
    libraries = [Library(NVML, nvml_table, read_rows(nvml_table), [Build(
        nvml_file, lib_dir / nvml_file if (lib_dir / nvml_file).is_file() else None,
        nvml_list if nvml_list.is_file() else None, "", read_listed(nvml_list) if nvml_list.is_file() else {})])]
    for table in cuda_tables:
        libraries.append(Library(table.stem, table, read_rows(table), _cuda_builds(table.stem, lib_dir, gen_dir)))
    return libraries
