"""Workspace profiles: the device memory a CUDA process holds besides its tensors, per software stack.

The CUDA context (as created, and what lazy module loading adds at the first kernel launch and the first cuBLAS and
cuDNN run) and the cuBLAS / cuBLASLt workspaces PyTorch takes, with whether it holds them or frees them after each
call. The numbers live in workspace_profiles.yaml, each with its source; this module reads that file and a user's
own (same schema, entries first), picks for a stack (torch release, CUDA version, compute capability, architecture)
each figure from the most specific entry that matches, and says which entry applied and why.

The one model every part of FakeGPU uses: the estimators predict with it, fakecuda charges it to the fake device on
first use (a user's file through FAKEGPU_WORKSPACE_PROFILES), and native mode's libcuda has the built-in context
figures compiled in (tools/gen_contract.py writes them into fg_contract.h), so `fakegpu estimate-llm`, a fakecuda
run and a native run agree on the same overhead.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fakegpu import locations
from fakegpu.errors import CatalogError, ProblemList, UsageError, shorten
from fakegpu.profiles import documents
from fakegpu.profiles.documents import KeyPath, Lines
from fakegpu.sizes import parse_bytes

DATA = Path(__file__).with_name("workspace_profiles.yaml")
# The same entries as JSON, written by `make catalog` (fakegpu.profiles.compile) and read at run time: fakecuda runs in
# the user's interpreter, which need not have PyYAML.
COMPILED = Path(locations.COMPILED_CATALOG).with_name("workspace_profiles.json")
SCHEMA_PATH = Path(__file__).with_name("workspace_profiles.schema.json")
ENV_VARIABLE = "FAKEGPU_WORKSPACE_PROFILES"  # user files for fakecuda runs, separated by os.pathsep
SUFFIXES = (".yaml", ".yml", ".json")
BUILT_IN = "built-in"
MIB = 1 << 20

# The lazy parts of a context, in the order native mode numbers them (FGD_PART_* in native/cuda/driver/fgd.h).
LAZY_PARTS = ("first_launch", "cublas", "cudnn")
SIZE_FIGURES = ("context_created", *(f"context_{p}" for p in LAZY_PARTS), "cublas_workspace", "cublaslt_workspace")
FIGURES = (*SIZE_FIGURES, "workspace_policy", "cublaslt_shares_workspace")
POLICIES = ("held", "per_call")
BASES = ("source", "derived", "assumed")
MATCH_KEYS = ("torch", "cuda", "compute_capability", "architecture")
_LABELS = {"torch": "torch", "cuda": "CUDA", "compute_capability": "cc", "architecture": "architecture"}
# The estimators' GPU when no target profile is named (an A100's).
DEFAULT_COMPUTE_CAPABILITY = (8, 0)

Version = tuple[int, ...]


class WorkspaceProfileError(ProblemList, UsageError):
    """A workspace-profiles file that cannot be read or breaks the schema; one line per problem, file:line first."""

    code = "invalid-workspace-profiles"



# ---------------------------------------------------------------- versions and ranges

_NUMBERS = re.compile(r"\d+(?:\.\d+)*")
_CLAUSE = re.compile(r"\s*(==|!=|>=|<=|>|<)?\s*(\d+(?:\.\d+)*)\s*")
_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


# A version named for a stack is matched against ranges by its numbers, so anything after them that is not a
# release's own suffix ("2.x", "2.15.x") would be dropped unseen and the version read as a coarser one.
# torch: MAJOR.MINOR[.PATCH] as its wheels spell it (PEP 440: a0, rc1, .post1, .dev20250101, +cu130, +git...).
_TORCH_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?"
                            r"(?:\+[0-9A-Za-z]+(?:[._-][0-9A-Za-z]+)*)?")
_CUDA_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")
TORCH_ACCEPTED = ("MAJOR.MINOR in digits, optionally .PATCH and a wheel's suffix, e.g. 2.15, 2.15.0 or "
                  "2.11.0+cu130")
CUDA_ACCEPTED = "MAJOR.MINOR in digits, optionally .PATCH, e.g. 13.0, 12.8 or 12.8.1"


def version_numbers(text: str) -> Version:
    """The leading dotted numbers of a version: "2.11.0+cu130" -> (2, 11, 0), "13.0" -> (13, 0); () if none."""
    found = _NUMBERS.match(text.strip())
    return tuple(int(n) for n in found[0].split(".")) if found else ()


@dataclass(frozen=True)
class Range:
    """Comma-separated clauses `[op]VERSION`, all of which must hold. A version is compared at the clause's
    precision: "<2.15" holds for 2.14.3 and not for 2.15.1, a bare "12" (==) for every 12.x."""

    text: str
    clauses: tuple[tuple[str, Version], ...]

    @classmethod
    def parse(cls, text: str) -> Range:
        clauses = []
        for part in text.split(","):
            found = _CLAUSE.fullmatch(part)
            if found is None:
                raise ValueError(f"{text!r} is not a version range; expected clauses like >=2.15, <13 or 9.0, "
                                 "separated by commas")
            clauses.append((found[1] or "==", tuple(int(n) for n in found[2].split("."))))
        return cls(text, tuple(clauses))

    def __contains__(self, version: Version) -> bool:
        for op, bound in self.clauses:
            at = (tuple(version) + (0,) * len(bound))[:len(bound)]
            if not _COMPARE[op](at, bound):
                return False
        return True


# ---------------------------------------------------------------- the stack

@dataclass(frozen=True)
class Stack:
    """The software and GPU a figure is looked up for. `origins` says where each of torch and cuda came from."""

    torch: str
    cuda: str
    compute_capability: tuple[int, int]
    architecture: str | None = None
    origins: tuple[tuple[str, str], ...] = ()

    def values(self) -> dict[str, Version | str | None]:
        return {"torch": version_numbers(self.torch), "cuda": version_numbers(self.cuda),
                "compute_capability": self.compute_capability, "architecture": self.architecture}

    def shown(self, key: str) -> str:
        if key == "compute_capability":
            return "{}.{}".format(*self.compute_capability)
        return str(getattr(self, key))

    def to_dict(self) -> dict[str, Any]:
        origins = dict(self.origins)
        return {"torch": self.torch, "cuda": self.cuda, "compute_capability": self.shown("compute_capability"),
                "architecture": self.architecture,
                "from": {k: origins.get(k, "named") for k in ("torch", "cuda", "compute_capability")}}


def _cuda_of_torch(torch_version: str) -> str | None:
    """CUDA major.minor a PyPI torch wheel was built for, from its local tag: 2.11.0+cu130 -> 13.0."""
    found = re.search(r"\+cu(\d+)(\d)\b", torch_version)
    return f"{int(found[1])}.{found[2]}" if found else None


@cache
def _architectures() -> dict[tuple[int, int], str]:
    """compute capability -> architecture, as the catalog's boards have them (each capability has one)."""
    from fakegpu.profiles.catalog import load_catalog

    return {p.compute_capability: p.architecture for p in load_catalog().select()}


def architecture_of(compute_capability: tuple[int, int]) -> str | None:
    return _architectures().get(tuple(compute_capability))


# ---------------------------------------------------------------- entries

@dataclass(frozen=True)
class Figure:
    name: str
    value: int | str | bool  # bytes for sizes, a policy word, a flag
    basis: str  # source, derived or assumed
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "basis": self.basis, self.basis: self.text}


@dataclass(frozen=True)
class Entry:
    """One software stack: what it matches and the figures it gives."""

    name: str
    match: dict[str, str]
    figures: dict[str, Figure]
    origin: str  # BUILT_IN or the user file's path
    line: int
    order: int  # position among every entry loaded: the later of two equally specific entries wins
    description: str = ""
    ranges: dict[str, Range] = field(default_factory=dict)

    @property
    def user(self) -> bool:
        return self.origin != BUILT_IN

    @property
    def specificity(self) -> int:
        return len(self.match)

    @property
    def where(self) -> str:
        return BUILT_IN if not self.user else f"{self.origin}:{self.line}"

    def reasons(self, stack: Stack) -> list[str] | None:
        """Why the entry matches `stack` (one phrase per match key), or None when it does not."""
        values = stack.values()
        out = []
        for key in MATCH_KEYS:
            if key not in self.match:
                continue
            if key == "architecture":
                if values["architecture"] != self.match[key]:
                    return None
            elif values[key] not in self.ranges[key]:
                return None
            out.append(f"{_LABELS[key]} {stack.shown(key)} in {self.match[key]!r}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.where, "description": self.description, "match": dict(self.match),
                "figures": {k: f.to_dict() for k, f in self.figures.items()}}


@dataclass(frozen=True)
class Applied:
    """The figure a stack gets, the entry it came from, and why that entry."""

    figure: Figure
    entry: Entry
    why: str
    over: tuple[str, ...]  # the other matching entries that give this figure, passed over

    def to_dict(self) -> dict[str, Any]:
        return {**self.figure.to_dict(), "entry": self.entry.name, "origin": self.entry.where, "why": self.why,
                "over": list(self.over)}


@dataclass(frozen=True)
class Overheads:
    """Every figure for one stack. Sizes in bytes."""

    stack: Stack
    applied: Mapping[str, Applied]

    def value(self, name: str) -> Any:
        return self.applied[name].figure.value

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.stack.compute_capability

    def context_bytes(self) -> int:
        """What a CUDA context holds once it exists, before any kernel runs (lazy module loading on)."""
        return self.value("context_created")

    def lazy_bytes(self, part: str) -> int:
        """What the context grows by at its first kernel launch (`first_launch`) or when a library's kernels first
        run (`cublas`, `cudnn`)."""
        if part not in LAZY_PARTS:
            raise KeyError(f"no lazy part {part!r}; the parts are {', '.join(LAZY_PARTS)}")
        return self.value(f"context_{part}")

    def non_pytorch_bytes(self, *, cudnn: bool = False) -> int:
        """The context of a PyTorch process that has launched kernels and run cuBLAS (every model does), and cuDNN
        if it ran convolutions: what nvidia-smi shows for the process beyond `memory_reserved()`."""
        parts = ["first_launch", "cublas"] + (["cudnn"] if cudnn else [])
        return self.context_bytes() + sum(self.lazy_bytes(p) for p in parts)

    def cublas_workspace_bytes(self) -> int:
        """cuBLAS workspace PyTorch takes from its caching allocator for a GEMM (CUBLAS_WORKSPACE_CONFIG unset)."""
        return self.value("cublas_workspace")

    def cublaslt_workspace_bytes(self) -> int:
        """cuBLASLt's workspace (CUBLASLT_WORKSPACE_SIZE unset)."""
        return self.value("cublaslt_workspace")

    @property
    def workspace_policy(self) -> str:
        """`held`: torch keeps each workspace per (handle, stream), whatever TORCH_CUBLAS_WORKSPACE_CACHE says;
        `per_call`: it frees it after each call unless TORCH_CUBLAS_WORKSPACE_CACHE=1."""
        return self.value("workspace_policy")

    @property
    def cublaslt_shares_workspace(self) -> bool:
        """Whether cuBLASLt uses the cuBLAS workspace when TORCH_CUBLASLT_UNIFIED_WORKSPACE is unset."""
        return self.value("cublaslt_shares_workspace")

    def user_entries(self) -> list[str]:
        return sorted({a.entry.name for a in self.applied.values() if a.entry.user})

    def to_dict(self) -> dict[str, Any]:
        """The `workspace-profile` report (fakegpu/reports/schemas/workspace-profile.schema.json)."""
        from fakegpu.reports import schema_id

        return {"schema": schema_id("workspace-profile"), "stack": self.stack.to_dict(),
                "figures": {k: self.applied[k].to_dict() for k in FIGURES},
                "non_pytorch_bytes": self.non_pytorch_bytes()}


# ---------------------------------------------------------------- the set of entries


class WorkspaceProfiles:
    """The built-in entries and a user's, in the order they were loaded, with the lookups over them."""

    def __init__(self, entries: Sequence[Entry], default_stack: Mapping[str, tuple[str, str]],
                 files: Sequence[Path] = ()) -> None:
        self.entries = list(entries)
        self.default_stack = dict(default_stack)  # key -> (value, where it was set)
        self.files = tuple(files)
        self._resolved: dict[Stack, Overheads] = {}

    def with_files(self, files: Sequence[str | Path]) -> WorkspaceProfiles:
        """These profiles and the entries of `files` (each checked against the schema), which come before the
        built-in ones; a later file's default_stack replaces an earlier one's."""
        entries, defaults = list(self.entries), dict(self.default_stack)
        for path in map(Path, files):
            found, stack = read_file(path, first_order=len(entries))
            entries.extend(found)
            defaults.update({k: (v, f"the default stack of {path}") for k, v in stack.items()})
        return WorkspaceProfiles(entries, defaults, (*self.files, *map(Path, files)))

    def stack(self, compute_capability: tuple[int, int] | None = None, *, torch: str | None = None,
              cuda: str | None = None, architecture: str | None = None) -> Stack:
        """The stack for a GPU of `compute_capability` (default: the estimators' A100), with the torch and CUDA
        versions named, else CUDA from torch's wheel tag (+cu130), else the files' default_stack."""
        for what, value, pattern, accepted in (("torch", torch, _TORCH_VERSION, TORCH_ACCEPTED),
                                               ("CUDA", cuda, _CUDA_VERSION, CUDA_ACCEPTED)):
            if value is not None and not pattern.fullmatch(str(value).strip()):
                default = self.default_stack.get(what.lower(), (None,))[0]
                also = f"; the default stack has {what} {default}" if default else ""
                raise UsageError(f"{what} version {shorten(str(value))} is not a version; accepted: {accepted}{also}")
        origins = []
        if torch is None:
            torch, where = self.default_stack["torch"]
            origins.append(("torch", where))
        if cuda is None:
            tagged = _cuda_of_torch(torch)
            if tagged is not None:
                cuda = tagged
                origins.append(("cuda", f"torch {torch}'s wheel tag"))
            else:
                cuda, where = self.default_stack["cuda"]
                origins.append(("cuda", where))
        if compute_capability is None:
            compute_capability = DEFAULT_COMPUTE_CAPABILITY
            origins.append(("compute_capability", "the estimators' default GPU"))
        cc = (int(compute_capability[0]), int(compute_capability[1]))
        return Stack(str(torch), str(cuda), cc, architecture or architecture_of(cc), tuple(origins))

    def resolve(self, stack: Stack) -> Overheads:
        """Each figure from the entry that matches `stack` and gives it: a user's before the built-in ones, then
        the most specific, then the later. CatalogError when no entry gives a figure."""
        found = self._resolved.get(stack)
        if found is None:
            found = self._resolved[stack] = Overheads(stack, {name: self._pick(name, stack) for name in FIGURES})
        return found

    def overheads(self, compute_capability: tuple[int, int] | None = None, *, torch: str | None = None,
                  cuda: str | None = None, architecture: str | None = None) -> Overheads:
        return self.resolve(self.stack(compute_capability, torch=torch, cuda=cuda, architecture=architecture))

    def _pick(self, name: str, stack: Stack) -> Applied:
        matching = [(e, r) for e in self.entries if name in e.figures and (r := e.reasons(stack)) is not None]
        if not matching:
            raise CatalogError(f"workspace profiles: no entry gives {name} for torch {stack.torch}, CUDA "
                               f"{stack.cuda}, compute capability {stack.shown('compute_capability')}")
        matching.sort(key=lambda m: (m[0].user, m[0].specificity, m[0].order), reverse=True)
        entry, reasons = matching[0]
        why = ", ".join(reasons) if reasons else "every stack"
        if entry.user:
            why += "; a user's entry"
        elif len(matching) > 1:
            why += f"; most specific of {len(matching)}"
        return Applied(entry.figures[name], entry, why, tuple(f"{e.name} ({e.where})" for e, _ in matching[1:]))


# ---------------------------------------------------------------- reading files


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def compiled_text() -> str:
    """workspace_profiles.yaml as the JSON the package ships (COMPILED)."""
    import yaml

    return json.dumps(yaml.safe_load(DATA.read_text(encoding="utf-8")), indent=1, sort_keys=True) + "\n"


@cache
def builtin() -> WorkspaceProfiles:
    """The built-in entries (workspace_profiles.yaml). Trusted as shipped: tests and `fakegpu workspace-profiles
    validate` check it against the schema (check_builtin); here only its figures are read."""
    doc = json.loads(COMPILED.read_text(encoding="utf-8"))
    entries, problems = _entries(doc, BUILT_IN, {}, 0)
    if problems:
        raise CatalogError(f"{DATA} is broken", [m for _, m in problems])
    defaults = {k: (str(v), f"the default stack of {DATA.name}")
                for k, v in doc["default_stack"].items()}
    return WorkspaceProfiles(entries, defaults)


def load(files: Sequence[str | Path] = ()) -> WorkspaceProfiles:
    """The built-in entries and those of `files`, which come first: a user's entry that matches a stack gives its
    figures before any built-in entry; among the user's, the most specific, then the later (file, then line)."""
    return builtin().with_files(files) if files else builtin()


def files_from_env(environ: Mapping[str, str] | None = None) -> list[Path]:
    value = (os.environ if environ is None else environ).get(ENV_VARIABLE, "")
    return [Path(p) for p in value.split(os.pathsep) if p.strip()]


def from_env(environ: Mapping[str, str] | None = None) -> WorkspaceProfiles:
    """The profiles a fakecuda process uses: the built-in ones and the files FAKEGPU_WORKSPACE_PROFILES names."""
    return load(files_from_env(environ))


def read_file(path: Path, first_order: int = 0) -> tuple[list[Entry], dict[str, str]]:
    """A user's file: its entries and default_stack, checked against the schema and the rules it cannot say;
    WorkspaceProfileError naming every problem by file:line."""
    try:
        doc, lines = documents.parse(path, documents.read_text(path, "workspace-profiles file", SUFFIXES))
    except documents.DocumentProblems as exc:
        raise WorkspaceProfileError(exc.problems) from None
    try:
        problems = _schema_problems(doc)
    except ImportError:
        # fakecuda reads the file in the user's interpreter, which need not have jsonschema (`fakegpu run` checked
        # the file before the child started): the rules below still hold, and a shape they cannot read is named
        return _entries_unchecked(path, doc, lines, first_order)
    entries: list[Entry] = []
    if not problems:
        entries, problems = _entries(doc, str(path), lines, first_order)
    if problems:
        raise WorkspaceProfileError(documents.located(path, lines, problems))
    return entries, {k: str(v) for k, v in (doc.get("default_stack") or {}).items()}


def _entries_unchecked(path: Path, doc: Any, lines: Lines, first_order: int
                       ) -> tuple[list[Entry], dict[str, str]]:
    try:
        entries, problems = _entries(doc, str(path), lines, first_order)
        stack = {k: str(v) for k, v in (doc.get("default_stack") or {}).items()}
    except (KeyError, TypeError, AttributeError, ValueError):
        raise WorkspaceProfileError([
            f"{path}: not a workspace-profiles file this Python can read, and it has no jsonschema ({sys.executable})"
            f" to say where; `fakegpu workspace-profiles validate {path}` names each problem"]) from None
    if problems:
        raise WorkspaceProfileError(documents.located(path, lines, problems))
    return entries, stack


def check_builtin() -> list[str]:
    """Problems with the built-in file: the schema, the rules, and a figure missing for a compute capability of the
    catalog (each must resolve for every board FakeGPU can be)."""
    try:
        read_file(DATA)
    except WorkspaceProfileError as exc:
        return exc.problems
    profiles = builtin()
    out = []
    for cc in sorted(_architectures()):
        try:
            profiles.overheads(cc)
        except CatalogError as exc:
            out.append(f"{DATA}: {exc.message}")
    return out


def _schema_problems(doc: Any) -> list[tuple[KeyPath, str]]:
    import jsonschema

    out: list[tuple[KeyPath, str]] = []
    for error in jsonschema.Draft202012Validator(schema()).iter_errors(doc):
        path: KeyPath = tuple(error.absolute_path)
        if error.validator == "pattern":  # say what the text should look like, not the regular expression
            out.append((path, f"{documents.shown(error.instance)} is not accepted; expected "
                              f"{error.schema.get('description', 'another text')}"))
        elif error.validator == "const":
            out.append((path, f"{documents.shown(error.instance)} is not accepted; expected {error.schema['const']!r}"))
        elif error.validator == "minProperties":
            out.append((path, "must not be empty"))
        else:
            out.extend(documents.describe(error))
    return out


def _entries(doc: dict[str, Any], origin: str, lines: Lines, first_order: int
             ) -> tuple[list[Entry], list[tuple[KeyPath, str]]]:
    """The entries of a document the schema accepts, and the problems the schema cannot see."""
    entries, problems = [], []
    seen: dict[str, int] = {}
    for i, raw in enumerate(doc["entries"]):
        at: KeyPath = ("entries", i)
        name = raw["name"]
        if name in seen:
            problems.append(((*at, "name"), f"{name!r} names entry {seen[name]} already; names must differ"))
        seen.setdefault(name, i)
        match = {k: str(v) for k, v in (raw.get("match") or {}).items()}
        ranges = {}
        for key, text in match.items():
            if key != "architecture":
                try:
                    ranges[key] = Range.parse(text)
                except ValueError as exc:
                    problems.append(((*at, "match", key), str(exc)))
        figures = {}
        for fname, spec in raw["figures"].items():
            figure, found = _figure(fname, spec)
            problems.extend(((*at, "figures", fname, *where), message) for where, message in found)
            if figure is not None:
                figures[fname] = figure
        entries.append(Entry(name, match, figures, origin, lines.get(at, 0), first_order + i,
                             raw.get("description", ""), ranges))
    return entries, problems


def _figure(name: str, spec: dict[str, Any]) -> tuple[Figure | None, list[tuple[KeyPath, str]]]:
    bases = [b for b in BASES if b in spec]
    if len(bases) != 1:
        given = f"; it gives {' and '.join(bases)}" if bases else ""
        return None, [((), f"say where the figure comes from with one of {', '.join(BASES)}{given}")]
    value = spec["value"]
    if name in SIZE_FIGURES:
        try:
            value = parse_bytes(value)
        except ValueError as exc:
            return None, [(("value",), str(exc))]
    return Figure(name, value, bases[0], " ".join(str(spec[bases[0]]).split())), []


# ---------------------------------------------------------------- the calls the code makes, built-in data


def cuda_context_bytes(compute_capability: tuple[int, int], *, torch: str | None = None,
                       cuda: str | None = None) -> int:
    """Device memory a CUDA context holds once it exists, before any kernel runs (built-in figures; the default
    stack's torch and CUDA unless named)."""
    return builtin().overheads(compute_capability, torch=torch, cuda=cuda).context_bytes()


def lazy_context_bytes(compute_capability: tuple[int, int], part: str, *, torch: str | None = None,
                       cuda: str | None = None) -> int:
    """What the context grows by at its first kernel launch (`first_launch`) or when cuBLAS or cuDNN first run."""
    return builtin().overheads(compute_capability, torch=torch, cuda=cuda).lazy_bytes(part)


def non_pytorch_bytes(compute_capability: tuple[int, int], *, cudnn: bool = False, torch: str | None = None,
                      cuda: str | None = None) -> int:
    """The context of a PyTorch process that ran kernels and cuBLAS (and cuDNN when `cudnn`)."""
    return builtin().overheads(compute_capability, torch=torch, cuda=cuda).non_pytorch_bytes(cudnn=cudnn)


def cublas_workspace_bytes(compute_capability: tuple[int, int], *, torch: str | None = None,
                           cuda: str | None = None) -> int:
    """cuBLAS workspace PyTorch takes from its caching allocator for a GEMM (CUBLAS_WORKSPACE_CONFIG unset)."""
    return builtin().overheads(compute_capability, torch=torch, cuda=cuda).cublas_workspace_bytes()
