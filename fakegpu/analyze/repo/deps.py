"""Declared dependencies and entry points: requirements files (with -r/-c includes), pyproject.toml (PEP 621 and
Poetry), setup.py (its `setup()` literals, read with ast, never run), setup.cfg, conda environment files and the
entry_points.txt of installed or built distributions. Each dependency keeps the file and line it came from."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

# Packages whose presence says something about GPUs: normalized name (or prefix, ending in "*") -> site kind.
GPU_PACKAGES = {
    "torch": "torch", "pytorch": "torch", "flash-attn": "flash-attn", "flash-attn-3": "flash-attn",
    "bitsandbytes": "bitsandbytes", "deepspeed": "deepspeed", "apex": "apex", "vllm": "vllm", "xformers": "xformers",
    "triton": "triton", "kernels": "hub-kernels", "nvidia-ml-py": "nvml", "pynvml": "nvml", "nvidia-ml-py3": "nvml",
    "tensorrt": "tensorrt", "torch-tensorrt": "tensorrt", "mamba-ssm": "mamba-ssm", "causal-conv1d": "mamba-ssm",
    "tensorflow-gpu": "tensorflow-gpu", "jax-cuda12-plugin": "jax-gpu", "jax-cuda13-plugin": "jax-gpu",
    "cupy*": "cupy", "nvidia-*": "cuda-libraries", "pytorch-cuda": "cuda-libraries", "cudatoolkit": "cuda-libraries",
    "cuda-toolkit": "cuda-libraries", "cuda-version": "cuda-libraries", "cuda-python": "cuda-libraries",
}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
_EGG = re.compile(r"#egg=([A-Za-z0-9._-]+)")


@dataclass
class Dependency:
    name: str  # normalized (PEP 503: lower case, runs of -_. as -)
    spec: str  # the whole requirement as written
    path: str
    line: int
    source: str  # requirements, pyproject, setup.py, setup.cfg, conda
    group: str | None = None  # an extra, a Poetry group, a conda pip section
    kind: str | None = None  # GPU_PACKAGES' kind, None for the rest


@dataclass
class Declared:
    """A console or GUI script a packaging file declares."""

    name: str
    target: str  # module:function
    kind: str  # console-script, gui-script
    path: str
    line: int


@dataclass
class Unread:
    """Part of a file that was found but could not be read as data (a computed install_requires, a bad TOML)."""

    path: str
    line: int
    reason: str


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gpu_kind(name: str, extras: str = "") -> str | None:
    name = normalize(name)
    if name in GPU_PACKAGES:
        return GPU_PACKAGES[name]
    if name in ("jax", "jaxlib") and "cuda" in extras.lower():
        return "jax-gpu"
    if name == "tensorflow" and "cuda" in extras.lower():
        return "tensorflow-gpu"
    for pattern, kind in GPU_PACKAGES.items():
        if pattern.endswith("*") and name.startswith(pattern[:-1]):
            return kind
    return None


def _table(value: Any) -> dict:
    """A table of a hand-written file, or an empty one where the file has something else there."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _line_of(text: str, needle: str, default: int = 1) -> int:
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else default


def requirement(spec: str, path: str, line: int, source: str, group: str | None = None) -> Dependency | None:
    """One PEP 508 requirement (or a URL with #egg=); None for what names no package (a path, `.`)."""
    spec = spec.strip()
    egg = _EGG.search(spec)
    if egg:
        name, extras = egg.group(1), ""
    else:
        m = _NAME.match(spec)
        if not m or spec.startswith((".", "/")):
            return None
        name, extras = m.group(1), m.group(2) or ""
    return Dependency(normalize(name), spec, path, line, source, group, gpu_kind(name, extras))


def read_requirements(path: Path, rel: str, root: Path, seen: set[Path] | None = None
                      ) -> tuple[list[Dependency], list[Unread]]:
    """A requirements file and the files it includes (-r, -c), each dependency at its own file and line; an
    include outside the repository or missing is reported, a cycle is followed once."""
    seen = set() if seen is None else seen
    seen.add(path.resolve())
    deps: list[Dependency] = []
    unread: list[Unread] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(-r|-c|--requirement|--constraint)[\s=]+(\S+)", line)
        if include:
            target = (path.parent / include.group(2)).resolve()
            try:
                target_rel = target.relative_to(root.resolve()).as_posix()
            except ValueError:
                unread.append(Unread(rel, number, f"includes {include.group(2)}, outside the repository"))
                continue
            if target in seen:
                continue
            if not target.is_file():
                unread.append(Unread(rel, number, f"includes {include.group(2)}, which does not exist"))
                continue
            more, problems = read_requirements(target, target_rel, root, seen)
            deps += more
            unread += problems
            continue
        if line.startswith("-"):
            if "download.pytorch.org/whl/cu" in line:
                deps.append(Dependency("torch", line, rel, number, "requirements", None, "cuda-libraries"))
            continue
        found = requirement(line, rel, number, "requirements")
        if found:
            deps.append(found)
    return deps, unread


def toml_reader(version: tuple[int, ...] = tuple(sys.version_info)) -> ModuleType:
    """The TOML parser for this Python: tomllib from 3.11, the tomli package (a dependency of FakeGPU below 3.11)
    before. ImportError when neither is there, which the scan reports rather than reading no dependencies."""
    if version >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli


def read_pyproject(text: str, rel: str, reader: ModuleType | None = None
                   ) -> tuple[list[Dependency], list[Declared], list[Unread]]:
    try:
        reader = reader or toml_reader()
    except ImportError as exc:
        return [], [], [Unread(rel, 1, f"no TOML reader on this Python ({exc}); install tomli")]
    try:
        doc = reader.loads(text)
    except Exception as exc:  # TOMLDecodeError of whichever reader
        return [], [], [Unread(rel, 1, f"not valid TOML: {exc}")]
    deps: list[Dependency] = []
    scripts: list[Declared] = []
    project = _table(doc.get("project"))
    for spec in _list(project.get("dependencies")):
        if isinstance(spec, str) and (d := requirement(spec, rel, _line_of(text, spec), "pyproject")):
            deps.append(d)
    for group, specs in _table(project.get("optional-dependencies")).items():
        for spec in _list(specs):
            if isinstance(spec, str) and (d := requirement(spec, rel, _line_of(text, spec), "pyproject", group)):
                deps.append(d)
    for key, kind in (("scripts", "console-script"), ("gui-scripts", "gui-script")):
        for name, target in _table(project.get(key)).items():
            scripts.append(Declared(name, str(target), kind, rel, _line_of(text, f"{name} =", _line_of(text, name))))
    poetry = _table(_table(doc.get("tool")).get("poetry"))
    tables = [(None, _table(poetry.get("dependencies")))]
    tables += [(g, _table(_table(t).get("dependencies"))) for g, t in _table(poetry.get("group")).items()]
    for group, table in tables:
        for name, spec in table.items():
            if normalize(name) == "python":
                continue
            extras = ",".join(str(e) for e in _list(spec.get("extras"))) if isinstance(spec, dict) else ""
            deps.append(Dependency(normalize(name), f"{name} {spec}", rel, _line_of(text, f"{name} ="),
                                   "pyproject", group, gpu_kind(name, extras)))
    for name, target in _table(poetry.get("scripts")).items():
        if isinstance(target, str):
            scripts.append(Declared(name, target, "console-script", rel, _line_of(text, f"{name} =")))
    return deps, scripts, []


def _entry_point_lines(value: Any) -> list[tuple[str, str]]:
    """console_scripts as setup() takes them: a list of "name = module:func" strings or one such string per line."""
    items = value.splitlines() if isinstance(value, str) else value if isinstance(value, list) else []
    out = []
    for item in items:
        if isinstance(item, str) and "=" in item:
            name, target = item.split("=", 1)
            out.append((name.strip(), target.strip().split()[0] if target.strip() else ""))
    return out


def read_setup_py(tree: ast.Module, text: str, rel: str) -> tuple[list[Dependency], list[Declared], list[Unread]]:
    """setup()'s install_requires, extras_require and entry_points, where they are literals or names bound to
    literals at module level; anything computed is reported as not read."""
    bound: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = node.value
    deps: list[Dependency] = []
    scripts: list[Declared] = []
    unread: list[Unread] = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and (getattr(call.func, "id", None) == "setup"
                                                or getattr(call.func, "attr", None) == "setup")):
            continue
        for kw in call.keywords:
            if kw.arg not in ("install_requires", "extras_require", "entry_points"):
                continue
            node = bound.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
            try:
                value = ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                unread.append(Unread(rel, kw.value.lineno, f"setup({kw.arg}=...) is computed, not a literal: "
                                                           "not read"))
                continue
            if kw.arg == "install_requires":
                for spec in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(spec, str) and (d := requirement(spec, rel, _line_of(text, spec), "setup.py")):
                        deps.append(d)
            elif kw.arg == "extras_require" and isinstance(value, dict):
                for group, specs in value.items():
                    for spec in specs if isinstance(specs, (list, tuple)) else [specs]:
                        if isinstance(spec, str) and (d := requirement(spec, rel, _line_of(text, spec), "setup.py",
                                                                       str(group))):
                            deps.append(d)
            elif kw.arg == "entry_points" and isinstance(value, dict):
                for group, kind in (("console_scripts", "console-script"), ("gui_scripts", "gui-script")):
                    for name, target in _entry_point_lines(value.get(group, [])):
                        scripts.append(Declared(name, target, kind, rel, _line_of(text, name, kw.value.lineno)))
    return deps, scripts, unread


def read_setup_cfg(text: str, rel: str) -> tuple[list[Dependency], list[Declared], list[Unread]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        return [], [], [Unread(rel, 1, f"not a valid setup.cfg: {str(exc).splitlines()[0]}")]
    deps: list[Dependency] = []
    scripts: list[Declared] = []

    def listed(value: str) -> list[str]:
        return [v.strip() for v in re.split(r"[\n;]" if "\n" in value else r"\n", value)
                if v.strip() and not v.strip().startswith("#")]

    if parser.has_option("options", "install_requires"):
        for spec in listed(parser.get("options", "install_requires")):
            if d := requirement(spec, rel, _line_of(text, spec), "setup.cfg"):
                deps.append(d)
    if parser.has_section("options.extras_require"):
        for group, value in parser.items("options.extras_require"):
            for spec in listed(value):
                if d := requirement(spec, rel, _line_of(text, spec), "setup.cfg", group):
                    deps.append(d)
    if parser.has_section("options.entry_points"):
        for group, kind in (("console_scripts", "console-script"), ("gui_scripts", "gui-script")):
            if parser.has_option("options.entry_points", group):
                for name, target in _entry_point_lines(parser.get("options.entry_points", group)):
                    scripts.append(Declared(name, target, kind, rel, _line_of(text, name)))
    return deps, scripts, []


def read_entry_points_txt(text: str, rel: str) -> list[Declared]:
    """An installed (or built) distribution's entry_points.txt: INI, one `name = module:func` per line."""
    scripts = []
    section = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            name, target = (p.strip() for p in line.split("=", 1))
            scripts.append(Declared(name, target.split()[0] if target else "",
                                    "console-script" if section == "console_scripts" else "gui-script", rel, number))
    return scripts


def read_conda(text: str, rel: str) -> tuple[list[Dependency], list[Unread]]:
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        return [], [Unread(rel, 1, f"not valid YAML: {str(exc).splitlines()[0]}")]
    deps: list[Dependency] = []
    items = doc.get("dependencies") if isinstance(doc, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            name = re.split(r"[=<>!~ ]", item.split("::")[-1], maxsplit=1)[0]
            deps.append(Dependency(normalize(name), item, rel, _line_of(text, item), "conda", None, gpu_kind(name)))
        elif isinstance(item, dict) and isinstance(item.get("pip"), list):
            for spec in item["pip"]:
                if isinstance(spec, str) and (d := requirement(spec, rel, _line_of(text, spec), "conda", "pip")):
                    deps.append(d)
    return deps, []
