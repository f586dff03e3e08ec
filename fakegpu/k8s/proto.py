"""Python messages and gRPC glue for the APIs FakeGPU speaks, compiled from our .proto files with grpcio-tools:
deviceplugin.proto (the kubelet's device plugin API) and cri.proto (the part of the CRI the tests drive a real
containerd with).

`make` compiles them next to the .proto files (they are build outputs, not in git). An install that did not (a
wheel built elsewhere, a read-only site-packages) compiles them at first use into a cache folder keyed by the
.proto files' digest, so an edited .proto never meets stale messages.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from fakegpu.errors import FakeGPUError

HERE = Path(__file__).resolve().parent
APIS = ("deviceplugin", "cri")
_STAMP = "protos.sha256"
_MODULES = tuple(f"{api}_pb2{glue}" for api in APIS for glue in ("", "_grpc"))


class ProtoUnavailable(FakeGPUError):
    """grpcio (or, to compile the API, grpcio-tools) is not installed."""

    code = "proto_unavailable"


def _digest() -> str:
    h = hashlib.sha256()
    for api in APIS:
        h.update((HERE / f"{api}.proto").read_bytes())
    return h.hexdigest()


def _current(folder: Path, digest: str) -> bool:
    try:
        return (folder / _STAMP).read_text().strip() == digest and all(
            (folder / f"{m}.py").is_file() for m in _MODULES)
    except OSError:
        return False


def compile_to(folder: Path) -> None:
    """Compile the .proto files into `folder` (which plays fakegpu/k8s/: the glue imports the messages as
    fakegpu.k8s.<api>_pb2)."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:
        raise ProtoUnavailable("the device plugin's API is compiled with grpcio-tools, which is not installed "
                               "(pip install 'fakegpu[k8s]')") from exc
    import importlib.resources

    staging = folder.parent / f".{folder.name}.staging-{os.getpid()}"
    root = staging / "root"
    try:
        (root / "fakegpu" / "k8s").mkdir(parents=True, exist_ok=True)
        for api in APIS:
            (root / "fakegpu" / "k8s" / f"{api}.proto").write_bytes((HERE / f"{api}.proto").read_bytes())
        includes = str(importlib.resources.files("grpc_tools") / "_proto")
        status = protoc.main(["protoc", f"-I{root}", f"-I{includes}", f"--python_out={root}",
                              f"--grpc_python_out={root}", *(f"fakegpu/k8s/{api}.proto" for api in APIS)])
        if status != 0:
            raise FakeGPUError(f"protoc failed ({status}) on {', '.join(APIS)} in {HERE}")
        folder.mkdir(parents=True, exist_ok=True)
        for name in _MODULES:
            # rename() puts each file in place whole: a concurrent importer sees the old file or the new one
            os.replace(root / "fakegpu" / "k8s" / f"{name}.py", folder / f"{name}.py")
        (folder / _STAMP).write_text(_digest() + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cache_folder(digest: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "fakegpu" / "deviceplugin-api" / digest[:16] / "fakegpu" / "k8s"


def ensure_compiled() -> Path:
    """The folder holding current compiled modules: this package's own, else the cache's (compiling as needed)."""
    digest = _digest()
    if _current(HERE, digest):
        return HERE
    if os.access(HERE, os.W_OK):
        compile_to(HERE)
        return HERE
    cached = _cache_folder(digest)
    if not _current(cached, digest):
        compile_to(cached)
    return cached


def load(api: str = "deviceplugin") -> tuple[ModuleType, ModuleType]:
    """(messages, grpc glue) of `api`, compiling them first where needed."""
    try:
        import grpc  # noqa: F401
    except ImportError as exc:
        raise ProtoUnavailable("the device plugin needs grpcio, which is not installed "
                               "(pip install 'fakegpu[k8s]')") from exc
    folder = ensure_compiled()
    package = sys.modules["fakegpu.k8s"]
    if str(folder) not in package.__path__:
        package.__path__.append(str(folder))
    return (importlib.import_module(f"fakegpu.k8s.{api}_pb2"),
            importlib.import_module(f"fakegpu.k8s.{api}_pb2_grpc"))


if __name__ == "__main__":  # `python -m fakegpu.k8s.proto`: what `make` runs
    print(ensure_compiled())
