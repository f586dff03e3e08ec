"""The device plugin's DaemonSet, as `fakegpu k8s render` writes it, rehearsed in Docker: its container (the
default image, command, environment, security context) started as a kubelet would start it, each hostPath volume
a temporary folder, and the node's runtime config giving the inventory. The plugin inside registers with a fake
kubelet on the host through the shared device-plugins folder and serves the node's GPUs over its socket there."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.conftest import REPO
from tests.container.conftest import LABEL, docker, need
from tests.k8s.fake_kubelet import FakeKubelet

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def plugin_image():
    from fakegpu import __version__

    image = f"fakegpu/pytorch:{__version__}"
    if docker("image", "inspect", image).returncode != 0:  # built as the cluster fixtures build it
        need(os.geteuid() == 0, "building images needs the Docker daemon as root")
        built = subprocess.run([str(REPO / "images" / "build.sh")], capture_output=True, text=True, timeout=1800)
        assert built.returncode == 0, f"{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    return image


def _daemonset_container():
    from fakegpu.cli.k8s import node_paths
    from fakegpu.k8s.render import RenderOptions, render

    rendered = render(RenderOptions(), node_paths())
    (ds,) = [o for o in rendered.objects["cluster.yaml"] if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return container, {v["name"]: v for v in spec["volumes"]}


def test_the_rendered_daemonset_serves_the_node_from_its_container(plugin_image):
    container, volumes = _daemonset_container()
    assert container["image"] == plugin_image
    root = Path(f"/tmp/fg-ds-{os.getpid()}")  # short: the kubelet's socket lives under it
    host = {name: root / name for name in volumes}
    spec = "a100:2,h100:2"
    for path in host.values():
        path.mkdir(parents=True)
    (host["fakegpu-config"] / "config.json").write_text(json.dumps({"inventory": spec}))
    kubelet = FakeKubelet(host["device-plugins"]).start()
    name = f"fg-ds-{uuid.uuid4().hex[:8]}"
    sc = container["securityContext"]
    args = ["run", "-d", "--name", name, "--label", LABEL, "--runtime=runc",
            *(a for e in container["env"] for a in ("-e", f"{e['name']}={e['value']}")),
            *(a for m in container["volumeMounts"]
              for a in ("-v", f"{host[m['name']]}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}")),
            "--user", str(sc["runAsUser"]), "--memory", "256m",
            *(["--read-only"] if sc["readOnlyRootFilesystem"] else []),
            *(["--cap-drop", "ALL"] if sc["capabilities"]["drop"] == ["ALL"] else []),
            *(["--security-opt", "no-new-privileges"] if not sc["allowPrivilegeEscalation"] else []),
            "--entrypoint", container["command"][0], plugin_image, *container["command"][1:]]
    try:
        assert docker(*args, check=True).returncode == 0
        try:
            (request,) = kubelet.registrations(1, timeout_s=60).values()
        except Exception:
            raise AssertionError(docker("logs", name).stderr) from None
        assert request.resource_name == "nvidia.com/gpu"
        stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
        stream = stub.ListAndWatch(pb2.Empty(), timeout=30)
        listed = next(stream)
        stream.cancel()
        assert [d.ID for d in listed.devices] == [g.uuid for g in resolve_devices(spec, seed="0")]
        (edits,) = stub.Allocate(pb2.AllocateRequest(container_requests=[
            pb2.ContainerAllocateRequest(devices_ids=[listed.devices[2].ID])]), timeout=10).container_responses
        assert dict(edits.envs) == {"NVIDIA_VISIBLE_DEVICES": listed.devices[2].ID}
        docker("stop", "-t", "20", name, check=True)  # SIGTERM, as the kubelet stops a pod
        state = docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        assert state == "0", docker("logs", name).stderr
        # it took its socket with it
        assert sorted(p.name for p in host["device-plugins"].iterdir()) == ["kubelet.sock"]
    finally:
        docker("rm", "-f", name)
        kubelet.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)
