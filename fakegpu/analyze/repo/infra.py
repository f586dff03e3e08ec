"""How a repository expects to be run, outside its Python: Dockerfiles (a CUDA base image, the command they
start), compose files that reserve GPUs, CI jobs on GPU runners, and the commands written in Dockerfiles, CI
files, Makefiles, shell scripts and READMEs (`python -m pkg.mod`, `python train.py`, `torchrun ...`), which
name entry points the packaging files do not declare."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

_CUDA_IMAGE = re.compile(r"(?i)^\s*FROM\s+(?:--platform=\S+\s+)?(\S*(?:nvidia/cuda|nvcr\.io/nvidia/|pytorch/pytorch:"
                         r"\S*cuda|cuda)\S*)", re.M)
# Docker's own flag, on a `docker run`/`create` line (not another tool's --gpus), with its value.
_GPUS_FLAG = re.compile(r"\bdocker[ \t]+(?:container[ \t]+)?(?:run|create)\b[^\n]*?(--gpus[= ]+[^\s-]\S*)")
_GPU_LABEL = re.compile(r"(?i)(gpu|cuda|nvidia|\ba100\b|\bh100\b|\bh200\b|\bl4\b|\bt4\b|\bv100\b|\bb200\b)")
# A command that runs Python code of the repository: launcher, then `-m module` or a script path. Words may be
# apart by blanks or by `", "` (a Dockerfile's exec form: CMD ["python3", "serve.py"]).
_GAP = r"(?:\s|\"\s*,\s*\"|'\s*,\s*')+"
_COMMAND = re.compile(r"(?P<launcher>\bpython[0-9.]*|\btorchrun|\bdeepspeed|\baccelerate\s+launch|"
                      r"torch\.distributed\.(?:run|launch))"
                      rf"(?P<options>(?:{_GAP}-{{1,2}}[\w-]+(?:(?:=|{_GAP})[^\s\"',\]-][^\s\"',\]]*)?)*?){_GAP}"
                      r"(?:-m" + _GAP + r"(?P<module>[A-Za-z_][\w.]*)|(?P<script>[\w./-]+\.py)\b)")


@dataclass
class Infra:
    kind: str  # cuda-base-image, docker-gpus, compose-gpu, ci-gpu-runner
    detail: str
    path: str
    line: int


@dataclass
class CommandRef:
    """A place outside Python that runs the repository's code."""

    launcher: str  # python, torchrun, deepspeed, accelerate launch
    module: str | None
    script: str | None
    path: str
    line: int
    in_gpu_image: bool = False  # a Dockerfile on a CUDA base image starts it


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def commands(text: str, rel: str) -> list[CommandRef]:
    out = []
    for m in _COMMAND.finditer(text):
        launcher = " ".join(m.group("launcher").split())
        if m.group("script") and m.group("script").rsplit("/", 1)[-1] == "setup.py":
            continue  # a build (`python setup.py build_ext`), not a program of the repository
        if launcher.startswith("python") and m.group("module") in ("pip", "venv", "ensurepip", "pytest", "build",
                                                                   "http.server", "json.tool", "site", "twine"):
            continue
        if launcher.startswith("torch.distributed"):
            launcher = "torchrun"
        out.append(CommandRef(launcher, m.group("module"), m.group("script"), rel, _line(text, m.start())))
    return out


def read_dockerfile(text: str, rel: str) -> tuple[list[Infra], list[CommandRef]]:
    found = [Infra("cuda-base-image", f"FROM {m.group(1)}", rel, _line(text, m.start()))
             for m in _CUDA_IMAGE.finditer(text)]
    found += [Infra("docker-gpus", m.group(1), rel, _line(text, m.start())) for m in _GPUS_FLAG.finditer(text)]
    refs = commands(text, rel)
    for ref in refs:
        ref.in_gpu_image = any(i.kind == "cuda-base-image" for i in found)
    return found, refs


def gpus_flags(text: str, rel: str) -> list[Infra]:
    """`docker run --gpus ...` written anywhere (a Makefile, a script, a README)."""
    return [Infra("docker-gpus", m.group(1), rel, _line(text, m.start())) for m in _GPUS_FLAG.finditer(text)]


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _load(text: str) -> object:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_compose(text: str, rel: str) -> tuple[list[Infra], str | None]:
    """Services that reserve NVIDIA GPUs (deploy.resources.reservations.devices with driver nvidia or capability
    gpu, `gpus:`, `runtime: nvidia`); the second value says why the file could not be read, if it could not."""
    try:
        doc = _load(text)
    except yaml.YAMLError as exc:
        return [], f"not valid YAML: {str(exc).splitlines()[0]}"
    services = doc.get("services") if isinstance(doc, dict) else None
    found = []
    for name, service in services.items() if isinstance(services, dict) else []:
        if not isinstance(service, dict):
            continue
        at = _line(text, max(text.find(f"{name}:"), 0))
        devices = _dict(_dict(_dict(service.get("deploy")).get("resources")).get("reservations")).get("devices")
        for device in devices if isinstance(devices, list) else []:
            capabilities = device.get("capabilities") if isinstance(device, dict) else None
            if isinstance(device, dict) and (device.get("driver") == "nvidia" or (
                    isinstance(capabilities, list) and "gpu" in capabilities)):
                count = device.get("count", device.get("device_ids", "all"))
                found.append(Infra("compose-gpu", f"service {name}: reserves GPUs ({count}) through "
                                                  f"{device.get('driver', 'capabilities: gpu')}", rel, at))
        if service.get("gpus") is not None:
            found.append(Infra("compose-gpu", f"service {name}: gpus: {service['gpus']}", rel, at))
        if service.get("runtime") == "nvidia":
            found.append(Infra("compose-gpu", f"service {name}: runtime: nvidia", rel, at))
    return found, None


def read_ci(text: str, rel: str) -> tuple[list[Infra], str | None]:
    """CI jobs that ask for a GPU: GitHub Actions `runs-on` labels, a job container on a CUDA image, GitLab tags."""
    try:
        doc = _load(text)
    except yaml.YAMLError as exc:
        return [], f"not valid YAML: {str(exc).splitlines()[0]}"
    found = []
    jobs = doc.get("jobs") if isinstance(doc, dict) and isinstance(doc.get("jobs"), dict) else (
        {k: v for k, v in doc.items() if isinstance(v, dict)} if isinstance(doc, dict) else {})
    for name, job in jobs.items():
        if not isinstance(job, dict):
            continue
        labels = job.get("runs-on", job.get("tags", []))
        if isinstance(labels, dict):
            labels = [labels.get("group", ""), *(labels.get("labels") or [])]
        for label in [labels] if isinstance(labels, str) else labels if isinstance(labels, list) else []:
            if isinstance(label, str) and _GPU_LABEL.search(label):
                found.append(Infra("ci-gpu-runner", f"job {name}: runs on {label}", rel,
                                   _line(text, max(text.find(label), 0))))
        container = job.get("container")
        image = container.get("image") if isinstance(container, dict) else container
        if isinstance(image, str) and "cuda" in image.lower():
            found.append(Infra("ci-gpu-runner", f"job {name}: container {image}", rel,
                               _line(text, max(text.find(image), 0))))
    return found, None
