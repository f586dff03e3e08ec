"""`fakegpu validate --init`: a starter manifest for the repository at hand. It runs green as written (nvidia-smi
and the interpreter's view of the fake GPUs, on two profiles) and carries, commented out, a case for each kind of
thing a team then adds: a training script with memory expectations, torchrun, a container. Python programs of the
repository that look like entry points (they import torch and run as __main__) are listed as suggestions, commented
too: a starter that fails on a machine without the repository's dependencies would teach the wrong lesson.
(FakeGPU has no repository analyser yet; when `analyze-repo` lands, its entry points belong here.)
"""

from __future__ import annotations

import re
from pathlib import Path

from fakegpu.errors import UsageError
from fakegpu.validate import report

DEFAULT_NAME = "fakegpu-validate.yaml"
# Where entry points are looked for: the top and one level down, not in environments, builds or tests.
_SKIP = {"node_modules", "site-packages", "build", "dist", "tests", "test", "__pycache__", "venv", "env"}
_SHOWN = 5
_IMPORTS_TORCH = re.compile(r"^\s*(import torch|from torch[ .])", re.MULTILINE)
_MAIN = re.compile(r"""^if __name__ == ['"]__main__['"]""", re.MULTILINE)

HEAD = """\
# fakegpu validate {name}
# Written by `fakegpu validate --init`; FakeGPU's README (its validate section) describes every key.
# Each case runs once per combination of the matrix, on fake GPUs of that profile; `expect` says what it must
# show. Uncomment and adapt the examples below, then run it in CI:
#   fakegpu validate {name} -j 2 --junit validate.xml --markdown "$GITHUB_STEP_SUMMARY"
defaults:
  timeout: 10m
matrix:
  profile: [t4, "a100:2"]           # device specs: t4, a100:2, h100:8, ...  (fakegpu profiles list)
  mode: [native]                    # native: CUDA programs as they are; fakecuda: PyTorch's math on the CPU
  include:                          # values per profile, for the expectations below
    - {{profile: t4, board: Tesla T4}}
    - {{profile: "a100:2", board: NVIDIA A100-SXM4-80GB}}
cases:
  - name: nvidia-smi
    command: [nvidia-smi, "--query-gpu=name", "--format=csv,noheader"]
    expect:
      stdout_matches: '^{{board}}$'
  - name: devices
    command: ["{{python}}", -c, "import json, os; print(json.dumps({{{{'spec': os.environ['FAKEGPU_DEVICES']}}}}))"]
    expect:
      json:
        - {{pointer: /spec, eq: "{{profile}}"}}
"""

EXAMPLES = """\
# A training step that must fit: PyTorch's peak on every device, and preflight's verdict.
#  - name: train-step
#    command: ["{python}", train.py, --steps, "2", --batch-size, "8"]
#    requires: {modules: torch}
#    env: {FAKEGPU_MEMORY: accounting}   # native mode: device memory counted, not kept in RAM
#    expect:
#      memory: {peak_reserved: "<= 14GiB"}
#      preflight: fits
# Two processes with torchrun; the whole tree is ended at the timeout.
#  - name: ddp
#    command: [torchrun, --nproc-per-node, "2", train.py, --steps, "2"]
#    requires: {binaries: torchrun, modules: torch}
#    timeout: 15m
# The same check in a container of your image, with --runtime=fakegpu (sudo fakegpu runtime install).
#  - name: in-image
#    mode: container
#    image: "my-org/trainer:latest"
#    command: [nvidia-smi, -L]
#    requires: {docker: true}
"""


def entry_points(repo: Path) -> list[Path]:
    """Python files near the top of `repo` that import torch and run as __main__, relative to it."""
    found = []
    for path in sorted([*repo.glob("*.py"), *repo.glob("*/*.py")]):
        parts = path.relative_to(repo).parts
        if any(p.startswith(".") or p in _SKIP or p.startswith("venv") for p in parts[:-1]):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:200_000]
        except OSError:
            continue
        if _IMPORTS_TORCH.search(text) and _MAIN.search(text):
            found.append(path.relative_to(repo))
    return found


def manifest_text(name: str, repo: Path) -> str:
    text = HEAD.format(name=name) + EXAMPLES
    scripts = entry_points(repo)
    if scripts:
        text += "# Programs of this repository that look like entry points (they import torch and run as __main__):\n"
        for script in scripts[:_SHOWN]:
            case = re.sub(r"[^A-Za-z0-9._-]+", "-", script.with_suffix("").as_posix()).strip("-") or "script"
            text += (f"#  - name: {case}\n#    command: [\"{{python}}\", {script.as_posix()}]\n"
                     "#    requires: {modules: torch}\n")
        if len(scripts) > _SHOWN:
            text += f"#  ... and {len(scripts) - _SHOWN} more\n"
    return text


def write(path: Path, repo: Path | None = None) -> Path:
    """Write the starter manifest at `path` (refusing to replace a file), for the repository `repo` (default:
    the manifest's folder)."""
    if path.exists():
        raise UsageError(f"--init: {path} exists; not replacing it (remove it, or name another file)")
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise UsageError(f"--init writes YAML: name a .yaml or .yml file, not {path.name}")
    report.write_text(path, manifest_text(path.name, (repo or path.resolve().parent)))
    return path
