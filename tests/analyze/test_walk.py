"""The walk honours .gitignore as git does (nested files, negation, folder rules, .git/info/exclude) and reports
every file it does not read, with the reason: ignored, too large (a 3 MiB file is named with its size, not
dropped), binary, unreadable, a syntax error, a folder link."""

from __future__ import annotations

import os

from fakegpu.analyze.repo.walk import Skips, kind_of, walk
from tests.analyze.conftest import analyze, write_tree


def test_gitignore_nested_negated_and_folder_rules(tmp_path):
    write_tree(tmp_path, {
        ".gitignore": "*.log\nbuild/\n!keep.log\n",
        "a.py": "", "a.log": "", "keep.log": "", "build/gen.py": "",
        "sub/.gitignore": "local_*.py\n!local_ok.py\n",
        "sub/local_x.py": "", "sub/local_ok.py": "", "sub/b.py": "", "sub/c.log": "",
        "other/local_x.py": "",  # the nested rule covers its own folder only
        ".git/info/exclude": "secret.py\n", ".git/HEAD": "ref: refs/heads/main\n", "secret.py": "",
    })
    skips = Skips()
    kept = [f.rel for f in walk(tmp_path, skips)]
    assert kept == [".gitignore", "a.py", "keep.log", "other/local_x.py", "sub/.gitignore", "sub/b.py",
                    "sub/local_ok.py"]
    ignored = {e["path"]: e["rule"] for e in skips.examples["ignored"]}
    assert ignored == {".git/": "git's own folder", "a.log": ".gitignore", "build/": ".gitignore",
                       "secret.py": ".gitignore", "sub/c.log": ".gitignore", "sub/local_x.py": ".gitignore"}
    assert skips.counts["ignored"] == 6


def test_kinds_by_name():
    assert [kind_of(p) for p in ("x.py", "nb.ipynb", "k.cu", "k.cuh", "k.ptx", "lib/x.so.1", "pyproject.toml",
                                 "setup.cfg", "requirements-dev.txt", "requirements/base.txt", "Dockerfile.gpu",
                                 "docker-compose.yml", ".github/workflows/ci.yml", "environment.yml", "Makefile",
                                 "README.md", "pkg-1.0.dist-info/entry_points.txt", "notes.txt")] == [
        "python", "notebook", "cuda-source", "cuda-source", "ptx", "shared-object", "pyproject", "setup-cfg",
        "requirements", "requirements", "dockerfile", "compose", "ci", "conda", "script", "doc", "entry-points",
        "other"]


def test_every_skip_is_reported_with_its_reason(tmp_path):
    big = "import torch\nx = torch.zeros(1).cuda()\n" + "# padding\n" * (3 * 2**20 // 10)
    write_tree(tmp_path, {
        "big.py": big,
        "broken.py": "import torch\nx = torch.cuda.synchronize(\n",
        "nul.py": b"import torch\x00\x01\x02",
        "bad.so": b"not an elf at all",
        "ok.py": "import torch\nif __name__ == '__main__':\n    torch.cuda.init()\n",
        "generated.py": "import torch\nx = " + " + ".join(["1"] * 20000) + "\ny = torch.zeros(1).cuda()\n",
    })
    os.symlink(tmp_path, tmp_path / "loop")
    report = analyze(str(tmp_path))
    skipped = report["skipped"]
    too_large = skipped["too-large"]["examples"][0]
    assert too_large["path"] == "big.py" and too_large["bytes"] == len(big.encode()) > 3 * 2**20 - 100
    assert too_large["limit"] == 2 * 2**20 and too_large["mentions_gpu_terms"] is True
    assert skipped["syntax-error"]["examples"] == [{"path": "broken.py", "line": 2, "error": "'(' was never closed"}]
    assert skipped["binary"]["examples"] == [{"path": "nul.py"}]
    assert skipped["unreadable"]["examples"][0]["path"] == "bad.so"
    assert skipped["link"]["examples"][0]["path"] == "loop/"
    assert skipped["too-deep"]["examples"] == [{"path": "generated.py", "error": "nested too deeply for Python's "
                                                "parser", "mentions_gpu_terms": True}]
    assert report["scanned"]["files"] == 6
    # a larger limit reads it
    report = analyze(str(tmp_path), "--max-file-size", "4MiB")
    assert "too-large" not in report["skipped"]
    assert ("big.py", 2, ".cuda()") in [(s["path"], s["line"], s["detail"]) for s in report["sites"]]


def test_a_syntax_error_does_not_cut_the_import_graph(tmp_path):
    write_tree(tmp_path, {
        "main.py": "import helper\nif __name__ == '__main__':\n    helper.go(\n",
        "helper.py": "import torch\ndef go():\n    torch.cuda.init()\n",
    })
    report = analyze(str(tmp_path), "--entry", str(tmp_path / "main.py"))
    assert report["skipped"]["syntax-error"]["count"] == 1
    assert report["entries"][0]["verdict"] == "fakecuda"


def test_the_enclosing_work_trees_rules_apply_to_a_subfolder(tmp_path):
    write_tree(tmp_path, {
        ".git/info/exclude": "*.secret\n",
        ".gitignore": "*.tmp\nproject/skip/\n",
        "project/.gitignore": "/local.py\n",
        "project/inner/.gitignore": "",
        "project/inner/a.tmp": "", "project/inner/b.secret": "", "project/inner/c.py": "",
        "project/inner/local.py": "",  # anchored to project/, not inner/
        "project/skip/x.py": "",
    })
    skips = Skips()
    kept = [f.rel for f in walk(tmp_path / "project" / "inner", skips)]
    assert kept == [".gitignore", "c.py", "local.py"]
    assert {e["path"] for e in skips.examples["ignored"]} == {"a.tmp", "b.secret"}
    kept = [f.rel for f in walk(tmp_path / "project", Skips())]
    assert kept == [".gitignore", "inner/.gitignore", "inner/c.py", "inner/local.py"]


def test_a_folder_the_work_tree_ignores_is_read_when_asked_for(tmp_path):
    # e.g. a virtual environment's site-packages/transformers inside a checkout that ignores .venv/
    write_tree(tmp_path, {".git/HEAD": "", ".gitignore": ".venv/\n*.tmp\n",
                          ".venv/lib/pkg/a.py": "", ".venv/lib/pkg/b.tmp": ""})
    assert [f.rel for f in walk(tmp_path / ".venv" / "lib" / "pkg", Skips())] == ["a.py", "b.tmp"]
