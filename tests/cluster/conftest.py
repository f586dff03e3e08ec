"""Cluster fixtures: the fakegpu/pytorch node image (built once per session by images/build.sh, whose docker
build reuses cached layers), a per-run label on everything created, and cleanup by that label (no Ryuk)."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from tests.conftest import IN_CI, REPO

RUN_ID = uuid.uuid4().hex[:10]
TEST_LABEL = "org.fakegpu.test"
LABEL = f"{TEST_LABEL}={RUN_ID}"
NODE_IMAGE = os.environ.get("FAKEGPU_NODE_IMAGE", "fakegpu/pytorch:latest")


def need(condition: bool, reason: str) -> None:
    """Skip on a developer machine, fail under CI, where every prerequisite must be present."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def cleanup_by_label(client) -> None:
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters={"label": LABEL}):
        n.remove()


@pytest.fixture(scope="session")
def node_image(docker_client):
    """images/build.sh once per session: the base exists -> skipped; docker's layer cache makes a rebuild of
    unchanged layers quick, and fakegpu's own layer always carries this checkout."""
    if os.environ.get("FAKEGPU_REUSE_NODE_IMAGE") == "1":
        try:
            docker_client.images.get(NODE_IMAGE)
            return NODE_IMAGE
        except Exception:
            pass
    need(os.geteuid() == 0, "building images (debootstrap) needs root")
    need((REPO / "native" / "build" / "lib" / "libcudart.so.13").exists(), "native build missing (run `make`)")
    result = subprocess.run([str(REPO / "images" / "build.sh")], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"images/build.sh failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    docker_client.images.get(NODE_IMAGE)
    return NODE_IMAGE


@pytest.fixture(scope="session")
def cluster_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster-home")
    old = os.environ.get("FAKEGPU_CLUSTER_HOME")
    os.environ["FAKEGPU_CLUSTER_HOME"] = str(home)  # the CLI subprocesses inherit it
    yield home
    if old is None:
        os.environ.pop("FAKEGPU_CLUSTER_HOME", None)
    else:
        os.environ["FAKEGPU_CLUSTER_HOME"] = old


@pytest.fixture
def labelled(docker_client, cluster_home):
    """Every test's objects carry LABEL; whatever a failing test leaves is removed by it."""
    yield LABEL
    cleanup_by_label(docker_client)


def cluster_name(stem: str) -> str:
    return f"t{RUN_ID[:6]}-{stem}"


# The runtime registration fixture of the container tests, shared rather than repeated. The
# `fakegpu_container` fixture is not imported here: it comes from the pytest11 entry point, as for users.
from tests.container.conftest import base_image, fakegpu_runtime  # noqa: E402, F401
