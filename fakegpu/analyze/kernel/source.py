"""CUDA C++ source (.cu, .cuh): the kernels it defines and the launches it makes, by a token-level scan (comments
and string literals blanked first, lines kept), not a C++ parser. A kernel is a `__global__` function: its name
is the identifier before the parameter list, past any `__launch_bounds__(...)` or attribute; a `template <...>`
before it makes it a template. Launches: `name<<<...>>>(` (with template arguments, `name<float, 256><<<...>>>`)
and `cudaLaunchKernel(...)`/`cudaLaunchKernelEx`/`cudaLaunchCooperativeKernel` naming the kernel."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BLANK = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_GLOBAL = re.compile(r"\b__global__\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# C++ words left around a launch's kernel argument by a cast like (const void*)kernel: not the kernel's name
_CAST_WORDS = frozenset({"const", "void"})
_SKIP_CALLS = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "__maxnreg__", "__cluster_dims__",
               "decltype"}
_TRIPLE = re.compile(r"([A-Za-z_][\w:]*)\s*(<(?:[^<>;{}]|<[^<>;{}]*>)*>)?\s*<<<(.*?)>>>\s*\(", re.S)
_API = re.compile(r"\b(cudaLaunchKernel(?:Ex(?:C)?)?|cudaLaunchCooperativeKernel(?:MultiDevice)?)\s*\(")


@dataclass
class SourceKernel:
    name: str
    line: int
    template: str | None = None  # the template parameter list, e.g. "typename T, int BLOCK"
    launch_bounds: list[str] | None = None  # __launch_bounds__'s arguments as written
    instantiations: list[str] = field(default_factory=list)  # explicit `template __global__ void f<...>(...)`


@dataclass
class Launch:
    kernel: str
    line: int
    how: str  # "<<<>>>" or the API name
    config: str | None = None  # the <<<...>>> arguments as written
    template_args: str | None = None


@dataclass
class Source:
    kernels: list[SourceKernel] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)


def _blank(text: str) -> str:
    return _BLANK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _balanced(text: str, at: int, opening: str, closing: str) -> int:
    """The index just past the bracket closing the one at `at`."""
    depth = 0
    for i in range(at, len(text)):
        depth += (text[i] == opening) - (text[i] == closing)
        if depth == 0:
            return i + 1
    return len(text)


def _template_before(text: str, at: int) -> tuple[str | None, bool]:
    """The template parameter list right before `at` (past `static`, `inline` and the like), and whether it is
    an explicit instantiation (`template __global__ ...`)."""
    before = text[:at].rstrip()
    for word in ("static", "inline", "__forceinline__", "__noinline__", "extern \"C\""):
        if before.endswith(word):
            before = before[: -len(word)].rstrip()
    if before.endswith("template"):
        return None, True
    if not before.endswith(">"):
        return None, False
    depth = 0
    for i in range(len(before) - 1, -1, -1):
        depth += (before[i] == ">") - (before[i] == "<")
        if depth == 0:
            head = before[:i].rstrip()
            if head.endswith("template"):
                return " ".join(before[i + 1:-1].split()), False
            return None, False
    return None, False


def scan_source(text: str) -> Source:
    clean = _blank(text)
    found = Source()
    by_name: dict[str, SourceKernel] = {}
    for match in _GLOBAL.finditer(clean):
        at, name, bounds = match.end(), None, None
        while at < len(clean):
            ident = _IDENT.match(clean, at)
            if ident:
                word = ident.group(0)
                after = ident.end()
                rest = clean[after:].lstrip()
                if rest.startswith("(") and word not in _SKIP_CALLS:
                    name = word
                    break
                if rest.startswith("<"):  # an explicit instantiation: f<float, 256>(...)
                    close = _balanced(clean, clean.index("<", after), "<", ">")
                    if clean[close:].lstrip().startswith("("):
                        name = word
                        break
                if rest.startswith("(") or rest.startswith("(("):
                    start = clean.index("(", after)
                    end = _balanced(clean, start, "(", ")")
                    if word == "__launch_bounds__":
                        bounds = [" ".join(a.split()) for a in clean[start + 1:end - 1].split(",")]
                    at = end
                    continue
                at = after
                continue
            if clean[at] in ";{":
                break
            at += 1
        if not name:
            continue
        template, explicit = _template_before(clean, match.start())
        line = _line(clean, match.start())
        if explicit:
            args = re.search(rf"\b{re.escape(name)}\s*(<[^;{{]*?>)\s*\(", clean[match.start():at + len(name) + 200])
            target = by_name.get(name)
            if target is not None:
                target.instantiations.append(" ".join(args.group(1).split()) if args else name)
            continue
        kernel = SourceKernel(name, line, template, bounds)
        by_name.setdefault(name, kernel)
        found.kernels.append(kernel)
    for m in _TRIPLE.finditer(clean):
        name = m.group(1).split("::")[-1]
        found.launches.append(Launch(name, _line(clean, m.start()), "<<<>>>", " ".join(m.group(3).split()),
                                     " ".join(m.group(2)[1:-1].split()) if m.group(2) else None))
    for m in _API.finditer(clean):
        end = _balanced(clean, m.end() - 1, "(", ")")
        args = clean[m.end():end - 1]
        if m.group(1).startswith("cudaLaunchKernelEx"):
            first = args.split(",", 1)[1] if "," in args else ""
        else:
            first = args.split(",", 1)[0]
        idents = [w for w in _IDENT.findall(re.sub(r"\((?:const\s+)?void\s*\*+\s*\)|reinterpret_cast<[^>]*>|"
                                                  r"static_cast<[^>]*>", " ", first))
                  if w not in _CAST_WORDS]
        found.launches.append(Launch(idents[-1] if idents else "?", _line(clean, m.start()), m.group(1)))
    found.launches.sort(key=lambda launch: launch.line)
    return found
