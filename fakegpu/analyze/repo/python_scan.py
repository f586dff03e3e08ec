"""One Python file's GPU-facing facts, from its syntax tree: the calls and imports that reach a GPU (with line),
its imports (for the import graph), its `if __name__ == "__main__":` block and its top-level names.

Import aliases are resolved per file (`import torch as th`, `from torch import cuda`, `import torch.distributed as
dist`), so `th.cuda.synchronize()` is found as `torch.cuda.synchronize`. A site under `if TYPE_CHECKING:` never
runs and is left out. A third-party GPU library's site is marked optional when it runs only on some
installations or configurations: inside `try: ... except ImportError`, under an `if is_x_available():` test or
any other `if`, or through a name imported inside a function (a deferred import is how libraries keep an extra
optional). PyTorch's own CUDA sites (torch.cuda, .cuda(), device="cuda", torch.compile, torch.distributed) are
never optional: on a fake GPU `torch.cuda.is_available()` is true and the CUDA path is the one taken. A
cpp_extension build whose sources cannot be read (a wrapper passing its arguments on) is optional too: it may
build CUDA code or not.

Parsing dominates a scan, so a file is parsed only when it can hold a site (needs_parse: a few substrings, or an
import of a GPU-facing module); the others' imports are read with a pattern (python_imports.py)."""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field
from typing import ClassVar

# A file holding none of these and importing none of TRIGGER_MODULES cannot hold a site this module finds: every
# detector needs a name that one of its imports binds, or one of these in the text.
TRIGGERS = (b"cuda", b"__main__", b"torch.compile", b"init_process_group", b"new_group", b"DistributedDataParallel",
            b"init_device_mesh", b"_dynamo.optimize", b"init_distributed")
TRIGGER_MODULES = ("torch.utils.cpp_extension", "torch.compile", "torch.cuda")
# Parts of torch whose names, once imported under an alias, can make a site in text without any trigger
# (`from torch.cuda import synchronize as sync`, `from torch.nn.parallel import DistributedDataParallel as DDP`).
_GPU_TORCH = ("torch.cuda", "torch.distributed", "torch.nn.parallel", "torch.utils.cpp_extension", "torch.compile",
              "torch._dynamo", "torch.compiler")
# PyTorch's own CUDA surface: never optional (on a fake GPU the CUDA path is the one taken)
PYTORCH_KINDS = ("torch-cuda", "torch-compile", "distributed")

# Third-party packages whose import alone is evidence: package -> site kind (verdict.py gives each kind its path).
LIBRARIES = {
    "flash_attn": "flash-attn", "flash_attn_interface": "flash-attn", "bitsandbytes": "bitsandbytes",
    "deepspeed": "deepspeed", "apex": "apex", "vllm": "vllm", "xformers": "xformers", "kernels": "hub-kernels",
    "cupy": "cupy", "cupyx": "cupy", "pynvml": "nvml", "nvidia_smi": "nvml", "pynvml_utils": "nvml",
    "triton": "triton", "jax": "jax", "jaxlib": "jax", "tensorflow": "tensorflow", "tensorrt": "tensorrt",
    "torch_tensorrt": "tensorrt", "mamba_ssm": "mamba-ssm", "causal_conv1d": "mamba-ssm",
}
_TEST_RUNNERS = {"unittest.main", "pytest.main", "doctest.testmod", "absltest.main"}
_CUDA_STRING = re.compile(r"^cuda(:\d+)?$")
_TF_GPU_STRING = re.compile(r"(?i)^/?(device:)?gpu(:\d+)?$|^/job:.*gpu", re.I)
_DISTRIBUTED_SETUP = {"torch.distributed.init_process_group": 0, "torch.distributed.new_group": 2,
                      "torch.distributed.device_mesh.init_device_mesh": None,
                      "torch.distributed.init_device_mesh": None, "deepspeed.init_distributed": 0}


@dataclass
class Site:
    kind: str
    detail: str
    line: int
    optional: bool = False  # runs only where an optional package is installed
    origin: str | None = None  # `pkg.mod.name` when the site's name came from another module (a re-export)
    top: str | None = None  # the top-level module a library site names (a module of the tree may shadow it)


@dataclass
class Import:
    module: str  # absolute dotted name
    names: tuple[str, ...]  # for `from module import a, b`
    line: int
    lazy: bool  # inside a function, a try or an if: runs on some paths only (an indented import, by pattern)


@dataclass
class MainBlock:
    line: int
    runs: bool  # holds more than pass, a docstring or `...`
    test_runner: bool  # only starts a test runner (unittest.main(), pytest.main())


@dataclass
class PythonFacts:
    sites: list[Site] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    main: MainBlock | None = None
    names: set[str] = field(default_factory=set)  # top-level functions, classes and assigned names
    deferred: set[str] = field(default_factory=set)  # top-level names bound only under try/if (optional)
    parsed: bool = True


def has_trigger(source: bytes) -> bool:
    return any(t in source for t in TRIGGERS)


def needs_parse(source: bytes, imports: list[Import]) -> bool:
    """Whether a file can hold a site: one of TRIGGERS in its text, or an import of a GPU library (a re-export
    `from .compat import triton` too) or of a GPU-facing part of torch (`from torch import distributed`)."""
    if has_trigger(source):
        return True
    for imp in imports:
        if imp.module.split(".", 1)[0] in LIBRARIES or any(n in LIBRARIES for n in imp.names):
            return True
        for name in (imp.module, *(f"{imp.module}.{n}" for n in imp.names)):
            if name.startswith(TRIGGER_MODULES):
                return True
    return False


def absolute(module: str | None, level: int, package: str) -> str | None:
    """`from ..x import y` inside package a.b.c -> a.x; None when it climbs above the top."""
    if not level:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or (level - 1 == len(parts) and not module):
        return None
    base = parts[:len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base) or None


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_main_test(test: ast.AST) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(_const_str(s) == "__main__" for s in sides))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _skip(_scanner: object, _node: ast.AST) -> None:
    return None


def _is_test_runner(name: str) -> bool:
    return name in _TEST_RUNNERS or name.endswith("run_tests") or name.split(".", 1)[0] in (
        "unittest", "pytest", "doctest", "absltest")


# Leaves and markers that hold nothing a detector looks at: not descended into (half of a tree's nodes).
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.alias,
           ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal)


class _Scanner(ast.NodeVisitor):
    """ast.NodeVisitor's traversal, with the handler looked up once per node class and leaves skipped: parsing and
    visiting are most of a scan's time."""

    _handlers: ClassVar[dict[type, object]] = {}

    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        handler = self._handlers.get(kind)
        if handler is None:
            # Leaves first: ast.NodeVisitor itself defines visit_Constant (a deprecation shim) that would be found
            handler = _skip if issubclass(kind, _LEAVES) else (
                getattr(type(self), "visit_" + kind.__name__, None) or type(self).generic_visit)
            self._handlers[kind] = handler
        handler(self, node)  # type: ignore[operator]

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def __init__(self, package: str, source: bytes = b"") -> None:
        self.package = package
        self.source = source
        # byte offset of each line's start, to cut a function's text out of the source (see _quiet)
        self.lines = [0, *(m.end() for m in re.finditer(b"\n", source))] if source else []
        self.aliases: dict[str, str] = {}
        self.deferred: set[str] = set()  # names bound only by optional or in-function imports
        self.gpu_aliases: set[bytes] = set()  # names bound to GPU-facing modules (their text makes code not quiet)
        self.facts = PythonFacts()
        self.optional = 0  # depth of try/except ImportError and `if` blocks around the node
        self.through_deferred = False  # the call or decorator being judged goes through a deferred name
        self.origin: str | None = None  # and the binding it came through
        self.top: str | None = None  # and the top-level module its name resolves to
        self.functions = 0

    # names -------------------------------------------------------------------------------------------------
    def canonical(self, node: ast.AST) -> str | None:
        """`th.cuda.synchronize` -> torch.cuda.synchronize when `th` is an imported name; None otherwise."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def site(self, kind: str, detail: str, node: ast.AST, deferred: bool = False) -> None:
        optional = kind not in PYTORCH_KINDS and (self.optional > 0 or deferred or self.through_deferred)
        self.facts.sites.append(Site(kind, detail, node.lineno, optional, self.origin, self.top))

    def bind(self, alias: str, target: str) -> None:
        self.aliases[alias] = target
        if (target.split(".", 1)[0] in LIBRARIES or target.rsplit(".", 1)[-1] in LIBRARIES
                or target.startswith(_GPU_TORCH)):
            self.gpu_aliases.add(alias.encode())
        if self.optional or self.functions:
            self.deferred.add(alias)
            if not self.functions:
                self.facts.deferred.add(alias)
        else:
            self.deferred.discard(alias)
            self.facts.deferred.discard(alias)

    def _through(self, node: ast.AST) -> None:
        """Note, for the sites the call or decorator `node` makes, whether its name is deferred here and which
        binding it came through (a module of the repository may have bound it optionally: report.py looks)."""
        root = self._root_alias(node)
        self.through_deferred = root in self.deferred
        target = self.aliases.get(root or "", "")
        self.origin = target if "." in target else None
        self.top = target.split(".", 1)[0] or None

    def _root_alias(self, node: ast.AST) -> str | None:
        while isinstance(node, ast.Attribute):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    # imports -----------------------------------------------------------------------------------------------
    def _library(self, module: str, node: ast.AST) -> None:
        kind = LIBRARIES.get(module.split(".", 1)[0])
        if kind:
            self.top = module.split(".", 1)[0]
            self.site(kind, f"import {module}", node, deferred=self.functions > 0)
            self.top = None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.bind(alias.asname, alias.name)
            else:
                top = alias.name.split(".", 1)[0]
                if top not in self.aliases or top in self.deferred:
                    self.bind(top, top)
            self.facts.imports.append(Import(alias.name, (), node.lineno, self.functions > 0 or self.optional > 0))
            self._library(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = absolute(node.module, node.level, self.package)
        if module is None:
            return
        names = tuple(a.name for a in node.names)
        for alias in node.names:
            if alias.name != "*":
                self.bind(alias.asname or alias.name, f"{module}.{alias.name}")
        self.facts.imports.append(Import(module, names, node.lineno, self.functions > 0 or self.optional > 0))
        if not node.level:
            self._library(module, node)

    # control flow ------------------------------------------------------------------------------------------
    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            for child in node.orelse:
                self.visit(child)
            return  # only a type checker runs this body
        if _is_main_test(test) and not self.functions:
            self._main(node)
        self.visit(test)
        # Any condition makes a library site optional (it runs on some configurations); the main block does not.
        optional = not (_is_main_test(test) and not self.functions)
        self.optional += optional
        for child in node.body:
            self.visit(child)
        for child in node.orelse:
            self.visit(child)
        self.optional -= optional

    def _main(self, node: ast.If) -> None:
        work = [s for s in node.body if not isinstance(s, ast.Pass)
                and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        # The block's own imports are not bound yet (it is judged before its body is visited): fall back to the
        # dotted name as written.
        calls = [self.canonical(c.func) or _dotted(c.func)
                 for s in work for c in ast.walk(s) if isinstance(c, ast.Call)]
        runners = [c for c in calls if c and _is_test_runner(c)]
        runner = bool(runners) and all(c in runners or c in ("sys.exit", "exit") for c in calls)
        self.facts.main = MainBlock(node.lineno, bool(work), runner)

    def visit_Try(self, node: ast.Try) -> None:
        catches = False
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            for k in kinds:
                name = k.id if isinstance(k, ast.Name) else k.attr if isinstance(k, ast.Attribute) else None
                if k is None or name in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException",
                                         "OptionalDependencyNotAvailable"):
                    catches = True
        self.optional += catches
        for child in node.body:
            self.visit(child)
        self.optional -= catches
        for part in (node.handlers, node.orelse, node.finalbody):
            for child in part:
                self.visit(child)

    visit_TryStar = visit_Try

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if not self.functions:
            self.facts.names.add(node.name)
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = self.canonical(target)
            if name:
                self._through(target)
                self._decorator(name, _dotted(target) or name, deco)
                self.through_deferred, self.origin, self.top = False, None, None
            self.visit(deco)
        if not isinstance(node, ast.ClassDef):
            self.visit(node.args)
        if self._quiet(node):
            return
        self.functions += 1
        for child in node.body:
            self.visit(child)
        self.functions -= 1

    def _quiet(self, node: ast.AST) -> bool:
        """Whether a function's or class's text holds nothing a detector needs: no trigger, no import, no name
        bound to a GPU-facing module. Its body is then not visited: most of a parsed file's functions are quiet,
        and visiting is half of a scan's time."""
        if not self.lines or node.end_lineno is None or node.end_lineno >= len(self.lines):
            return False
        return self.quiet_text(self.source[self.lines[node.lineno - 1]:self.lines[node.end_lineno]])

    def quiet_text(self, text: bytes) -> bool:
        if b"import" in text or any(t in text for t in TRIGGERS):
            return False
        return not any(alias in text for alias in self.gpu_aliases)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _function

    def _decorator(self, name: str, written: str, node: ast.AST) -> None:
        parts = name.split(".")
        # `triton` re-exported by a module of the repository (torch's `from .triton_compat import triton`) too
        if "triton" in parts[:-1] and parts[-1] in ("jit", "autotune", "heuristics"):
            self.site("triton-kernel", f"@{written}", node)
        elif name in ("torch.compile", "torch.compiler.compile"):
            self.site("torch-compile", f"@{name}", node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if not self.functions:
            self.facts.names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        value = _const_str(node.value)
        if value and _CUDA_STRING.match(value):
            for t in node.targets:
                name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
                if "device" in name.lower():
                    self.site("torch-cuda", f'{name} = "{value}"', node)
        self.generic_visit(node)

    # calls -------------------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = self.canonical(node.func)
        if name:
            self._named_call(name, node)
        elif isinstance(node.func, ast.Attribute):
            self._method_call(node.func.attr, node)
        for kw in node.keywords:
            value = _const_str(kw.value)
            if kw.arg == "device" and value and _CUDA_STRING.match(value) and not (
                    isinstance(node.func, ast.Attribute) and node.func.attr == "to"):
                self.site("torch-cuda", f'device="{value}"', kw.value)
        self.generic_visit(node)

    def _method_call(self, attr: str, node: ast.Call) -> None:
        if attr == "cuda":
            self.site("torch-cuda", ".cuda()", node)
        elif attr == "to":
            for arg in [*node.args[:1], *(k.value for k in node.keywords if k.arg == "device")]:
                value = _const_str(arg)
                if value and _CUDA_STRING.match(value):
                    self.site("torch-cuda", f'.to("{value}")', node)

    def _named_call(self, name: str, node: ast.Call) -> None:
        self._through(node.func)
        try:
            self._judge_call(name, node)
        finally:
            self.through_deferred, self.origin, self.top = False, None, None

    def _judge_call(self, name: str, node: ast.Call) -> None:
        top = name.split(".", 1)[0]
        first = _const_str(node.args[0]) if node.args else None
        if name.startswith("torch.cuda.") or name == "torch.cuda":
            self.site("torch-cuda", f"{name}()", node)
        elif name.startswith("torch.") and first and _CUDA_STRING.match(first):
            self.site("torch-cuda", f'{name}("{first}")', node)
        elif name in ("torch.compile", "torch.compiler.compile") or name.startswith("torch._dynamo.optimize"):
            self.site("torch-compile", f"{name}()", node)
        elif name in _DISTRIBUTED_SETUP:
            self._distributed(name, node)
        elif name in ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed."
                      "DistributedDataParallel"):
            self.site("distributed", f"{name}()", node)
        elif name.startswith("torch.utils.cpp_extension."):
            self._extension(name, node)
        elif top in ("triton",) and name.rsplit(".", 1)[-1] in ("jit", "autotune"):
            self.site("triton-kernel", f"{name}()", node)
        elif name == "triton.language.program_id":
            # A kernel's body, whatever decorator wraps it (torch's @instrumented_triton_cache does): every Triton
            # kernel asks which program it is
            self.site("triton-kernel", f"{name}() in a kernel body", node)
        elif top in ("cupy", "cupyx"):
            self.site("cupy", f"{name}()", node)
        elif top in ("pynvml", "nvidia_smi"):
            self.site("nvml", f"{name}()", node)
        elif top in ("jax", "jaxlib"):
            self._jax(name, node, first)
        elif top == "tensorflow":
            self._tensorflow(name, node, first)
        elif top in ("flash_attn", "bitsandbytes", "vllm", "xformers", "apex", "deepspeed", "mamba_ssm"):
            self.site(LIBRARIES[top], f"{name}()", node)
        elif top == "kernels" and name.rsplit(".", 1)[-1] in ("get_kernel", "kernelize", "get_local_kernel",
                                                              "load_kernel"):
            self.site("hub-kernels", f"{name}()", node)
        elif name.endswith(".to") or name.endswith(".cuda"):
            self._method_call(name.rsplit(".", 1)[-1], node)

    def _distributed(self, name: str, node: ast.Call) -> None:
        position = _DISTRIBUTED_SETUP[name]
        backend_node = next((k.value for k in node.keywords if k.arg in ("backend", "dist_backend")), None)
        if backend_node is None and position is not None and len(node.args) > position:
            backend_node = node.args[position]
        if backend_node is None:
            backend = "default" if name.endswith("init_process_group") else "inherited"
        else:
            backend = _const_str(backend_node) or "not a literal"
        self.site("distributed", f"{name}(backend={backend})", node)

    def _extension(self, name: str, node: ast.Call) -> None:
        short = name.rsplit(".", 1)[-1]
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        sources = keywords.get("sources") or (node.args[1] if short == "load" and len(node.args) > 1 else None)
        literal = [_const_str(e) or "" for e in sources.elts] if isinstance(sources, (ast.List, ast.Tuple)) else []
        # A computed source list (str(Path(__file__).parent / "k.cu")) still names its files in string constants.
        named = [c.value for c in ast.walk(sources) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                 ] if sources is not None else []
        with_cuda = keywords.get("with_cuda")
        if short == "CUDAExtension" or (isinstance(with_cuda, ast.Constant) and with_cuda.value is True):
            cuda = "CUDA"
        elif short == "load_inline":
            spread = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            cuda = "CUDA" if "cuda_sources" in keywords or len(node.args) > 2 else (
                "sources not literal" if spread else "C++ only")
        elif short == "load":
            cuda = "CUDA" if any(s.endswith((".cu", ".cuh")) for s in named) else (
                "C++ only" if (literal and all(literal)) or any(s.endswith((".cpp", ".cc", ".cxx", ".c"))
                                                                for s in named) else "sources not literal")
        elif short == "CppExtension":
            cuda = "C++ only"
        else:
            return  # BuildExtension, include_paths, CUDA_HOME...: helpers, not a build of kernels by themselves
        self.site("cpp-extension", f"{name}() [{cuda}]", node)
        if cuda == "sources not literal":
            # It may build CUDA or not (a wrapper passing its arguments on): named, but it does not decide.
            self.facts.sites[-1].optional = True

    def _jax(self, name: str, node: ast.Call, first: str | None) -> None:
        strings = [first] + [_const_str(k.value) for k in node.keywords if k.arg in ("backend", "platform")]
        if any(s and s.lower() in ("gpu", "cuda") for s in strings):
            self.site("jax-gpu", f'{name}("{next(s for s in strings if s)}")', node)

    def _tensorflow(self, name: str, node: ast.Call, first: str | None) -> None:
        if (first and _TF_GPU_STRING.match(first)) or name.endswith(("is_gpu_available", "set_memory_growth",
                                                                      "is_built_with_cuda")):
            self.site("tensorflow-gpu", f"{name}({first!r})" if first else f"{name}()", node)


CHUNKED_FROM = 16 << 10  # bytes: smaller files are parsed whole (splitting them saves nothing)
_TOP_DEF = re.compile(rb"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.M)
_TOP_BLOCK = re.compile(rb"^(?:@|async[ \t]+def[ \t]|def[ \t]|class[ \t])", re.M)
# A line that starts a top-level statement: not indented, not a comment, not the closing bracket or quotes of a
# signature or string that began above.
_TOP_LINE = re.compile(rb"^[^ \t\r\n#)\]}'\"]", re.M)


def _chunks(source: bytes) -> list[tuple[int, int, bool]]:
    """(start, end, is_definition) byte ranges of a module's top-level pieces: each function or class with its
    decorators, and the statements between them. Found from lines that start at column 0, so a string or bracket
    spanning such a line can cut a piece wrongly; the caller then parses the whole file instead."""
    cuts: list[tuple[int, bool]] = [(0, False)]
    decorated = False
    for m in _TOP_LINE.finditer(source):
        at = m.start()
        block = _TOP_BLOCK.match(source, at) is not None
        if block and not decorated:
            cuts.append((at, True))
        elif not block and cuts[-1][1] and not decorated:
            cuts.append((at, False))  # module-level code after a definition
        decorated = source.startswith(b"@", at)
    cuts.append((len(source), False))
    return [(a, b, definition) for (a, definition), (b, _) in itertools.pairwise(cuts) if b > a]


def scan_python(source: bytes | str, package: str = "") -> PythonFacts:
    """The facts of one Python source; `package` is the dotted package it lives in (for relative imports).
    Raises SyntaxError (and ValueError for a NUL byte) as ast.parse does.

    Parsing is most of a scan's time, so a large file is parsed piece by piece (_chunks) and a function or class
    whose text is quiet (see _Scanner._quiet) is not parsed at all; the pieces carry their own line numbers. If a
    piece does not parse on its own, the whole file is parsed as one."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    if len(data) >= CHUNKED_FROM and b"\0" not in data:
        try:
            return _scan_in_pieces(data, package)
        except SyntaxError:
            pass
    scanner = _Scanner(package, data)
    scanner.visit(ast.parse(source))
    return scanner.facts


def _scan_in_pieces(data: bytes, package: str) -> PythonFacts:
    scanner = _Scanner(package, data)
    coding = re.match(rb"(?:[^\n]*\n)?[ \t\f]*#.*?coding[:=]", data)
    if coding or data.startswith(b"\xef\xbb\xbf"):
        raise SyntaxError("an encoding declaration: parsed whole")
    line = counted = 0
    for start, end, definition in _chunks(data):
        line += data.count(b"\n", counted, start)
        counted = start
        piece = data[start:end]
        if definition and scanner.quiet_text(piece):
            name = _TOP_DEF.search(piece)
            if name:
                scanner.facts.names.add(name.group(1).decode("ascii", "replace"))
            continue
        scanner.visit(ast.parse(b"\n" * line + piece))
    return scanner.facts
