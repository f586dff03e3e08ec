"""Verdicts per entry point over the import graph, with their reasons and commands; entry points found from every
source (console scripts, __main__ blocks that run, __main__.py, commands in Dockerfiles/READMEs, notebooks);
errors for a missing folder, a file as PATH, an --entry not in the tree."""

from __future__ import annotations

import json

from tests.analyze.conftest import analyze, analyze_error, entry, shared_object, write_tree


def test_one_entry_per_path_each_with_its_command(tmp_path):
    write_tree(tmp_path, {
        "cpu_job.py": "import json\nif __name__ == '__main__':\n    print(json.dumps({}))\n",
        "train.py": """
            import torch
            from lib import helpers
            if __name__ == "__main__":
                helpers.run()
        """,
        "lib/__init__.py": "",
        "lib/helpers.py": "import torch\ndef run():\n    torch.zeros(2, device='cuda')\n",
        "smi.py": "from pynvml import nvmlInit\nif __name__ == '__main__':\n    nvmlInit()\n",
        "kernel.py": """
            import triton
            import triton.language as tl
            @triton.jit
            def add(x, n: tl.constexpr):
                pass
            if __name__ == "__main__":
                add[(1,)](None, 1)
        """,
    })
    report = analyze(str(tmp_path))
    got = {e["path"]: (e["verdict"], e["command"]) for e in report["entries"]}
    assert got == {
        "cpu_job.py": ("cpu", "python cpu_job.py"),
        "train.py": ("fakecuda", "fakegpu preflight --devices a100:1 -- python train.py"),
        "smi.py": ("native", "fakegpu run --devices a100:1 -- python smi.py"),
        "kernel.py": ("real-gpu", "fakegpu run --devices a100:1 -- python kernel.py"),
    }
    train = entry(report, "train.py")
    reason = train["reasons"][0]
    assert (reason["kind"], reason["path"], reason["site"], reason["via"]) == (
        "torch-cuda", "fakecuda", {"path": "lib/helpers.py", "line": 3, "detail": 'device="cuda"'},
        ["train.py:2", "lib/helpers.py"])  # train.py's line 2 imports it
    assert "real numerics" in train["meaning"]
    assert "rehearses" in entry(report, "kernel.py")["meaning"]
    assert report["summary"]["verdict"] == "real-gpu"
    assert report["summary"]["entries_by_verdict"] == {"cpu": 1, "fakecuda": 1, "native": 1, "container": 0,
                                                       "real-gpu": 1}


def test_optional_libraries_do_not_decide_but_are_named(tmp_path):
    write_tree(tmp_path, {
        "app.py": """
            import torch
            try:
                import flash_attn
            except ImportError:
                flash_attn = None
            if __name__ == "__main__":
                torch.cuda.init()
        """,
    })
    app = entry(analyze(str(tmp_path)), "app.py")
    assert app["verdict"] == "fakecuda"
    assert [(r["kind"], r["optional"]) for r in app["reasons"]] == [("torch-cuda", False), ("flash-attn", True)]
    assert app["notes"] == ["with its optional packages installed it reaches flash-attn: that path needs real-gpu"]


def test_a_module_reached_only_through_a_conditional_import_is_optional(tmp_path):
    write_tree(tmp_path, {
        "fast.py": "import flash_attn\ndef attend(q):\n    return flash_attn.flash_attn_func(q, q, q)\n",
        "soft.py": "import torch\ntry:\n    import fast\nexcept ImportError:\n    fast = None\n"
                   "if __name__ == '__main__':\n    torch.cuda.init()\n",
        "hard.py": "import torch\nimport fast\nif __name__ == '__main__':\n    torch.cuda.init()\n",
    })
    report = analyze(str(tmp_path))
    soft, hard = entry(report, "soft.py"), entry(report, "hard.py")
    assert soft["verdict"] == "fakecuda" and hard["verdict"] == "real-gpu"
    assert [(r["kind"], r["optional"]) for r in soft["reasons"]] == [("torch-cuda", False), ("flash-attn", True)]
    first = hard["reasons"][0]
    assert (first["kind"], first["optional"], first["via"]) == ("flash-attn", False, ["hard.py:2", "fast.py"])


def test_a_reexported_optional_name_stays_optional(tmp_path):
    write_tree(tmp_path, {
        "compat.py": "try:\n    import triton\nexcept ImportError:\n    triton = None\n",
        "kernels.py": "from compat import triton\n@triton.jit\ndef k(x):\n    pass\n",
        "main.py": "import kernels\nif __name__ == '__main__':\n    print(kernels)\n",
        "hard.py": "import triton\n@triton.jit\ndef k(x):\n    pass\nif __name__ == '__main__':\n    k()\n",
    })
    report = analyze(str(tmp_path))
    main = entry(report, "main.py")
    assert main["verdict"] == "cpu"
    assert [(r["kind"], r["site"]["path"], r["site"]["line"], r["optional"]) for r in main["reasons"]] == [
        ("triton-kernel", "kernels.py", 2, True)]
    # (and `import kernels` there is the tree's own kernels.py, not Hugging Face's package: no hub-kernels site)
    assert entry(report, "hard.py")["verdict"] == "real-gpu"


def test_entry_points_from_every_source(tmp_path):
    write_tree(tmp_path, {
        "pyproject.toml": '[project]\nname = "p"\n[project.scripts]\np-train = "pkg.train:main"\n'
                          'p-gone = "pkg.gone:main"\np-typo = "pkg.train:mian"\n',
        "pkg/__init__.py": "",
        "pkg/train.py": "import torch\ndef main():\n    torch.cuda.init()\n",
        "pkg/__main__.py": "from pkg.train import main\nmain()\n",
        "pkg/worker.py": "import torch.distributed as dist\ndist.init_process_group('nccl')\n",
        "tools/empty.py": "if __name__ == '__main__':\n    pass\n",
        "tests/test_x.py": "import unittest\nif __name__ == '__main__':\n    unittest.main()\n",
        "Dockerfile": "FROM python:3.11\nCMD [\"torchrun\", \"--nproc-per-node\", \"4\", \"-m\", \"pkg.worker\"]\n",
        "nb.ipynb": json.dumps({"cells": [
            {"cell_type": "markdown", "source": ["# title"]},
            {"cell_type": "code", "source": ["!pip install torch\n", "import torch\n"]},
            {"cell_type": "code", "source": ["%time x = 1\n", "y = torch.ones(1).cuda()\n"]}]}),
    })
    report = analyze(str(tmp_path))
    got = {e["path"]: (e["name"], [d["how"] for d in e["declared_by"]], e["verdict"]) for e in report["entries"]}
    assert got == {
        "pkg/train.py": ("p-train", ["console-script", "console-script"], "fakecuda"),  # p-train and p-typo
        "pkg/__main__.py": ("pkg", ["main-module"], "fakecuda"),
        "pkg/worker.py": ("pkg/worker.py", ["command"], "fakecuda"),
        "nb.ipynb": ("nb.ipynb", ["notebook"], "fakecuda"),
    }
    assert entry(report, "pkg/worker.py")["command"] == (
        "fakegpu run --mode fakecuda --devices a100:2 -- torchrun --nproc-per-node 2 -m pkg.worker")
    assert entry(report, "pkg/__main__.py")["command"] == "fakegpu preflight --devices a100:1 -- python -m pkg"
    notebook = entry(report, "nb.ipynb")
    assert notebook["reasons"][0]["site"] == {"path": "nb.ipynb", "line": 2, "cell": 2, "detail": ".cuda()"}
    assert entry(report, "pkg/train.py")["notes"] == ["p-typo: pkg.train defines no mian at top level"]
    assert [(u["detail"], u["reason"]) for u in report["unresolved_entries"]] == [
        ("p-gone = pkg.gone:main", "module pkg.gone is not in the tree")]
    assert sorted((n["path"], n["reason"]) for n in report["not_entries"]) == [
        ("tests/test_x.py", "its __main__ block only starts a test runner"),
        ("tools/empty.py", "its __main__ block does nothing")]


def test_container_route_and_prebuilt_cuda(tmp_path):
    write_tree(tmp_path, {
        "Dockerfile.gpu": "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nCMD python3 serve.py\n",
        "serve.py": "import fastops\nif __name__ == '__main__':\n    fastops.run()\n",
        "fastops.cpython-311-x86_64-linux-gnu.so": shared_object(["libcudart.so.12", "libc.so.6"], [".nv_fatbin"]),
        "plain.so": shared_object(["libc.so.6"]),
        "compose.yaml": "services:\n  app:\n    image: x\n    gpus: all\n",
    })
    report = analyze(str(tmp_path))
    serve = entry(report, "serve.py")
    assert serve["verdict"] == "container"
    assert serve["command"] == ("docker run --rm --runtime=fakegpu -e FAKEGPU_DEVICES=a100:1 "
                                "$(docker build -q -f Dockerfile.gpu .)")
    assert [(r["kind"], r["site"]["path"]) for r in serve["reasons"]] == [
        ("cuda-base-image", "Dockerfile.gpu"), ("prebuilt-cuda", "fastops.cpython-311-x86_64-linux-gnu.so")]
    assert report["native"] == [{"path": "fastops.cpython-311-x86_64-linux-gnu.so", "kind": "shared-object",
                                 "detail": "links libcudart.so.12; carries CUDA device code (.nv_fatbin)"}]
    assert [i["kind"] for i in report["infrastructure"]] == ["cuda-base-image", "compose-gpu"]


def test_a_compose_service_that_reserves_gpus(tmp_path):
    write_tree(tmp_path, {
        "docker-compose.yml": "services:\n  trainer:\n    build: .\n    command: torchrun --nproc-per-node 2 "
                              "train.py\n    deploy:\n      resources:\n        reservations:\n          devices:\n"
                              "            - capabilities: [gpu]\n",
        "train.py": "import torch\ntorch.cuda.init()\n",
    })
    train = entry(analyze(str(tmp_path)), "train.py")
    assert train["verdict"] == "container"
    assert train["command"] == ("sudo fakegpu runtime install --gpus --devices a100:1 && docker compose -f "
                                "docker-compose.yml up")
    assert train["reasons"][0]["kind"] == "compose-gpu"


def test_native_files(tmp_path):
    write_tree(tmp_path, {
        "k/add.cu": "__global__ void add(float *x) {}\n__global__ void sub(float *x) {}\n",
        "k/common.cuh": "#pragma once\n__device__ inline float sq(float x) { return x * x; }\n",
        "k/add.ptx": ".version 8.0\n.target sm_80\n.visible .entry add(\n) { ret; }\n",
        "k/add.sm_90.cubin": b"\x7fELF\x02\x01\x01" + b"\0" * 57,
        "lib/libplain.so": shared_object(["libc.so.6"]),
    })
    report = analyze(str(tmp_path))
    assert report["native"] == [
        {"path": "k/add.cu", "kind": "cuda-source", "detail": "2 __global__ kernels"},
        {"path": "k/add.ptx", "kind": "ptx", "detail": "PTX, 1 kernel entry"},
        {"path": "k/add.sm_90.cubin", "kind": "cuda-binary", "detail": "64 bytes of CUDA device code"},
        {"path": "k/common.cuh", "kind": "cuda-source", "detail": "CUDA header/source, no __global__ kernel"}]
    reasons = {w["path"]: w["reason"] for w in report["summary"]["repository_reasons"]}
    assert reasons == {"real-gpu": "1 CUDA source file(s) with __global__ kernels",
                       "native": "2 prebuilt CUDA file(s) (PTX, cubin, libraries)"}
    assert report["summary"]["repository_verdict"] == "real-gpu"


def test_entry_option_and_a_single_file(tmp_path):
    write_tree(tmp_path, {"a.py": "import torch\ntorch.cuda.init()\n", "b.py": "print(1)\n",
                          ".gitignore": "hidden.py\n", "hidden.py": ""})
    report = analyze(str(tmp_path), "--entry", "a.py")
    assert [(e["path"], e["verdict"], e["declared_by"][-1]["how"]) for e in report["entries"]] == [
        ("a.py", "fakecuda", "given")]
    report = analyze(str(tmp_path / "b.py"))
    assert [(e["path"], e["verdict"]) for e in report["entries"]] == [("b.py", "cpu")]


def test_clear_errors_with_close_matches(tmp_path):
    write_tree(tmp_path, {"train.py": "", "serve.py": "", ".gitignore": "hidden.py\n", "hidden.py": "",
                          "data.csv": ""})
    code, message = analyze_error(str(tmp_path / "trian.py"))
    assert code == 2 and message == f"{tmp_path / 'trian.py'}: no such file or folder. Did you mean: train.py?"
    code, message = analyze_error(str(tmp_path), "--entry", "trian.py")
    assert code == 2 and "--entry trian.py: no such Python file or notebook" in message
    assert message.endswith("Did you mean: train.py?")
    code, message = analyze_error(str(tmp_path), "--entry", "hidden.py")
    assert code == 2 and "ignored by .gitignore" in message
    code, message = analyze_error(str(tmp_path), "--entry", "data.csv")
    assert code == 2 and "not a Python file or notebook" in message
    code, message = analyze_error("/dev/null")
    assert code == 2 and message.startswith("/dev/null: not a folder or a regular file")
    code, message = analyze_error(str(tmp_path), "--max-file-size", "2G")
    assert code == 2 and message.startswith("--max-file-size: '2G' is not a size")


def test_text_output(tmp_path):
    from fakegpu.cli.main import app
    from tests.analyze.conftest import runner

    write_tree(tmp_path, {"train.py": "import torch\nif __name__ == '__main__':\n    torch.cuda.init()\n"})
    result = runner.invoke(app, ["analyze-repo", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "train.py  [fakecuda]  train.py (main-block train.py:2)" in result.stdout
    assert "try: fakegpu preflight --devices a100:1 -- python train.py" in result.stdout
    result = runner.invoke(app, ["analyze-repo", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "fakegpu analyze-repo: error:" in result.stderr
