"""The repository's files as git would see them: `.gitignore` files (nested ones too, and `.git/info/exclude`)
are honoured through pathspec's GitIgnoreSpec, so the scan reads what the project tracks and not its build
output or virtual environments. Every file or folder left out is counted under a reason, with examples, so a
report can say what it did not look at."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

# Text files above this are not parsed (a generated 50 MB table says nothing about GPU use, and parsing it would
# dominate the scan); each one is reported with its size.
MAX_TEXT_BYTES = 2 << 20
EXAMPLES = 10  # per skip reason in the report; the counts are always complete

# What a file is to the scan, by name alone (reading is decided per kind).
_REQUIREMENTS = re.compile(r"^(.*[-_.])?requirements([-_.].*)?\.(txt|in)$|^constraints.*\.txt$", re.I)
_COMPOSE = re.compile(r"^(docker-)?compose([-.].*)?\.ya?ml$", re.I)
_DOCKERFILE = re.compile(r"^(Dockerfile|Containerfile)([-.].*)?$|.*\.(dockerfile|Dockerfile)$")
_CONDA = re.compile(r"^(environment|conda|env)([-_.].*)?\.ya?ml$", re.I)
_SO = re.compile(r"\.so(\.\d+)*$")
_DOC = re.compile(r"^(README|INSTALL|USAGE)(\.\w+)?$", re.I)


def kind_of(rel: str) -> str:
    """The scan's name for a file at repository-relative path `rel` (forward slashes)."""
    name = rel.rsplit("/", 1)[-1]
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if suffix == "py":
        return "python"
    if suffix == "ipynb":
        return "notebook"
    if suffix in ("cu", "cuh"):
        return "cuda-source"
    if suffix == "ptx":
        return "ptx"
    if suffix in ("cubin", "fatbin"):
        return "cuda-binary"
    if _SO.search(name):
        return "shared-object"
    if name == "pyproject.toml":
        return "pyproject"
    if name == "setup.cfg":
        return "setup-cfg"
    if name == "entry_points.txt" and rel.count("/") >= 1 and rel.split("/")[-2].endswith((".dist-info", ".egg-info")):
        return "entry-points"
    if _REQUIREMENTS.match(name) or (suffix in ("txt", "in") and rel.rpartition("/")[0].endswith("requirements")):
        return "requirements"
    if _DOCKERFILE.match(name):
        return "dockerfile"
    if _COMPOSE.match(name):
        return "compose"
    if suffix in ("yml", "yaml") and (rel.startswith(".github/workflows/") or name == ".gitlab-ci.yml"
                                      or rel.startswith(".circleci/") or name.startswith("azure-pipelines")):
        return "ci"
    if _CONDA.match(name):
        return "conda"
    if name in ("Makefile", "makefile", "GNUmakefile") or suffix == "mk" or suffix in ("sh", "bash"):
        return "script"
    if _DOC.match(name):
        return "doc"
    return "other"


@dataclass
class Skips:
    """Files and folders the scan did not read, by reason: ignored (.gitignore, git's own folder), link (a
    symbolic link to a folder, not followed), unreadable, binary, too-large, syntax-error, too-deep (nested beyond
    what Python's parser takes)."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict]] = field(default_factory=dict)

    def add(self, reason: str, path: str, **detail: object) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES:
            shown.append({"path": path, **detail})


@dataclass(frozen=True)
class File:
    rel: str  # forward slashes, relative to the root
    path: Path
    size: int
    kind: str


class _Ignores:
    """The .gitignore rules in force in one folder: its ancestors' and its own, each matched relative to the folder
    that holds it, the deepest decision winning (git's order). An entry is (base, prefix, spec): a path `rel` of
    the scan is matched as prefix + rel below base; prefix places the scan's root inside a folder above it."""

    def __init__(self, chain: tuple[tuple[str, str, pathspec.GitIgnoreSpec], ...] = ()) -> None:
        self.chain = chain

    def with_file(self, path: Path, base: str, prefix: str = "") -> _Ignores:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return self
        return _Ignores((*self.chain, (base, prefix, pathspec.GitIgnoreSpec.from_lines(lines))))

    def below(self, folder_rel: str, folder: Path) -> _Ignores:
        return self.with_file(folder / ".gitignore", folder_rel)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        decision = None
        for base, prefix, spec in self.chain:
            sub = prefix + (rel[len(base) + 1:] if base else rel)
            got = spec.check_file(sub + "/" if is_dir else sub).include
            if got is not None:
                decision = got
        return bool(decision)


def _root_ignores(root: Path) -> _Ignores:
    """The rules git applies at `root`: when it lies inside a work tree, the .git/info/exclude and .gitignore
    files from the work tree's top down to it, then root's own. A root that the work tree itself ignores (a
    virtual environment's site-packages) was asked for by name: only its own rules apply there."""
    top = next((d for d in (root, *root.parents) if (d / ".git").exists()), None)
    if top is None or top == root:
        base = _Ignores().with_file(root / ".git" / "info" / "exclude", "")
        return base.below("", root)
    parts = root.relative_to(top).parts
    # (folder relative to top, spec) for each rule file above root, to ask whether root itself is ignored
    above: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    chain = _Ignores()
    for i in range(len(parts) + 1):
        folder = "/".join(parts[:i])
        files = [top / ".git" / "info" / "exclude"] if i == 0 else []
        files.append(top / folder / ".gitignore")
        if i == len(parts):
            break
        for path in files:
            try:
                spec = pathspec.GitIgnoreSpec.from_lines(path.read_text(encoding="utf-8", errors="replace")
                                                         .splitlines())
            except OSError:
                continue
            above.append((folder, spec))
            chain = _Ignores((*chain.chain, ("", "/".join(parts[i:]) + "/", spec)))
        here = "/".join(parts[:i + 1])
        decision = None
        for base, spec in above:
            got = spec.check_file((here[len(base) + 1:] if base else here) + "/").include
            if got is not None:
                decision = got
        if decision:
            return _Ignores().below("", root)
    return chain.below("", root)


def walk(root: Path, skips: Skips) -> Iterator[File]:
    """Every file under `root` that .gitignore keeps, in a stable (sorted) order; what is left out goes to `skips`.
    Folder links are not followed (a link back up would loop); file links are read as the file they name."""
    stack: list[tuple[str, Path, _Ignores]] = [("", root, _root_ignores(root))]
    while stack:
        rel_dir, folder, ignores = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            skips.add("unreadable", rel_dir or ".", error=exc.strerror or str(exc))
            continue
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir()
                is_link = entry.is_symlink()
            except OSError as exc:
                skips.add("unreadable", rel, error=exc.strerror or str(exc))
                continue
            if is_dir:
                if entry.name == ".git":
                    skips.add("ignored", rel + "/", rule="git's own folder")
                elif ignores.ignored(rel, True):
                    skips.add("ignored", rel + "/", rule=".gitignore")
                elif is_link:
                    skips.add("link", rel + "/", target=os.readlink(entry.path))
                else:
                    subdirs.append((rel, Path(entry.path)))
                continue
            if ignores.ignored(rel, False):
                skips.add("ignored", rel, rule=".gitignore")
                continue
            try:
                size = entry.stat().st_size
            except OSError as exc:  # a dangling link, a file that went away
                skips.add("unreadable", rel, error=exc.strerror or str(exc))
                continue
            yield File(rel, Path(entry.path), size, kind_of(rel))
        for rel, path in reversed(subdirs):
            stack.append((rel, path, ignores.below(rel, path)))
