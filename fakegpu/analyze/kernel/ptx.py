"""PTX text, per kernel (.entry): parameters, the virtual registers it declares by class, shared and local
memory, launch directives, the instruction mix, tensor-core instructions with their shapes and, for a kernel
without loops, the floating-point operations each thread executes at most.

Virtual registers are what the PTX declares, not what the hardware gives: ptxas allocates the real ones (read
them from the cubin). Each kernel is counted on its own, never summed across a file. A statement-level reader,
not a full PTX grammar: what it cannot place is reported with its line."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_REG = re.compile(r"^\.reg\s+\.(\w+)\s+(.+)$", re.S)
_VAR = re.compile(r"^(?:\.extern\s+)?(?:\.(?:visible|weak)\s+)?\.(shared|local|global|const)\b(.*)$", re.S)
_ALIGN_TYPE = re.compile(r"(?:\.align\s+(\d+)\s+)?\.([a-z]+\d*)\s+([\w$.]+)\s*((?:\[\s*\d*\s*\])*)")
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16,
               "pred": 1}
_SHAPE = re.compile(r"\.m(\d+)n(\d+)k(\d+)")
_LABEL = re.compile(r"^([$\w]+)\s*:\s*(.*)$", re.S)
_FLOAT = re.compile(r"\.(f16x2|bf16x2|f16|bf16|f32|f64)\b")
TENSOR_OPS = ("mma", "wmma", "wgmma", "tcgen05")
_MMA_FLOAT = re.compile(r"\.(f16|bf16|tf32|f32|f64|e4m3|e5m2)\b")
# Threads that share one tensor-core instruction's work: a warp for mma/wmma, a warpgroup for wgmma.
_THREADS_PER_MMA = {"mma": 32, "wmma": 32, "wgmma": 128}
_DIRECTIVES = ("maxntid", "reqntid", "minnctapersm", "maxnreg", "maxclusterrank", "reqnctapercluster",
               "explicitcluster", "noreturn", "pragma")


_LINE_DIRECTIVES = (".version", ".target", ".address_size", ".loc", ".file")


class PtxError(ValueError):
    """Text that is not PTX at all (no .version directive)."""


@dataclass
class Variable:
    space: str
    name: str
    bytes: int | None  # None: unsized (an extern shared array: the launch's dynamic shared memory)
    line: int


@dataclass
class PtxKernel:
    name: str
    line: int
    visible: bool
    params: list[dict[str, object]] = field(default_factory=list)
    registers: dict[str, int] = field(default_factory=dict)  # declared virtual registers by class (.f32, .pred)
    shared_bytes: int = 0
    dynamic_shared: bool = False  # it uses an extern (launch-sized) shared array
    local_bytes: int = 0
    directives: dict[str, list[int]] = field(default_factory=dict)
    instructions: Counter[str] = field(default_factory=Counter)
    tensor: list[dict[str, object]] = field(default_factory=list)
    loops: list[int] = field(default_factory=list)  # lines of backward branches
    calls: list[str] = field(default_factory=list)
    flops: float = 0.0
    body: list[str] = field(default_factory=list, repr=False)

    @property
    def flops_per_thread(self) -> float | None:
        """Static only without loops and calls (each instruction runs at most once; forward branches may skip
        some, so it is an upper bound)."""
        return None if self.loops or self.calls else self.flops


@dataclass
class Ptx:
    version: str | None = None
    target: list[str] = field(default_factory=list)  # e.g. ["sm_90a"]
    address_size: int | None = None
    kernels: list[PtxKernel] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    module: list[Variable] = field(default_factory=list)
    problems: list[dict[str, object]] = field(default_factory=list)


def _statements(text: str) -> list[tuple[int, str, str]]:
    """(line, text, terminator): ';' ends a statement, '{' opens a block (a function body, or a scope where a
    statement would start), '}' closes one, a newline ends the line directives (.version, .target, .loc ...).
    Braces inside a statement (vector operands, an initializer `= {...}`) stay in it."""
    out: list[tuple[int, str, str]] = []
    line, start_line, current, in_value = 1, 1, "", 0
    for ch in text:
        if ch == "\n":
            line += 1
            if current.lstrip().startswith(_LINE_DIRECTIVES):
                out.append((start_line, current.strip(), "\n"))
                current = ""
                continue
        if not current.strip():
            start_line = line
        if ch == "{" and not in_value and (not current.strip() or (
                re.search(r"\.(entry|func)\b", current) and "=" not in current)):
            out.append((start_line, current.strip(), "{"))
            current = ""
        elif ch == "}" and not in_value:
            out.append((start_line, current.strip(), "}"))
            current = ""
        elif ch == ";" and not in_value:
            out.append((start_line, current.strip(), ";"))
            current = ""
        else:
            in_value += (ch == "{") - (ch == "}")
            current += ch
    if current.strip():
        out.append((start_line, current.strip(), ""))
    return out


def _variable(space: str, rest: str, line: int) -> Variable | None:
    found = _ALIGN_TYPE.search(rest)
    if not found:
        return None
    _align, kind, name, dims = found.groups()
    size = _TYPE_BYTES.get(kind, 0)
    total: int | None = size
    for dim in re.findall(r"\[\s*(\d*)\s*\]", dims):
        total = None if not dim or total is None else total * int(dim)
    return Variable(space, name, total, line)


def _params(header: str) -> list[dict[str, object]]:
    inside = header[header.find("(") + 1:header.rfind(")")] if "(" in header else ""
    out: list[dict[str, object]] = []
    for part in filter(None, (p.strip() for p in inside.split(","))):
        bare = re.sub(r"\.(param|ptr|global|const|shared|local)\b", " ", part)
        v = _variable("param", bare, 0)
        found = _ALIGN_TYPE.search(bare)
        out.append({"name": v.name if v else part, "type": found.group(2) if found else None,
                    "bytes": v.bytes if v else None, "pointer": ".ptr" in part})
    return out


def _flops(op: str, parts: list[str]) -> float:
    fp = _FLOAT.search(op)
    if parts[0] in ("add", "sub", "mul", "fma", "mad") and fp and not op.startswith(("add.cc", "mul.wide")):
        per = 2 if parts[0] in ("fma", "mad") else 1
        return per * (2 if fp.group(1).endswith("x2") else 1)
    return 0.0


def _instruction(kernel: PtxKernel, line: int, text: str, labels: dict[str, int]) -> None:
    if text.startswith("@"):
        text = text.split(None, 1)[1] if " " in text else ""
    op = text.split(None, 1)[0] if text else ""
    if not op:
        return
    parts = op.split(".")
    kernel.instructions[parts[0]] += 1
    if parts[0] == "bra":
        target = text.split(None, 1)[1].strip().rstrip(";") if " " in text else ""
        if target in labels:
            kernel.loops.append(line)
    elif parts[0] == "call":
        # call[.uni] [(return),] callee[, (arguments)][, prototype]
        operands = re.sub(r"^\s*\([^)]*\)\s*,", "", text.split(None, 1)[1] if " " in text else "")
        callee = re.search(r"[\w$]+", operands)
        kernel.calls.append(callee.group(0) if callee else "?")
    kernel.flops += _flops(op, parts)
    if parts[0] in TENSOR_OPS and (parts[0] == "mma" or (len(parts) > 1 and parts[1].startswith("mma"))):
        shape = _SHAPE.search(op)
        entry: dict[str, object] = {"op": op, "line": line, "shape": None}
        if shape:
            m, n, k = map(int, shape.groups())
            entry["shape"] = f"m{m}n{n}k{k}"
            threads = _THREADS_PER_MMA.get(parts[0])
            if threads and _MMA_FLOAT.search(op):  # integer products are operations, not FLOPs
                kernel.flops += 2 * m * n * k / threads
        kernel.tensor.append(entry)


def parse_ptx(text: str) -> Ptx:
    """The module and its kernels. PtxError when the text has no `.version` (not PTX); other problems are listed
    in `problems` with their lines, and what could be read is still returned."""
    clean = _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    ptx = Ptx()
    statements = _statements(clean)
    depth, header, kernel, labels = 0, None, None, {}
    names: dict[str, Variable] = {}
    for line, stmt, end in statements:
        if depth == 0:
            if end == "{":
                header = (line, stmt)
                if not re.search(r"\.(entry|func)\b", stmt):
                    ptx.problems.append({"line": line, "message": f"a block opens outside any function: {stmt[:60]!r}"})
                depth = 1
                name = re.search(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", stmt)
                if name and name.group(1) == "entry":
                    kernel = PtxKernel(name.group(2), line, ".visible" in stmt, _params(stmt))
                    for directive in _DIRECTIVES:
                        found = re.search(rf"\.{directive}\b\s*([\d,\s]*)", stmt[stmt.rfind(")"):])
                        if found:
                            kernel.directives[directive] = [int(x) for x in re.findall(r"\d+", found.group(1))]
                    labels = {}
                else:
                    kernel = None
                    if name:
                        ptx.functions.append(name.group(2))
                continue
            if end == "}":
                ptx.problems.append({"line": line, "message": "a '}' closes no block"})
                continue
            if not stmt:
                continue
            words = stmt.split()
            if words[0] == ".version" and len(words) > 1:
                ptx.version = words[1]
            elif words[0] == ".target":
                ptx.target = [t.strip() for t in stmt[len(".target"):].split(",") if t.strip()]
            elif words[0] == ".address_size" and len(words) > 1 and words[1].isdigit():
                ptx.address_size = int(words[1])
            elif (var := _VAR.match(stmt)) and (found := _variable(var.group(1), var.group(2), line)):
                ptx.module.append(found)
                names[found.name] = found
            elif re.match(r"(\.(visible|extern|weak)\s+)*\.(func|entry)\b", stmt) or words[0] in (
                    ".file", ".loc", ".section", ".pragma", ".alias"):
                pass  # a declaration (prototype) or debug directive
            else:
                ptx.problems.append({"line": line, "message": f"not a PTX module statement: {stmt[:60]!r}"})
            continue
        # inside a function body
        if end == "{":
            depth += 1
        if stmt:
            label = _LABEL.match(stmt)
            if label and not stmt.startswith("@"):
                labels[label.group(1)] = line
                stmt = label.group(2).strip()
        if kernel is not None and stmt:
            kernel.body.append(stmt)
            if reg := _REG.match(stmt):
                cls = reg.group(1)
                for decl in reg.group(2).split(","):
                    count = re.search(r"<\s*(\d+)\s*>", decl)
                    kernel.registers[cls] = kernel.registers.get(cls, 0) + (int(count.group(1)) if count else 1)
            elif (var := _VAR.match(stmt)) and var.group(1) in ("shared", "local"):
                found = _variable(var.group(1), var.group(2), line)
                if found and found.space == "local":
                    kernel.local_bytes += found.bytes or 0
                elif found:
                    kernel.shared_bytes += found.bytes or 0
                    kernel.dynamic_shared |= found.bytes is None
            elif stmt.startswith("."):
                pass  # .loc, .pragma and other directives
            elif end == ";" or end == "":
                if end == "" and kernel is not None:
                    ptx.problems.append({"line": line, "message": f"a statement without ';': {stmt[:60]!r}"})
                _instruction(kernel, line, stmt, labels)
            else:
                ptx.problems.append({"line": line, "message": f"not a PTX statement: {stmt[:60]!r}"})
        if end == "}":
            depth -= 1
            if depth == 0 and kernel is not None:
                _module_shared(kernel, names)
                ptx.kernels.append(kernel)
                kernel = None
    if depth:
        ptx.problems.append({"line": header[0] if header else 0,
                             "message": "a function body is never closed (missing '}'); it was not counted"})
    if ptx.version is None:
        raise PtxError("no .version directive: not PTX text")
    return ptx


def _module_shared(kernel: PtxKernel, names: dict[str, Variable]) -> None:
    """Shared arrays declared at module scope (an extern array sized at launch, or one nvcc did not demote into
    the kernel) count for the kernels that name them."""
    used = set(re.findall(r"[\w$]+", " ".join(kernel.body)))
    for name in used & set(names):
        var = names[name]
        if var.space == "shared":
            if var.bytes is None:
                kernel.dynamic_shared = True
            else:
                kernel.shared_bytes += var.bytes
