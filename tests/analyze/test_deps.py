"""Dependency files, each dependency at its file and line: requirements with -r/-c includes, pyproject.toml
through the TOML reader of the running Python (tomllib from 3.11, tomli before: both tested), setup.py literals
(never run), setup.cfg, conda environment files, entry_points.txt."""

from __future__ import annotations

import ast
import sys
import textwrap

import pytest

from fakegpu.analyze.repo import deps
from tests.analyze.conftest import analyze, write_tree

PYPROJECT = textwrap.dedent("""\
    [project]
    name = "demo"
    dependencies = ["torch>=2.4", "flash-attn==2.6.3; platform_system == 'Linux'"]

    [project.optional-dependencies]
    quant = ["bitsandbytes>=0.43"]

    [project.scripts]
    demo-train = "demo.train:main"

    [tool.poetry.dependencies]
    python = "^3.10"
    cupy-cuda12x = "*"
""")


def test_requirements_follow_includes(tmp_path):
    write_tree(tmp_path, {
        "requirements.txt": "-r requirements/base.txt\nflash_attn>=2  # fused attention\n-c missing.txt\n",
        "requirements/base.txt": "--extra-index-url https://download.pytorch.org/whl/cu124\nTorch==2.5.1\n"
                                 "-r ../requirements.txt\ngit+https://github.com/org/xformers.git#egg=xformers\n",
    })
    found, unread = deps.read_requirements(tmp_path / "requirements.txt", "requirements.txt", tmp_path)
    assert [(d.name, d.path, d.line, d.kind) for d in found] == [
        ("torch", "requirements/base.txt", 1, "cuda-libraries"), ("torch", "requirements/base.txt", 2, "torch"),
        ("xformers", "requirements/base.txt", 4, "xformers"), ("flash-attn", "requirements.txt", 2, "flash-attn")]
    assert [(u.path, u.line) for u in unread] == [("requirements.txt", 3)]
    assert "does not exist" in unread[0].reason


@pytest.mark.parametrize("version", [(3, 10, 14), sys.version_info[:3]])
def test_pyproject_with_the_reader_of_each_python(version):
    reader = deps.toml_reader(version)
    assert reader.__name__ == ("tomllib" if version >= (3, 11) else "tomli")
    found, scripts, unread = deps.read_pyproject(PYPROJECT, "pyproject.toml", reader)
    assert unread == []
    assert [(d.name, d.line, d.group, d.kind) for d in found] == [
        ("torch", 3, None, "torch"), ("flash-attn", 3, None, "flash-attn"), ("bitsandbytes", 6, "quant",
                                                                             "bitsandbytes"),
        ("cupy-cuda12x", 13, None, "cupy")]
    assert [(s.name, s.target, s.line) for s in scripts] == [("demo-train", "demo.train:main", 9)]


def test_no_toml_reader_is_reported_not_silent(monkeypatch):
    monkeypatch.setitem(sys.modules, "tomli", None)  # as on a 3.10 without tomli installed
    with pytest.raises(ImportError):
        deps.toml_reader((3, 10, 0))

    def no_reader():
        raise ImportError("No module named 'tomli'")

    monkeypatch.setattr(deps, "toml_reader", no_reader)
    found, scripts, unread = deps.read_pyproject(PYPROJECT, "pyproject.toml")
    assert found == [] and scripts == []
    assert "no TOML reader" in unread[0].reason and "install tomli" in unread[0].reason


def test_bad_toml_is_reported():
    _, _, unread = deps.read_pyproject("[project\n", "pyproject.toml")
    assert unread[0].reason.startswith("not valid TOML")


def test_setup_py_literals_and_names_bound_to_them():
    text = textwrap.dedent("""
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
        REQUIRED = ["torch>=2.1", "deepspeed"]
        setup(
            name="demo",
            install_requires=REQUIRED,
            extras_require={"nvml": ["nvidia-ml-py"], "dev": ["pytest"]},
            entry_points={"console_scripts": ["demo-serve = demo.serve:main"]},
            ext_modules=[CUDAExtension("demo._C", ["csrc/k.cu"])],
            cmdclass={"build_ext": BuildExtension},
        )
        setup(install_requires=read_requirements())
    """).lstrip()
    found, scripts, unread = deps.read_setup_py(ast.parse(text), text, "setup.py")
    assert [(d.name, d.line, d.group, d.kind) for d in found] == [
        ("torch", 3, None, "torch"), ("deepspeed", 3, None, "deepspeed"), ("nvidia-ml-py", 7, "nvml", "nvml"),
        ("pytest", 7, "dev", None)]
    assert [(s.name, s.target, s.line) for s in scripts] == [("demo-serve", "demo.serve:main", 8)]
    assert [(u.line, u.reason) for u in unread] == [(12, "setup(install_requires=...) is computed, not a literal: "
                                                         "not read")]


def test_setup_cfg():
    text = textwrap.dedent("""
        [metadata]
        name = demo
        [options]
        install_requires =
            torch>=2.2
            apex
        [options.extras_require]
        serve = vllm>=0.5
        [options.entry_points]
        console_scripts =
            demo-train = demo.train:main
    """).lstrip()
    found, scripts, unread = deps.read_setup_cfg(text, "setup.cfg")
    assert [(d.name, d.line, d.group, d.kind) for d in found] == [
        ("torch", 5, None, "torch"), ("apex", 6, None, "apex"), ("vllm", 8, "serve", "vllm")]
    assert [(s.name, s.target, s.line) for s in scripts] == [("demo-train", "demo.train:main", 11)]
    assert unread == []


def test_conda_environment_and_entry_points_txt():
    text = "name: gpu\ndependencies:\n  - python=3.11\n  - pytorch-cuda=12.1\n  - pip:\n    - triton==3.0\n"
    found, unread = deps.read_conda(text, "environment.yml")
    assert unread == []
    assert [(d.name, d.line, d.kind) for d in found] == [("python", 3, None), ("pytorch-cuda", 4, "cuda-libraries"),
                                                         ("triton", 6, "triton")]
    scripts = deps.read_entry_points_txt("[console_scripts]\ntool = pkg.cli:main\n[other]\nx = y:z\n",
                                         "pkg-1.0.dist-info/entry_points.txt")
    assert [(s.name, s.target, s.line) for s in scripts] == [("tool", "pkg.cli:main", 2)]


def test_all_of_them_in_one_report(tmp_path):
    write_tree(tmp_path, {
        "pyproject.toml": PYPROJECT,
        "setup.cfg": "[options]\ninstall_requires =\n    apex\n",
        "setup.py": "from setuptools import setup\nsetup(install_requires=['deepspeed'])\n",
        "requirements-dev.txt": "pynvml\n",
        "environment.yml": "dependencies:\n  - cudatoolkit=11.8\n",
        "demo/__init__.py": "",
        "demo/train.py": "import torch\ndef main():\n    torch.cuda.init()\n",
    })
    report = analyze(str(tmp_path))
    assert report["summary"]["gpu_dependencies"] == ["apex", "bitsandbytes", "cudatoolkit", "cupy-cuda12x",
                                                     "deepspeed", "flash-attn", "pynvml", "torch"]
    train = report["entries"][0]
    assert (train["name"], train["path"], train["verdict"]) == ("demo-train", "demo/train.py", "fakecuda")
    assert train["command"] == "fakegpu preflight --devices a100:1 -- demo-train"


def test_odd_but_valid_files_are_read_without_a_crash(tmp_path):
    write_tree(tmp_path, {
        "pyproject.toml": '[project]\ndependencies = "torch"\nscripts = ["x"]\noptional-dependencies = 3\n'
                          '[tool.poetry]\ngroup = ["dev"]\ndependencies = {torch = {version = "*", extras = 1}}\n',
        "compose.yaml": "services:\n  a:\n    deploy: [1, 2]\n  b: 3\n  c:\n    deploy: {resources: {reservations: "
                        "{devices: [{capabilities: gpu}, 7]}}}\n",
        ".github/workflows/ci.yml": "jobs:\n  a:\n    runs-on: 3\n    container: {}\n  b: []\n",
        "environment.yml": "- not a mapping\n",
        "README.md": "python setup.py build_ext --inplace\n",
    })
    report = analyze(str(tmp_path))
    assert [d["name"] for d in report["dependencies"]] == ["torch"]
    assert report["infrastructure"] == [] and report["entries"] == []
