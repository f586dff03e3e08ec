"""Streaming reader of PyTorch profiler (Kineto) traces, `.json` or `.json.gz`.

A trace is one JSON object: header keys (`schemaVersion`, `deviceProperties`, `distributedInfo`, ...), the
`traceEvents` array, then trailing keys (`traceName`, `baseTimeNanoseconds`). The standard library has no streaming
JSON parser and a trace can be gigabytes, so the object is walked by hand: text is read in chunks, each top-level
value and each event is decoded on its own with the C scanner behind `JSONDecoder.raw_decode`, and only the
current chunk is ever held. Header keys that come after the events (as some writers put them) are read too, so
`header` is complete only once `events()` is exhausted.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fakegpu.errors import TraceError
from fakegpu.user_files import TOO_DEEP, UnreadableFile, open_regular

CHUNK_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_WS = " \t\n\r"


class TraceFile:
    """One trace file, read once from start to end: iterate `events()`, then `header` holds every other key."""

    def __init__(self, path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = Path(path)
        self.header: dict[str, Any] = {}
        self.events_seen = 0
        self._chunk = chunk_bytes
        self._decoder = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._consumed = 0  # characters dropped from the front of _buf so far, for messages
        self._eof = False
        self._raw: BinaryIO | None = None
        self._text: Any = None
        self.compressed = False

    # --- low level: the character buffer ---------------------------------------------------------------------
    def _fail(self, reason: str) -> TraceError:
        return TraceError(str(self.path), reason)

    def _where(self) -> str:
        return f"character {self._consumed + self._pos:,}, after {self.events_seen:,} event(s)"

    def _open(self) -> None:
        try:
            raw = open_regular(self.path)
        except UnreadableFile as exc:
            raise self._fail(f"cannot open: {exc}") from exc
        magic = raw.read(2)
        raw.seek(0)
        self.compressed = magic == _GZIP_MAGIC
        self._raw = gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw
        self._file = raw
        self._text = codecs.getincrementaldecoder("utf-8")(errors="strict")

    def _fill(self) -> bool:
        """Append the next chunk; False at the end of the file."""
        if self._eof:
            return False
        try:
            data = self._raw.read(self._chunk)
        except (OSError, EOFError, zlib.error) as exc:
            kind = "gzip stream" if self.compressed else "file"
            if isinstance(exc, EOFError):
                raise self._fail(f"the gzip stream ends early (truncated .gz) at {self._where()}") from exc
            raise self._fail(f"cannot read the {kind} at {self._where()}: {exc}") from exc
        try:
            text = self._text.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise self._fail(f"not UTF-8 text near {self._where()}: not a JSON trace") from exc
        if self._pos > len(self._buf) // 2:
            self._consumed += self._pos
            self._buf = self._buf[self._pos:]
            self._pos = 0
        self._buf += text
        if not data:
            self._eof = True
        return bool(data) or bool(text)

    def _skip_ws(self) -> str:
        """The next non-blank character (not consumed); '' at the end of the file."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str, what: str) -> str:
        c = self._skip_ws()
        if c == "":
            raise self._fail(f"the trace is truncated: it ends at {self._where()} where {what} should follow")
        if c not in chars:
            raise self._fail(f"malformed JSON at {self._where()}: expected {what}, found {c!r}")
        self._pos += 1
        return c

    def _value(self, what: str | None) -> Any:
        """Decode one JSON value at the cursor, reading more text until it is complete. `what` names it in
        messages; None: the next event (named only when needed, as events are millions)."""
        if self._skip_ws() == "":
            what = what or self._next_event()
            raise self._fail(f"the trace is truncated: it ends at {self._where()} where {what} should follow")
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                what = what or self._next_event()
                if self._cut_short(exc):
                    if not self._eof:
                        self._fill()  # the chunk boundary cut the value: read on
                        continue
                    raise self._fail(f"the trace is truncated: it ends inside {what} at {self._where()}") from exc
                raise self._fail(f"malformed JSON in {what} at character {self._consumed + exc.pos:,} "
                                 f"(after {self.events_seen:,} event(s)): {exc.msg}") from exc
            except RecursionError:
                raise self._fail(f"{what or self._next_event()} at {self._where()} is {TOO_DEEP}") from None
            # A number or literal that touches the end of the buffer may continue in the next chunk.
            if end >= len(self._buf) and not self._eof and not isinstance(value, dict | list | str):
                self._fill()
                continue
            self._pos = end
            return value

    def _next_event(self) -> str:
        return f"event {self.events_seen + 1:,}"

    def _cut_short(self, exc: json.JSONDecodeError) -> bool:
        """Whether the scanner failed only because the text ran out: it stops at the very end, or at the start of
        a string that never closes."""
        if len(self._buf) - exc.pos <= 8:
            return True
        return exc.msg.startswith("Unterminated string") and '"' not in self._buf[exc.pos + 1:]

    # --- the document ---------------------------------------------------------------------------------------
    def events(self) -> Iterator[Any]:
        """Every element of `traceEvents`, in file order, decoded; the header keys around it land in `header`."""
        self._open()
        try:
            yield from self._document()
        finally:
            self._raw.close()
            self._file.close()

    def _document(self) -> Iterator[Any]:
        first = self._skip_ws()
        if first == "":
            raise self._fail("the file is empty: not a trace")
        if first != "{":
            raise self._fail(f"not a Kineto trace: a trace is a JSON object, the file starts with {first!r}")
        self._pos += 1
        saw_events = False
        if self._skip_ws() == "}":
            self._pos += 1
        else:
            while True:
                key = self._value("a key of the trace object")
                if not isinstance(key, str):
                    raise self._fail(f"malformed JSON at {self._where()}: an object key must be a string")
                self._expect(":", "':' after a key")
                if key == "traceEvents":
                    saw_events = True
                    yield from self._event_array()
                else:
                    self.header[key] = self._value(f"the value of {key!r}")
                if self._expect(",}", "',' or '}'") == "}":
                    break
        if self._skip_ws() != "":
            raise self._fail(f"text after the end of the trace object at {self._where()}")
        if not saw_events:
            raise self._fail("not a Kineto trace: no \"traceEvents\" array (keys: "
                             f"{', '.join(sorted(self.header)) or 'none'})")

    def _event_array(self) -> Iterator[Any]:
        if self._expect("[", "'[' opening traceEvents") != "[":
            return
        if self._skip_ws() == "]":
            self._pos += 1
            return
        while True:
            event = self._value(None)
            self.events_seen += 1
            yield event
            c = self._expect(",]", "',' or ']' after an event")
            if c == "]":
                return
            # Some writers leave a trailing comma before the closing bracket.
            if self._skip_ws() == "]":
                self._pos += 1
                return
