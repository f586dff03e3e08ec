"""The device plugin: one gRPC server per resource on a unix socket in the kubelet's device-plugins folder,
registered with the kubelet, as the v1beta1 API asks.

- ListAndWatch sends the resource's devices at once and again whenever one's health changes. Health comes from
  the node's fault board (fakegpu.faults): a GPU lost there (Xid 79, `fakegpu fault inject`) turns Unhealthy, with
  its MIG devices, and the kubelet stops scheduling onto it.
- A kubelet that restarts removes the plugins' sockets and forgets them: the plugin watches its registration
  socket and its own, and serves and registers again, as NVIDIA's plugin does.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fakegpu.errors import FakeGPUError
from fakegpu.k8s import allocation
from fakegpu.k8s.proto import load

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from fakegpu.devices import Device
    from fakegpu.k8s.resources import Resource

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


class RegistrationFailed(FakeGPUError):
    code = "device_plugin_registration"

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        # A kubelet restarting (or stopping mid-call) is met again; a refusal ends the plugin, as the API asks.
        self.transient = transient


class Health:
    """The GPUs lost on the node's fault board, looked at on demand; listeners wait for a change."""

    def __init__(self, inventory: Sequence[Device], state_dir: str | None) -> None:
        from fakegpu.faults.board import Watch

        self._indices = [d.index for d in inventory]
        self._watch = Watch(state_dir) if state_dir else None
        self._lost: frozenset[int] = frozenset()
        self.changed = threading.Condition()
        self.generation = 0

    @property
    def lost(self) -> frozenset[int]:
        return self._lost

    def poll(self) -> frozenset[int] | None:
        """Look at the board; the newly lost GPUs when the set changed (listeners are woken), else None."""
        if self._watch is None:
            return None
        now = frozenset(i for i in self._indices if self._watch.lost(i))
        if now == self._lost:
            return None
        with self.changed:
            fresh, self._lost = now - self._lost, now
            self.generation += 1
            self.changed.notify_all()
        return fresh

    def wake(self) -> None:
        with self.changed:
            self.generation += 1
            self.changed.notify_all()


def _servicer(pb2: Any, grpc_glue: Any, resource: Resource, inventory: Sequence[Device], strategies: Sequence[str],
              health: Health, stopping: threading.Event, log: Callable[[str], None]) -> Any:
    import grpc

    def devices_message() -> Any:
        lost = health.lost
        return pb2.ListAndWatchResponse(devices=[
            pb2.Device(ID=a.id, health=UNHEALTHY if a.gpu in lost else HEALTHY,
                       topology=pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=a.numa)]))
            for a in resource.devices])

    class Servicer(grpc_glue.DevicePluginServicer):
        def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
            return pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

        def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
            seen = -1
            while context.is_active() and not stopping.is_set():
                with health.changed:
                    if seen == health.generation:
                        health.changed.wait(timeout=1.0)
                    if seen == health.generation:
                        continue
                    seen = health.generation
                yield devices_message()

        def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
            out = []
            for req in request.container_requests:
                try:
                    ids = allocation.preferred(resource, inventory, list(req.available_deviceIDs),
                                               list(req.must_include_deviceIDs), req.allocation_size)
                except allocation.AllocationError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                out.append(pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
            return pb2.PreferredAllocationResponse(container_responses=out)

        def Allocate(self, request: Any, context: Any) -> Any:
            out = []
            for req in request.container_requests:
                ids = list(req.devices_ids)
                try:
                    edits = allocation.allocate(resource, ids, strategies)
                except allocation.AllocationError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                gone = [a.id for a in resource.devices if a.id in ids and a.gpu in health.lost]
                if gone:  # the kubelet raced a health update: refuse rather than start a container on a lost GPU
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"Allocate: {', '.join(gone)} {'is' if len(gone) == 1 else 'are'} unhealthy")
                log(f"{resource.name}: allocated {', '.join(ids)}")
                out.append(pb2.ContainerAllocateResponse(
                    envs=edits.envs, annotations=edits.annotations,
                    cdi_devices=[pb2.CDIDevice(name=n) for n in edits.cdi_devices]))
            return pb2.AllocateResponse(container_responses=out)

        def PreStartContainer(self, request: Any, context: Any) -> Any:
            return pb2.PreStartContainerResponse()

    return Servicer()


@dataclass
class _Served:
    resource: Resource
    path: str
    server: Any = None
    inode: tuple[int, int, int] | None = None  # the socket file we bound
    registered_to: tuple[int, int, int] | None = None  # the kubelet socket that knows about us


def _inode(path: str) -> tuple[int, int, int] | None:
    """A socket file's identity: a file made anew has another, even where the filesystem reuses the inode
    number at once."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _stderr(line: str) -> None:
    print(f"fakegpu device-plugin: {line}", file=sys.stderr, flush=True)


class DevicePlugin:
    """Serves `resources` (from fakegpu.k8s.resources) for the node whose GPUs are `inventory`."""

    def __init__(self, inventory: Sequence[Device], resources: Sequence[Resource],
                 plugin_dir: str = DEFAULT_PLUGIN_DIR, strategies: Sequence[str] = ("envvar",),
                 state_dir: str | None = None, cdi_spec: tuple[str, str] | None = None,
                 log: Callable[[str], None] = _stderr) -> None:
        """`cdi_spec`: (path, text) of the CDI spec the cdi-* strategies' names resolve against, written at start
        (and left there: a pod created while the plugin restarts still finds it)."""
        self.pb2, self.glue = load()
        if allocation.uses_cdi(strategies) and cdi_spec is None:
            raise RegistrationFailed("a cdi-* device list strategy needs FakeGPU's CDI spec to name devices in")
        self.inventory, self.plugin_dir, self.strategies, self.log = list(inventory), plugin_dir, strategies, log
        self.cdi_spec = cdi_spec
        self.health = Health(inventory, state_dir)
        self.stopping = threading.Event()
        self._served = [_Served(r, os.path.join(plugin_dir, r.socket_name)) for r in resources]

    @property
    def kubelet_socket(self) -> str:
        return os.path.join(self.plugin_dir, KUBELET_SOCKET)

    def _serve(self, s: _Served) -> None:
        import grpc

        if s.server is not None:
            s.server.stop(grace=None)
        try:
            os.unlink(s.path)  # a socket left by an earlier run of the plugin
        except FileNotFoundError:
            pass
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="device-plugin"))
        self.glue.add_DevicePluginServicer_to_server(
            _servicer(self.pb2, self.glue, s.resource, self.inventory, self.strategies, self.health, self.stopping,
                      self.log), server)
        if not server.add_insecure_port(f"unix:{s.path}"):
            raise RegistrationFailed(f"cannot listen on {s.path}")
        server.start()
        s.server, s.inode = server, _inode(s.path)

    def _register(self, s: _Served, timeout_s: float = 5.0) -> None:
        import grpc

        with grpc.insecure_channel(f"unix:{self.kubelet_socket}") as channel:
            stub = self.glue.RegistrationStub(channel)
            request = self.pb2.RegisterRequest(
                version=API_VERSION, endpoint=s.resource.socket_name, resource_name=s.resource.name,
                options=self.pb2.DevicePluginOptions(get_preferred_allocation_available=True))
            try:
                stub.Register(request, timeout=timeout_s)
            except grpc.RpcError as exc:
                transient = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                           grpc.StatusCode.DEADLINE_EXCEEDED)
                verb = "did not answer the registration of" if transient else "refused to register"
                raise RegistrationFailed(f"the kubelet ({self.kubelet_socket}) {verb} {s.resource.name}: "
                                         f"{exc.code().name}: {exc.details()}", transient) from exc
        self.log(f"registered {s.resource.name} ({len(s.resource.devices)} devices) on {s.path}")

    def start(self) -> None:
        """Serve every resource and register each with the kubelet."""
        if not os.path.isdir(self.plugin_dir):
            raise RegistrationFailed(f"the kubelet's device-plugins folder {self.plugin_dir} does not exist "
                                     "(is this a Kubernetes node? --plugin-dir names another)")
        kubelet = _inode(self.kubelet_socket)
        if not kubelet:
            raise RegistrationFailed(f"no kubelet registration socket at {self.kubelet_socket}")
        if self.cdi_spec is not None:
            self._write_cdi_spec(*self.cdi_spec)
        try:
            for s in self._served:
                self._serve(s)
                self._register_or_retry(s, kubelet)
        except BaseException:
            self.stop()
            raise

    def _register_or_retry(self, s: _Served, kubelet: tuple[int, int, int]) -> None:
        """Register `s`; a kubelet that did not answer is tried again at the next step."""
        try:
            self._register(s)
        except RegistrationFailed as exc:
            if not exc.transient:
                raise
            self.log(f"{exc.message}; trying again")
        else:
            s.registered_to = kubelet

    def _write_cdi_spec(self, path: str, text: str) -> None:
        from fakegpu.atomic_file import write_atomic

        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    return
        except OSError:
            pass
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            write_atomic(path, text, 0o644)
        except OSError as exc:
            raise RegistrationFailed(f"cannot write the CDI spec {path}: {exc.strerror or exc}") from exc
        self.log(f"wrote the CDI spec {path}")

    def step(self) -> None:
        """One look at the board and at the sockets: health updates; a socket the kubelet removed served again,
        and a restarted kubelet registered with again (retried at each step until it answers)."""
        fresh = self.health.poll()
        for gpu in sorted(fresh or ()):
            self.log(f"GPU {gpu} ({self.inventory[gpu].uuid}) is lost on the fault board: Unhealthy")
        kubelet = _inode(self.kubelet_socket)
        for s in self._served:
            if _inode(s.path) != s.inode:
                self.log(f"{s.path} went away (a kubelet restart removes the plugins' sockets): serving "
                         f"{s.resource.name} again")
                self._serve(s)
                s.registered_to = None
            if kubelet and s.registered_to != kubelet:
                self._register_or_retry(s, kubelet)

    def run(self, poll_s: float = 0.5) -> None:
        """Serve until stop() (or a signal that calls it)."""
        self.start()
        while not self.stopping.wait(poll_s):
            self.step()

    def stop(self) -> None:
        self.stopping.set()
        self.health.wake()
        for s in self._served:
            if s.server is not None:
                s.server.stop(grace=1.0).wait(2.0)
                s.server = None
            try:
                if _inode(s.path) == s.inode:  # only our own socket, not a successor's
                    os.unlink(s.path)
            except FileNotFoundError:
                pass

