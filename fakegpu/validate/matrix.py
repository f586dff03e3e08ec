"""From a manifest to the cases to run: the axes' product with CI matrix `exclude`/`include` (GitHub Actions'
rules), times the manifest's cases, with `{placeholders}` filled in.

exclude drops each combination that has all of an entry's values; include then adds an entry's keys to every
combination whose axis values it matches without overwriting one, and becomes a combination of its own where it
matches none. Keys an include entry adds that are no axis (`board: Tesla T4`) are values for placeholders, so
an expectation can differ per profile.

Placeholders: `{axis}` for every value of the combination, and `{python}` (the interpreter running fakegpu),
`{case}` (the case's name), `{case_dir}` (a folder of the case's own under the run's output, for files it writes)
and `{manifest_dir}`. `{{` and `}}` are literal braces; `{3}` in a regular expression is no placeholder.
A string that is one placeholder alone takes the value's own type, so `eq: "{batch}"` compares numbers.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from fakegpu.profiles.matching import did_you_mean
from fakegpu.validate.manifest import DEFAULT_TIMEOUT_S, KeyPath, Manifest, ManifestError, key_path

# `fakegpu run`'s default, so a case runs as `fakegpu run` would run its command.
DEFAULT_MODE = "native"
BUILTINS = ("python", "case", "case_dir", "manifest_dir")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SLUG = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass(frozen=True)
class Case:
    """One command to run: a manifest case on one matrix combination."""

    id: str
    name: str
    values: dict[str, Any]  # the combination, include's extra keys too
    devices: str
    mode: str
    command: list[str]
    cwd: Path
    env: dict[str, str]
    timeout_s: float
    expect: dict[str, Any]
    case_dir: Path
    origin: str  # file:line of the manifest case it comes from, for messages
    requires: dict[str, Any] = field(default_factory=dict)  # placeholders filled in (requires.py)
    cwd_origin: str = ""  # file:line where its cwd is set (the case's or defaults'), for messages
    image: str = ""  # mode container: the image its command runs in


def combinations(axes: dict[str, list[Any]], include: Sequence[dict[str, Any]] = (),
                 exclude: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The matrix's combinations in order: the product of `axes` (first axis slowest), less `exclude`, plus
    `include`, as a CI matrix computes them."""
    names = list(axes)
    combos = [dict(zip(names, values, strict=True)) for values in product(*(axes[n] for n in names))]
    combos = [c for c in combos if not any(all(c.get(k) == v for k, v in e.items()) for e in exclude)]
    originals = [dict(c) for c in combos]
    for entry in include:
        on_axes = {k: v for k, v in entry.items() if k in axes}
        extra = {k: v for k, v in entry.items() if k not in axes}
        matched = False
        for combo, original in zip(combos, originals, strict=True):
            if all(original.get(k) == v for k, v in on_axes.items()):
                # Added keys may overwrite what an earlier include added, never an axis value.
                combo.update(extra)
                matched = True
        if not matched:
            combos.append(dict(entry))
            originals.append(dict(entry))
    return combos


def case_id(name: str, values: dict[str, Any], axes: Sequence[str]) -> str:
    """smi[profile=t4,batch=8]: the case and its axis values (keys include adds to a combination are not
    axes and stay out)."""
    shown = [f"{k}={values[k]}" for k in axes if k in values]
    if not any(k in values for k in axes):  # a combination include made on its own: all of it
        shown = [f"{k}={v}" for k, v in values.items()]
    return f"{name}[{','.join(shown)}]" if shown else name


def expand(manifest: Manifest, out_dir: Path) -> list[Case]:
    """Every case on every combination, in manifest order; ManifestError for an unknown placeholder or a bad
    regular expression once filled in."""
    axes = list(manifest.axes)
    cases: list[Case] = []
    seen: set[str] = set()
    problems: list[str] = []
    combos = combinations(manifest.axes, manifest.include, manifest.exclude)
    for values in combos:
        if "profile" not in values:  # an include entry that matched no combination and names no profile
            problems.append(f"{manifest.where(('matrix', 'include'))}: matrix.include: {values} matches no "
                            "combination, so it is one of its own, and it names no profile")
    if problems:
        raise ManifestError(problems)
    for spec in manifest.cases:
        for values in combos:
            settings, defaults = spec.settings, manifest.defaults
            mode = settings.mode or values.get("mode") or defaults.mode or DEFAULT_MODE
            cid = case_id(spec.name, values, axes)
            if settings.mode and "mode" in values:  # the case pins its mode: one run, whatever the axis says
                cid = case_id(spec.name, {**values, "mode": mode}, axes)
            if cid in seen:
                continue
            seen.add(cid)
            case_dir = out_dir / "cases" / _SLUG.sub("_", cid)
            known = {**values, "python": sys.executable, "case": spec.name, "case_dir": str(case_dir),
                     "manifest_dir": str(manifest.folder)}
            where = ("cases", spec.index)
            try:
                fill = _Filler(known, manifest, where)
                command = (shlex.split(spec.command) if isinstance(spec.command, str) else list(spec.command))
                command = [str(fill(a, ("command",))) for a in command]
                cwd = settings.cwd or defaults.cwd
                env = {**defaults.env, **settings.env}
                image = _container_checked(mode, settings.image or defaults.image, spec.expect, manifest, where)
                cases.append(Case(
                    id=cid, name=spec.name, values=values, devices=str(values["profile"]), mode=mode,
                    command=command,
                    cwd=(manifest.folder / str(fill(cwd, ("cwd",)))).resolve() if cwd else manifest.folder,
                    env={k: str(fill(v, ("env", k))) for k, v in env.items()},
                    timeout_s=settings.timeout_s or defaults.timeout_s or DEFAULT_TIMEOUT_S,
                    expect=_bounds_checked(fill(spec.expect, ("expect",)), manifest, where),
                    case_dir=case_dir,
                    origin=manifest.where(where),
                    requires=fill(spec.requires, ("requires",)),
                    cwd_origin=manifest.where((*where, "cwd") if settings.cwd else ("defaults", "cwd") if
                                              defaults.cwd else where),
                    image=str(fill(image, ("image",))) if image else "",
                ))
            except ManifestError as exc:
                problems.extend(exc.problems)
            except ValueError as exc:  # shlex: an unclosed quote
                problems.append(f"{manifest.where((*where, 'command'))}: {key_path((*where, 'command'))}: not a "
                                f"command line: {exc}")
    if problems:
        raise ManifestError(list(dict.fromkeys(problems)))  # once, not once per combination
    return cases


def _container_checked(mode: str, image: str | None, expect: dict[str, Any], manifest: Manifest,
                       where: KeyPath) -> str | None:
    """The image of a container case, which must have one and cannot hold memory expectations (its processes'
    reports stay in the container); an image elsewhere is for the combinations in mode container alone."""
    if mode != "container":
        return None
    if not image:
        raise ManifestError([f"{manifest.where(where)}: {key_path(where)}: mode container needs an image (set "
                             "`image` in the case or in defaults)"])
    wanted = [k for k in ("memory", "preflight") if k in expect]
    if wanted:
        path = (*where, "expect", wanted[0])
        raise ManifestError([f"{manifest.where(path)}: {key_path(path)}: memory and preflight expectations need mode "
                             "fakecuda or native (a container's processes report inside it)"])
    return image


def _bounds_checked(expect: dict[str, Any], manifest: Manifest, where: KeyPath) -> dict[str, Any]:
    """`expect` once its memory bounds are known to parse (after placeholders: "<= {budget}")."""
    from fakegpu.validate.checks import MEMORY_KEYS, memory_bound

    for key, text in expect.get("memory", {}).items():
        if key in MEMORY_KEYS:
            try:
                memory_bound(text)
            except ValueError as exc:
                path = (*where, "expect", "memory", key)
                raise ManifestError([f"{manifest.where(path)}: {key_path(path)}: {exc}"]) from None
    return expect


class _Filler:
    """Fills placeholders in strings, lists and mappings; a problem names the case, the key and the value."""

    def __init__(self, known: dict[str, Any], manifest: Manifest, where: KeyPath) -> None:
        self.known, self.manifest, self.where = known, manifest, where

    def __call__(self, value: Any, at: KeyPath) -> Any:
        if isinstance(value, dict):
            return {k: self(v, (*at, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, (*at, i)) for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        whole = _PLACEHOLDER.fullmatch(value)
        if whole and whole[1]:
            return self._lookup(whole[1], at)
        filled = _PLACEHOLDER.sub(lambda m: {"{{": "{", "}}": "}"}.get(m[0]) or str(self._lookup(m[1], at)), value)
        if any(k in at for k in ("matches", "stdout_matches", "stderr_matches")):
            try:
                re.compile(filled)
            except re.error as exc:
                self._fail(at, f"{filled!r} is not a regular expression: {exc}")
        return filled

    def _lookup(self, name: str, at: KeyPath) -> Any:
        if name not in self.known:
            names = sorted(k for k in self.known if k not in BUILTINS) + list(BUILTINS)
            hint = did_you_mean(name, names, quote=False, paren=False, shown={n: f"{{{n}}}" for n in names})
            self._fail(at, f"unknown placeholder {{{name}}}{hint} (known: {', '.join(names)}; "
                       "write {{ and }} for literal braces)")
        return self.known[name]

    def _fail(self, at: KeyPath, message: str) -> None:
        path = (*self.where, *at)
        raise ManifestError([f"{self.manifest.where(path)}: {key_path(path)}: {message}"])


def select(cases: Sequence[Case], patterns: Sequence[str]) -> list[Case]:
    """The cases whose id matches any of `patterns`: with * or ? a glob over the whole id (`smi[*t4*]`; brackets
    are literal, as ids have them), else a part of the id. No patterns: all."""
    if not patterns:
        return list(cases)
    globs = [re.compile(".*".join(".".join(re.escape(q) for q in p.split("?")) for p in pattern.split("*")))
             for pattern in patterns if any(c in pattern for c in "*?")]
    parts = [p for p in patterns if not any(c in p for c in "*?")]
    return [c for c in cases if any(g.fullmatch(c.id) for g in globs) or any(p in c.id for p in parts)]
