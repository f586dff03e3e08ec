"""The kubelet's side of the device plugin API, for tests (no kubelet can run here): the Registration service on
kubelet.sock, recording each RegisterRequest, and a client of each plugin socket; and a plugin process as a user
starts it."""

from __future__ import annotations

import queue
import signal
import subprocess
from concurrent import futures
from pathlib import Path

import grpc

from tests.conftest import run_cli


class FakeKubelet:
    """Registration on <folder>/kubelet.sock; records each RegisterRequest."""

    def __init__(self, folder: Path) -> None:
        from fakegpu.k8s.proto import load

        self.folder, self.socket = folder, folder / "kubelet.sock"
        self.pb2, self.glue = load()
        self.registered: queue.Queue = queue.Queue()
        self.server = None

    def start(self) -> FakeKubelet:
        pb2, seen = self.pb2, self.registered

        class Registration(self.glue.RegistrationServicer):
            def Register(self, request, context):
                if request.version != "v1beta1":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"version {request.version} not supported")
                seen.put(request)
                return pb2.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.glue.add_RegistrationServicer_to_server(Registration(), self.server)
        assert self.server.add_insecure_port(f"unix:{self.socket}")
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(None).wait(5)
        self.socket.unlink(missing_ok=True)

    def registrations(self, count: int, timeout_s: float = 30) -> dict[str, object]:
        got = {}
        for _ in range(count):
            request = self.registered.get(timeout=timeout_s)
            got[request.resource_name] = request
        return got

    def plugin(self, endpoint: str):
        channel = grpc.insecure_channel(f"unix:{self.folder / endpoint}")
        return self.glue.DevicePluginStub(channel)


class Plugin:
    def __init__(self, process: subprocess.Popen, board: Path, spec: str) -> None:
        self.process, self.board, self.spec = process, board, spec

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return self.process.returncode, err

    def lose(self, gpu: int) -> None:
        result = run_cli("fault", "inject", "--xid", "79", "--device", str(gpu),
                         env={"FAKEGPU_STATE_DIR": str(self.board), "FAKEGPU_DEVICES": self.spec, "FAKEGPU_SEED": "0"})
        assert result.returncode == 0, result.stderr


