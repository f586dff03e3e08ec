"""images/inputs-digest.sh: the digest that decides whether fakegpu/pytorch is rebuilt. A change it misses would
leave the image running old code under the container and cluster tests; one it sees without cause costs a 90 s build
at every test module that asks for the image."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A small git checkout laid out as this one: the script, a package, the hook, pyproject, an ignored build."""
    root = tmp_path / "repo"
    (root / "images").mkdir(parents=True)
    shutil.copy(REPO / "images" / "inputs-digest.sh", root / "images")
    (root / "fakegpu").mkdir()
    (root / "fakegpu" / "core.py").write_text("VALUE = 1\n")
    (root / "hook" / "fakegpu_hook").mkdir(parents=True)
    (root / "hook" / "fakegpu_hook" / "main.py").write_text("pass\n")
    (root / "pyproject.toml").write_text('[project]\nname = "fakegpu"\n')
    (root / "README.md").write_text("users\n")
    (root / "Dockerfile").write_text("FROM base\n")
    (root / ".gitignore").write_text("__pycache__/\n*_pb2.py\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return root


def digest(root: Path, *files: str, params: str = "torch=2.15.0") -> str:
    proc = subprocess.run([str(root / "images" / "inputs-digest.sh"), *files], input=params, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    value = proc.stdout.strip()
    assert len(value) == 64 and int(value, 16) >= 0, value
    return value


def test_same_inputs_same_digest(checkout: Path) -> None:
    assert digest(checkout, "Dockerfile") == digest(checkout, "Dockerfile")


def test_every_input_moves_the_digest(checkout: Path) -> None:
    seen = {digest(checkout, "Dockerfile")}

    def changed() -> None:
        value = digest(checkout, "Dockerfile")
        assert value not in seen
        seen.add(value)

    (checkout / "fakegpu" / "core.py").write_text("VALUE = 2\n")  # an uncommitted edit
    changed()
    (checkout / "fakegpu" / "new.py").write_text("pass\n")  # an untracked module
    changed()
    (checkout / "fakegpu" / "new.py").rename(checkout / "fakegpu" / "renamed.py")  # same bytes, other name
    changed()
    (checkout / "hook" / "fakegpu_hook" / "main.py").write_text("import os\n")
    changed()
    (checkout / "pyproject.toml").write_text('[project]\nname = "fakegpu"\ndependencies = ["pyyaml"]\n')
    changed()
    (checkout / "Dockerfile").write_text("FROM base\nRUN true\n")  # a file the caller names
    changed()
    (checkout / "fakegpu" / "core.py").unlink()  # a tracked file deleted from the working tree
    changed()
    assert digest(checkout, "Dockerfile", params="torch=2.14.0") not in seen  # the build parameters


def test_what_is_not_in_the_image_leaves_it_alone(checkout: Path) -> None:
    before = digest(checkout, "Dockerfile")
    (checkout / "README.md").write_text("more for users\n")
    (checkout / "fakegpu" / "__pycache__").mkdir()
    (checkout / "fakegpu" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0" * 16)
    (checkout / "fakegpu" / "api_pb2.py").write_text("generated = True\n")  # ignored: made from a tracked .proto
    assert digest(checkout, "Dockerfile") == before


def test_outside_a_git_checkout_it_prints_nothing(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    shutil.copy(REPO / "images" / "inputs-digest.sh", tmp_path / "images")
    proc = subprocess.run([str(tmp_path / "images" / "inputs-digest.sh")], input="", capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})
    assert proc.returncode == 0 and proc.stdout == "", (proc.stdout, proc.stderr)
