"""The imports of a Python file that is not parsed (it can hold no site, python_scan.needs_parse), read by
pattern so that the import graph still goes through it: far cheaper than ast.parse, and close enough (an
`import` line inside a docstring would count)."""

from __future__ import annotations

import re

from fakegpu.analyze.repo.python_scan import Import, PythonFacts, absolute

# Found by the literal word first (the regex engine searches for a literal prefix fast), then checked to start its
# line: a `^`-anchored pattern in multiline mode is tried at every byte of the file.
_IMPORT_WORD = re.compile(rb"import[ \t(\\]")
_FROM_PREFIX = re.compile(rb"[ \t]*from[ \t]+([.\w]+)[ \t]+")
_TYPE_CHECKING = re.compile(rb"^([ \t]*)if[ \t]+(?:typing\.)?TYPE_CHECKING[ \t]*:", re.M)


def _type_checking_blocks(source: bytes) -> list[tuple[int, int]]:
    """Byte ranges of `if TYPE_CHECKING:` bodies: up to the next code line indented no deeper than the `if`."""
    blocks = []
    for m in _TYPE_CHECKING.finditer(source):
        indent = len(m.group(1))
        end = re.compile(rb"\n[ \t]{0,%d}(?=[^ \t\r\n#])" % indent).search(source, m.end())
        blocks.append((m.start(), end.start() if end else len(source)))
    return blocks


def imports_by_pattern(source: bytes, package: str = "") -> PythonFacts:
    """Imports of a file that is not parsed, read by pattern: close enough for the import graph (`if
    TYPE_CHECKING:` bodies are left out; an `import` line inside a docstring would count)."""
    facts = PythonFacts(parsed=False)
    blocks = _type_checking_blocks(source) if b"TYPE_CHECKING" in source else []
    line, counted = 1, 0
    for m in _IMPORT_WORD.finditer(source):
        at = m.start()
        start = source.rfind(b"\n", 0, at) + 1
        prefix = source[start:at]
        if prefix.strip():
            origin = _FROM_PREFIX.fullmatch(prefix)
            if origin is None:
                continue  # the word inside a line: prose, a string, `importlib`
        else:
            origin = None
        if blocks and any(a <= at < b for a, b in blocks):
            continue
        line += source.count(b"\n", counted, at)
        counted = at
        end = source.find(b"\n", m.end())
        rest = source[m.end() - 1:end if end >= 0 else len(source)]
        if rest.lstrip(b" \t").startswith(b"(") and b")" not in rest:
            close = source.find(b")", m.end())
            rest = source[m.end() - 1:close if close >= 0 else len(source)]
        text = b"\n".join(part.split(b"#", 1)[0] for part in rest.split(b"\n")).split(b";", 1)[0].decode(
            "utf-8", "replace")
        lazy = prefix[:1] in (b" ", b"\t")
        if origin is not None:
            module = origin.group(1).decode("ascii", "replace")
            level = len(module) - len(module.lstrip("."))
            target = absolute(module.lstrip(".") or None, level, package)
            if target:
                names = [n.split()[0] for n in text.replace("\n", ",").replace("\\", ",").strip("() \t\r").split(",")
                         if n.strip() and not n.strip().startswith("#")]
                facts.imports.append(Import(target, tuple(n.strip("()") for n in names if n.strip("()")), line, lazy))
        else:
            for part in text.split(","):
                words = part.split()
                if words:
                    facts.imports.append(Import(words[0], (), line, lazy))
    return facts
