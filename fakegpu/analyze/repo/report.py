"""From a Scan to the analyze-repo report: the entry points (declared, run, referenced, notebooks, or given), the
import graph each one reaches, its verdict with the chain of evidence behind it, and the repository's summary."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from fakegpu.analyze.repo.modules import chain, reach
from fakegpu.analyze.repo.python_scan import LIBRARIES, PYTORCH_KINDS, Site
from fakegpu.analyze.repo.scan import Scan
from fakegpu.analyze.repo.verdict import KINDS, PATHS, Launch, command, site_path, worse
from fakegpu.reports import schema_id

SCHEMA = schema_id("analyze-repo")
_DISTRIBUTED_LAUNCHERS = ("torchrun", "deepspeed", "accelerate launch")


@dataclass
class Entry:
    path: str
    name: str
    launch: Launch
    sources: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _where(scan: Scan, path: str, line: int | None) -> dict[str, Any]:
    """A location; in a notebook the line becomes the code cell's number and the line within it."""
    out: dict[str, Any] = {"path": path, "line": line}
    starts = scan.cells.get(path)
    if starts and line:
        cell = max(i for i, s in enumerate(starts) if s <= line) if starts[0] <= line else 0
        out = {"path": path, "line": line - starts[cell] + 1, "cell": cell + 1}
    return out


def _launch_for(scan: Scan, path: str) -> Launch:
    if path.endswith(".ipynb"):
        return Launch(["jupyter", "nbconvert", "--to", "notebook", "--execute", path])
    name = scan.index.name_of.get(path, "")
    folder = path.rpartition("/")[0]
    if "." in name and scan.index.root_of.get(path) != folder:  # inside a package: relative imports need -m
        return Launch(["python", "-m", name.removesuffix(".__main__")])
    return Launch(["python", path])


def _defines(scan: Scan, path: str, name: str) -> bool:
    facts = scan.python.get(path)
    if facts is None:
        return True  # not Python we read: nothing to say
    if facts.parsed:
        return name in facts.names or "*" in facts.names
    try:  # read by pattern only: look for the definition in the text
        text = (scan.root / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    return re.search(rf"^(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]|import.*\b"
                     rf"{re.escape(name)}\b", text, re.M) is not None


def find_entries(scan: Scan) -> tuple[dict[str, Entry], list[dict[str, Any]], list[dict[str, Any]]]:
    """Entry points by file, the declared ones that name no module in the tree, and the `__main__` blocks that
    are not entry points (test runners, empty blocks), with why."""
    entries: dict[str, Entry] = {}
    unresolved: list[dict[str, Any]] = []
    not_entries: list[dict[str, Any]] = []

    def add(path: str, name: str, launch: Launch, source: dict[str, Any]) -> Entry:
        entry = entries.setdefault(path, Entry(path, name, launch))
        entry.sources.append(source)
        if launch.distributed and not entry.launch.distributed:
            entry.launch = launch
        return entry

    for d in scan.declared:
        module, _, func = d.target.partition(":")
        module = module.strip()
        func = func.split("[", 1)[0].strip()
        found = scan.index.resolve(module)
        declared = {"how": d.kind, "path": d.path, "line": d.line, "detail": f"{d.name} = {d.target}"}
        if not found:
            unresolved.append({**declared, "reason": f"module {module} is not in the tree"})
            continue
        entry = add(found, d.name, Launch([d.name]), declared)
        if func and not _defines(scan, found, func.split(".", 1)[0]):
            entry.notes.append(f"{d.name}: {module} defines no {func} at top level")
    for path, facts in scan.python.items():
        if path.endswith("__main__.py"):
            add(path, scan.index.name_of.get(path, path).removesuffix(".__main__"), _launch_for(scan, path),
                {"how": "main-module", "path": path, "line": 1, "detail": "run with python -m"})
        elif path.endswith(".ipynb"):
            add(path, path, _launch_for(scan, path), {"how": "notebook", "path": path, "line": None,
                                                      "detail": "code cells"})
        elif facts.main is not None:
            main = facts.main
            where = {"path": path, "line": main.line}
            if main.test_runner:
                not_entries.append({**where, "reason": "its __main__ block only starts a test runner"})
            elif not main.runs:
                not_entries.append({**where, "reason": "its __main__ block does nothing"})
            else:
                add(path, path, _launch_for(scan, path), {**where, "how": "main-block",
                                                          "detail": 'if __name__ == "__main__":'})
    files = set(scan.all_files)
    for ref in scan.commands:
        if ref.module:
            found = scan.index.resolve(ref.module) or scan.index.resolve(f"{ref.module}.__main__")
        else:
            folder = ref.path.rpartition("/")[0]
            script = (ref.script or "").removeprefix("./")
            found = next((c for c in (f"{folder}/{script}" if folder else script, script) if c in files), None)
        if not found or found not in scan.python:
            continue
        target = ["-m", ref.module] if ref.module else [found]
        launcher = ref.launcher.split() if ref.launcher != "torchrun" else ["torchrun", "--nproc-per-node", "2"]
        if launcher[0].startswith("python"):
            launcher = ["python"]
        launch = Launch([*launcher, *target], distributed=ref.launcher in _DISTRIBUTED_LAUNCHERS)
        add(found, found, launch, {"how": "command", "path": ref.path, "line": ref.line,
                                   "detail": f"{ref.launcher} {' '.join(target)}", "gpu_image": ref.in_gpu_image})
    return entries, unresolved, not_entries


Edges = dict[str, dict[str, "int | None"]]  # file -> {file it imports: line of that import (None: its package)}


def _edges(scan: Scan) -> tuple[Edges, Edges]:
    """The import graph, and its firm part: the imports that run whenever their module does (not inside a
    function, a try or an if)."""
    edges: Edges = {}
    firm: Edges = {}
    for path, facts in scan.python.items():
        seen: dict[str, int | None] = {}
        always: dict[str, int | None] = {}
        name = scan.index.name_of.get(path, "")
        if "." in name:  # a module in a package runs its packages' __init__ first, under any import or -m
            for target in scan.index.targets(name.rpartition(".")[0], (), path):
                seen[target] = always[target] = None
        for imp in facts.imports:
            for target in scan.index.targets(imp.module, imp.names, path):
                if target != path:
                    seen.setdefault(target, imp.line)
                    if not imp.lazy:
                        always.setdefault(target, imp.line)
        edges[path] = seen
        firm[path] = always
    return edges, firm


def _reexported_optional(scan: Scan, site: Site, path: str) -> Site:
    """A site whose name another module of the tree binds only optionally (`try: import triton` there, `from
    .compat import triton` here) is optional too."""
    if site.optional or not site.origin or site.kind in PYTORCH_KINDS:
        return site
    module, _, name = site.origin.rpartition(".")
    source = scan.index.resolve(module, path)
    facts = scan.python.get(source) if source else None
    if facts is not None and name in facts.deferred:
        return Site(site.kind, site.detail, site.line, True, site.origin)
    return site


def _shadowed(scan: Scan, site: Site, path: str) -> bool:
    """A library site whose module is the tree's own (a `kernels.py` beside the script is not Hugging Face's
    `kernels`, a `triton/` folder of the project is not Triton)."""
    return site.top in LIBRARIES and scan.index.resolve(site.top, path) is not None


def _sites_of(scan: Scan) -> dict[str, list[tuple[str, str, Site]]]:
    """Per file: (path, judged kind, site) for every site, plus a reached prebuilt CUDA module as one site."""
    out: dict[str, list[tuple[str, str, Site]]] = {}
    for path, facts in scan.python.items():
        out[path] = [(*site_path(s.kind, s.detail), _reexported_optional(scan, s, path)) for s in facts.sites
                     if not _shadowed(scan, s, path)]
    for path, native in scan.extension_modules.items():
        out[path] = [("native", "prebuilt-cuda", Site("prebuilt-cuda", native.detail, 1))]
    return out


def _reason(scan: Scan, kind: str, path_: str, count: int, first: tuple[str, Site], parent: dict,
            edges: Edges, optional: bool) -> dict[str, Any]:
    file, site = first
    hops = chain(parent, file)
    # each file of the chain with the line that imports the next one ("pkg/a.py:12"), the site's file last
    via = [f"{a}:{edges[a][b]}" if edges.get(a, {}).get(b) else a for a, b in itertools.pairwise(hops)]
    return {"kind": kind, "path": path_, "why": KINDS.get(kind, (path_, kind))[1], "count": count,
            "site": {**_where(scan, file, site.line), "detail": site.detail}, "optional": optional,
            "via": [*via, file]}


def judge(scan: Scan, entry: Entry, edges: tuple[Edges, Edges],
          sites: dict[str, list[tuple[str, str, Site]]], containers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    parent, bounded = reach(entry.path, edges[0])
    # A library's site in a module reached only through conditional imports (try, if, inside a function) runs
    # only on some installations or paths: optional, as a conditional site in the entry's own file would be.
    firm, _ = reach(entry.path, edges[1])
    required: dict[str, list] = {}  # kind -> [count, first (file, site), path]
    optional: dict[str, list] = {}
    for file in parent:  # breadth-first order: the first site of a kind is the nearest one
        for path_, kind, site in sites.get(file, ()):
            conditional = site.optional or (file not in firm and site.kind not in PYTORCH_KINDS)
            bucket = optional if conditional else required
            got = bucket.setdefault(kind, [0, (file, site), path_])
            got[0] += 1
    verdict = "cpu"
    for _count, _first, path_ in required.values():
        verdict = worse(verdict, path_)
    reasons = [_reason(scan, kind, p, n, first, parent, edges[0], False) for kind, (n, first, p) in required.items()]
    reasons += [_reason(scan, kind, p, n, first, parent, edges[0], True) for kind, (n, first, p) in optional.items()
                if kind not in required and p != "cpu"]
    container = next((containers[s["path"]] for s in entry.sources if s.get("gpu_image") and s["path"] in containers),
                     None)
    if container and verdict != "real-gpu":
        verdict = "container"
        why = ("started by a Dockerfile on a CUDA base image: run the image under FakeGPU's runtime"
               if container["kind"] == "cuda-base-image" else
               "started by a compose service that reserves GPUs: FakeGPU's hook serves the reservation")
        reasons.append({"kind": container["kind"], "path": "container", "why": why, "count": 1,
                        "site": {"path": container["path"], "line": container["line"], "detail": container["detail"]},
                        "optional": False})
    reasons.sort(key=lambda r: (r["optional"], -PATHS.index(r["path"]), r["kind"]))
    cmd, meaning = command(verdict, entry.launch, container)
    optional_worse = [r for r in reasons if r["optional"] and PATHS.index(r["path"]) > PATHS.index(verdict)]
    notes = list(entry.notes)
    if optional_worse:
        notes.append("with its optional packages installed it reaches " + ", ".join(
            sorted({r["kind"] for r in optional_worse})) + ": that path needs " + max(
            (r["path"] for r in optional_worse), key=PATHS.index))
    return {"name": entry.name, "path": entry.path, "module": scan.index.name_of.get(entry.path),
            "declared_by": entry.sources, "verdict": verdict, "command": cmd, "meaning": meaning,
            "reasons": reasons, "reached_modules": len(parent), "bounded": bounded, "notes": notes}


def build(scan: Scan, given: list[str] | None = None) -> dict[str, Any]:
    entries, unresolved, not_entries = find_entries(scan)
    if given:
        chosen = {}
        for path in given:
            chosen[path] = entries.get(path) or Entry(path, path, _launch_for(scan, path))
            chosen[path].sources.append({"how": "given", "path": path, "line": None, "detail": "--entry"})
        entries = chosen
    edges = _edges(scan)
    sites = _sites_of(scan)
    containers = {}
    for i in scan.infra:  # the first GPU definition of each Dockerfile or compose file
        if i.kind in ("cuda-base-image", "compose-gpu") and i.path not in containers:
            containers[i.path] = {"kind": i.kind, "path": i.path, "line": i.line, "detail": i.detail}
    judged = [judge(scan, e, edges, sites, containers) for e in sorted(entries.values(), key=lambda e: e.path)]
    all_sites = [{"kind": kind, "path_needed": p, **_where(scan, file, s.line), "detail": s.detail,
                  "optional": s.optional} for file, items in sites.items() for p, kind, s in items]
    return {
        "schema": SCHEMA,
        "root": str(scan.root),
        "scanned": {"files": scan.files, "bytes": scan.bytes, "by_kind": dict(sorted(scan.by_kind.items())),
                    "python_parsed": scan.parsed, "python_pattern_read": scan.pattern_read,
                    "seconds": round(scan.seconds, 3)},
        "skipped": {reason: {"count": n, "examples": scan.skips.examples[reason]}
                    for reason, n in sorted(scan.skips.counts.items())},
        "entries": judged,
        "unresolved_entries": unresolved,
        "not_entries": not_entries,
        "sites": all_sites,
        "native": [{"path": n.path, "kind": n.kind, "detail": n.detail} for n in scan.native],
        "dependencies": _dependencies(scan),
        "infrastructure": [{"kind": i.kind, "detail": i.detail, "path": i.path, "line": i.line} for i in scan.infra],
        "unread": [{"path": u.path, "line": u.line, "reason": u.reason} for u in scan.unread],
        "summary": _summary(scan, judged, all_sites),
    }


def _dependencies(scan: Scan) -> list[dict[str, Any]]:
    seen = set()
    out = []
    for d in scan.dependencies:
        key = (d.path, d.line, d.name, d.group)
        if key not in seen:
            seen.add(key)
            out.append({"name": d.name, "spec": d.spec, "path": d.path, "line": d.line, "source": d.source,
                        "group": d.group, "gpu": d.kind})
    return out


def _summary(scan: Scan, judged: list[dict[str, Any]], sites: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {p: sum(1 for e in judged if e["verdict"] == p) for p in PATHS}
    kinds: dict[str, dict[str, Any]] = {}
    for s in sites:
        got = kinds.setdefault(s["kind"], {"kind": s["kind"], "path": s["path_needed"], "count": 0, "optional": 0,
                                           "first": None})
        got["count"] += 1
        got["optional"] += s["optional"]
        if got["first"] is None and not s["optional"]:
            got["first"] = {k: s[k] for k in ("path", "line", "detail") if k in s}
    repo = "cpu"
    why: list[dict[str, Any]] = []
    for k in kinds.values():
        if k["count"] > k["optional"]:
            repo = worse(repo, k["path"])
            why.append({"path": k["path"], "reason": f"{k['count'] - k['optional']} {k['kind']} site(s) that are "
                        "not optional", "example": k["first"]})
    kernels = [n for n in scan.native if n.kind == "cuda-source" and "__global__" in n.detail
               and not n.detail.startswith("CUDA header")]
    other = [n for n in scan.native if n.kind in ("ptx", "cuda-binary", "shared-object")]
    if kernels:
        repo = worse(repo, "real-gpu")
        why.append({"path": "real-gpu", "reason": f"{len(kernels)} CUDA source file(s) with __global__ kernels",
                    "example": {"path": kernels[0].path, "line": None, "detail": kernels[0].detail}})
    if other:
        repo = worse(repo, "native")
        why.append({"path": "native", "reason": f"{len(other)} prebuilt CUDA file(s) (PTX, cubin, libraries)",
                    "example": {"path": other[0].path, "line": None, "detail": other[0].detail}})
    containers = [i for i in scan.infra if i.kind in ("cuda-base-image", "compose-gpu", "docker-gpus")]
    if containers:
        repo = worse(repo, "container")
        why.append({"path": "container", "reason": f"{len(containers)} GPU container definition(s)",
                    "example": {"path": containers[0].path, "line": containers[0].line,
                                "detail": containers[0].detail}})
    why.sort(key=lambda w: -PATHS.index(w["path"]))
    gpu_deps = sorted({d.name for d in scan.dependencies if d.kind})
    return {"verdict": max((e["verdict"] for e in judged), key=PATHS.index) if judged else repo,
            "repository_verdict": repo, "repository_reasons": why, "entries_by_verdict": counts,
            "kinds": sorted(kinds.values(), key=lambda k: (-PATHS.index(k["path"]), k["kind"])),
            "gpu_dependencies": gpu_deps}
