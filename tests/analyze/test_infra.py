"""Dockerfiles, compose files, CI workflows and the commands written in them."""

from __future__ import annotations

import textwrap

from fakegpu.analyze.repo import infra


def test_dockerfile_cuda_base_and_its_commands():
    text = textwrap.dedent("""\
        ARG BASE=debian
        FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 AS run
        RUN python3 -m pip install -r requirements.txt
        CMD ["torchrun", "--nproc-per-node", "2", "train.py"]
        ENTRYPOINT python -m demo.serve --port 80
    """)
    found, refs = infra.read_dockerfile(text, "Dockerfile")
    assert [(i.kind, i.detail, i.line) for i in found] == [
        ("cuda-base-image", "FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", 2)]
    assert [(r.launcher, r.module, r.script, r.line, r.in_gpu_image) for r in refs] == [
        ("torchrun", None, "train.py", 4, True), ("python", "demo.serve", None, 5, True)]


def test_a_plain_base_image_is_not_a_gpu_image():
    found, refs = infra.read_dockerfile("FROM python:3.11-slim\nCMD python app.py\n", "Dockerfile")
    assert found == [] and [r.in_gpu_image for r in refs] == [False]


def test_compose_gpu_reservations():
    text = textwrap.dedent("""\
        services:
          trainer:
            image: demo
            deploy:
              resources:
                reservations:
                  devices:
                    - driver: nvidia
                      count: 2
                      capabilities: [gpu]
          web:
            image: nginx
          legacy:
            image: demo
            runtime: nvidia
    """)
    found, problem = infra.read_compose(text, "compose.yaml")
    assert problem is None
    assert [(i.detail, i.line) for i in found] == [
        ("service trainer: reserves GPUs (2) through nvidia", 2), ("service legacy: runtime: nvidia", 13)]
    assert infra.read_compose("services: [\n", "compose.yaml")[1].startswith("not valid YAML")


def test_ci_gpu_runners_and_cuda_containers():
    text = textwrap.dedent("""\
        on: [push]
        jobs:
          unit:
            runs-on: ubuntu-24.04
            steps: [{run: python -m pytest}]
          gpu:
            runs-on: [self-hosted, linux, a100]
            steps: [{run: python scripts/bench.py}]
          image:
            runs-on: ubuntu-latest
            container: nvidia/cuda:12.4.1-devel-ubuntu22.04
    """)
    found, _ = infra.read_ci(text, ".github/workflows/ci.yml")
    assert [(i.detail, i.line) for i in found] == [("job gpu: runs on a100", 7),
                                                    ("job image: container nvidia/cuda:12.4.1-devel-ubuntu22.04", 11)]
    assert [(r.script, r.line) for r in infra.commands(text, "ci.yml")] == [("scripts/bench.py", 8)]


def test_commands_in_prose_and_makefiles():
    text = "Run `python3 -m demo.cli --help` or `accelerate launch --num_processes 2 finetune.py`.\n" \
           "docker run --gpus all demo\npython -m pip install x\nfakegpu runtime install --gpus --devices a100:8\n" \
           "docker run --rm -e X=1 --gpus '\"device=0,2\"' IMAGE nvidia-smi -L\n"
    assert [(r.launcher, r.module, r.script) for r in infra.commands(text, "README.md")] == [
        ("python3", "demo.cli", None), ("accelerate launch", None, "finetune.py")]
    assert [(i.detail, i.line) for i in infra.gpus_flags(text, "README.md")] == [
        ("--gpus all", 2), ("--gpus '\"device=0,2\"'", 5)]
