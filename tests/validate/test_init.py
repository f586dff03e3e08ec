"""`fakegpu validate --init`: a starter manifest that validates and runs green on this repository, whose
commented examples are valid once uncommented, which lists the repository's entry points, and which never
replaces a file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.validate import plan, starter
from fakegpu.validate.manifest import load
from tests.conftest import REPO


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}


def _fakegpu(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", "validate", *args], cwd=cwd, capture_output=True,
                          text=True, env=_env(), timeout=180)


@pytest.mark.native
def test_init_on_this_repository_writes_a_manifest_that_runs_green(tmp_path: Path) -> None:
    # for this repository (its entry points), written beside a copy so the checkout stays as it is
    manifest = tmp_path / starter.DEFAULT_NAME
    manifest.write_text(starter.manifest_text(manifest.name, REPO))
    found = starter.entry_points(REPO)
    assert found and all(f'#    command: ["{{python}}", {f.as_posix()}]' in manifest.read_text() for f in found[:5])
    proc = _fakegpu(tmp_path, manifest.name, "-j", "2", "--out", "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("4 cases: 4 passed in ")


@pytest.mark.native
def test_the_cli_writes_it_once_and_it_runs(tmp_path: Path) -> None:
    proc = _fakegpu(tmp_path, "--init")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"wrote {starter.DEFAULT_NAME}; run it with: fakegpu validate {starter.DEFAULT_NAME}\n"
    assert _fakegpu(tmp_path, starter.DEFAULT_NAME, "--out", "out").returncode == 0
    again = _fakegpu(tmp_path, "--init")
    assert again.returncode == 2 and again.stderr == (
        f"fakegpu validate: error: --init: {starter.DEFAULT_NAME} exists; not replacing it (remove it, or name "
        "another file)\n")
    named = _fakegpu(tmp_path, "--init", "ci/gpu.yaml")
    assert named.returncode == 0 and (tmp_path / "ci" / "gpu.yaml").exists()
    assert _fakegpu(tmp_path, "--init", "gpu.json").returncode == 2
    nothing = _fakegpu(tmp_path)
    assert nothing.returncode == 2 and "no manifest given" in nothing.stderr


def test_its_examples_are_valid_once_uncommented(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n\nif __name__ == '__main__':\n    pass\n")
    text = starter.manifest_text("v.yaml", tmp_path)
    uncommented = "".join(line[1:] if re.match(r"#(  - |    )", line) else line for line in text.splitlines(True))
    path = tmp_path / "v.yaml"
    path.write_text(uncommented)
    m = load(path)
    assert [c.name for c in m.cases] == ["nvidia-smi", "devices", "train-step", "ddp", "in-image", "train"]
    assert len(plan(path, tmp_path / "out", ["nvidia-smi"]).cases) == 2


def test_entry_points_are_torch_programs_near_the_top(tmp_path: Path) -> None:
    main = "import torch\nif __name__ == \"__main__\":\n    pass\n"
    for name, text in {"train.py": main, "scripts/finetune.py": main.replace("import torch", "from torch import nn"),
                       "lib.py": "import torch\n", "cli.py": "if __name__ == '__main__':\n    pass\n",
                       ".venv/x.py": main, "tests/test_x.py": main, "a/b/deep.py": main}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert starter.entry_points(tmp_path) == [Path("scripts/finetune.py"), Path("train.py")]


WORKFLOW = REPO / "examples" / "validate" / "github-actions.yml"


@pytest.mark.native
def test_the_ci_workflow_example_runs_its_validate_step_as_written(tmp_path: Path) -> None:
    import shlex

    import yaml
    from junitparser import JUnitXml

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["validate"]["steps"]
    install = next(s["run"] for s in steps if s.get("name", "").startswith("Install FakeGPU"))
    assert "pip install -e" in install and 'make -C "$RUNNER_TEMP/fakegpu/native"' in install
    [command] = [s["run"] for s in steps if s.get("name") == "Validate on fake GPUs"]
    # the step as a runner runs it, on the manifest --init writes, with the step summary a file here
    argv = shlex.split(command.replace("$GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md")))
    assert argv[:3] == ["fakegpu", "validate", starter.DEFAULT_NAME]
    assert _fakegpu(tmp_path, "--init").returncode == 0
    proc = _fakegpu(tmp_path, *argv[2:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [s.tests for s in JUnitXml.fromfile(str(tmp_path / "validate.xml"))] == [4]
    assert "4 cases: 4 passed" in (tmp_path / "summary.md").read_text()
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "validate.xml" in upload["with"]["path"]
