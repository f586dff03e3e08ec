"""A Kubernetes API server that only replays: each request the real `kubernetes` client sends is checked against
the next recorded exchange of its kind (method, path, query; the body where one is expected) and answered with the
recorded response: JSON, a watch's event stream, or an exec's websocket (channel protocol v4.channel.k8s.io: one
byte naming stdout/stderr/error, then the data, the error channel carrying the exit Status). Anything unexpected
gets a 500 naming the mismatch and is kept in `problems`, which the tests assert empty. No API server can run on
this machine; what these fixtures hold is the wire form of the API reference (paths, verbs, Status bodies)."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's, for Sec-WebSocket-Accept


@dataclass
class Exchange:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    body: Any = None            # a subset the request body must contain (dicts by key, lists item by item)
    status: int = 200
    response: Any = None        # JSON document
    watch: list[dict] | None = None          # watch events, one JSON line each
    exec_out: list[tuple[int, bytes]] | None = None  # (channel, data) frames
    exec_status: dict | None = None          # the error channel's Status
    optional: bool = False      # may not come (a request whose timing the test does not decide)
    seen: Any = None            # the request body as received


def contains(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            contains(a, e) for a, e in zip(actual, expected, strict=True))
    return actual == expected


class FakeApiServer:
    def __init__(self, exchanges: list[Exchange]) -> None:
        self.exchanges = list(exchanges)
        self.used: list[Exchange] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def unused(self) -> list[str]:
        return [f"{e.method} {e.path}" for e in self.exchanges if not e.optional]

    def kubeconfig(self, folder: Path, namespace: str = "rehearse") -> Path:
        path = folder / "kubeconfig"
        path.write_text(json.dumps({  # YAML's superset: kubectl and the client read it
            "apiVersion": "v1", "kind": "Config", "current-context": "fixture",
            "clusters": [{"name": "fixture", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fixture-token"}}],
            "contexts": [{"name": "fixture", "context": {"cluster": "fixture", "user": "tester",
                                                          "namespace": namespace}}],
        }))
        return path

    def _take(self, method: str, path: str, query: dict[str, list[str]]) -> Exchange | None:
        with self.lock:
            for e in self.exchanges:
                if e.method == method and e.path == path and e.query == query:
                    self.exchanges.remove(e)
                    self.used.append(e)
                    return e
            self.problems.append(f"unexpected {method} {path} {query}")
            return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _serve(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query, keep_blank_values=True)
                if self.headers.get("Authorization") != "Bearer fixture-token":
                    server.problems.append(f"{self.command} {url.path} without the kubeconfig's token")
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                e = server._take(self.command, url.path, query)
                if e is None:
                    self._send(500, json.dumps({"message": "no such exchange in the fixture"}).encode())
                    return
                if raw:
                    e.seen = json.loads(raw)
                if e.body is not None and not contains(e.seen, e.body):
                    server.problems.append(f"{self.command} {url.path}: body {e.seen} lacks {e.body}")
                if e.exec_out is not None:
                    self._websocket(e)
                elif e.watch is not None:
                    self._send(200, b"".join(json.dumps(ev).encode() + b"\n" for ev in e.watch))
                else:
                    self._send(e.status, json.dumps(e.response).encode())

            def _websocket(self, e: Exchange) -> None:
                if self.headers.get("Upgrade", "").lower() != "websocket" or \
                        "v4.channel.k8s.io" not in self.headers.get("Sec-WebSocket-Protocol", ""):
                    server.problems.append(f"exec {self.path} without a websocket upgrade for v4.channel.k8s.io")
                key = self.headers.get("Sec-WebSocket-Key", "")
                accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
                self.end_headers()
                frames = [bytes([c]) for c in (1, 2, 3)]  # the API server opens each channel with an empty frame
                frames += [bytes([c]) + data for c, data in e.exec_out or []]
                frames.append(b"\x03" + json.dumps(e.exec_status).encode())
                for payload in frames:
                    self.wfile.write(_frame(0x2, payload))
                self.wfile.write(_frame(0x8, struct.pack("!H", 1000)))
                self.wfile.flush()
                self.close_connection = True

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        return Handler


def _frame(opcode: int, payload: bytes) -> bytes:
    """A server frame (never masked), FIN set."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload
