"""`fakegpu k8s render`: every Kubernetes object it writes against the official schemas (kubernetes-validate,
strict: an unknown field fails) for 1.29 and every newer version the installed package knows; the DaemonSet
against the paths the plugin and the runtime really use; the training Job's rank wiring; the node files parsed
by TOML readers, containerd itself and bash; `--out` whole or not at all; bad input refused with nothing written.
No API server or kubelet runs here: what needs one is left to a real cluster."""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fakegpu.cli.k8s import node_paths
from fakegpu.cli.main import app
from fakegpu.k8s import node_config
from fakegpu.k8s.render import RenderOptions, render, write_tree
from tests.conftest import REPO, run_cli

kv = pytest.importorskip("kubernetes_validate")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+
from kubernetes_validate.utils import all_versions  # noqa: E402
from packaging.version import Version  # noqa: E402

runner = CliRunner()
NODE = node_paths()
# all_versions() names each version once per schema folder (plain and strict)
VERSIONS = sorted({v for v in all_versions() if Version(v) >= Version("1.29")}, key=Version)
# CRDs have no schema in kubernetes-validate: the Kubeflow PyTorchJob is checked by shape only (below).
CRDS = {"PyTorchJob"}
VARIANTS = {
    "default": RenderOptions(kubeflow=True),
    "mixed-mig": RenderOptions(devices="a100:2:mig=3g.40gb+2g.20gb+1g.10gb,h100:2", mig_strategy="mixed",
                               namespace="gpu-sim", node_label="example.com/fake-gpu=yes",
                               image="registry.example:5000/fakegpu/cuda:dev",
                               workload_image="registry.example:5000/fakegpu/pytorch@sha256:" + "ab" * 32),
    "single-mig": RenderOptions(devices="a100:2:mig=1g.10gb*7", mig_strategy="single",
                                resource_name="fakegpu.dev/gpu", runtime_path="/opt/fg/fakegpu-container-runtime"),
}


def _documents(variant: str) -> list[tuple[str, dict]]:
    """Every object as written: parsed back from the YAML files, not taken from the dicts."""
    rendered = render(VARIANTS[variant], NODE)
    return [(path, doc) for path, text in rendered.files.items() if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text)]


def test_the_versions_checked_reach_from_1_29_to_the_newest_known():
    assert VERSIONS[0].startswith("1.29.") and VERSIONS[-1] == all_versions()[-1]
    assert len(VERSIONS) >= 2


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_passes_the_official_schema_in_strict_mode(variant, version):
    checked = []
    for path, doc in _documents(variant):
        if doc["kind"] in CRDS:
            with pytest.raises(kv.SchemaNotFoundError):
                kv.validate(doc, version, strict=True)
            continue
        kv.validate(doc, version, strict=True)  # raises ValidationError naming the field
        checked.append(f"{path}:{doc['kind']}")
    assert {c.split(":")[1] for c in checked} == {"Namespace", "RuntimeClass", "DaemonSet", "Pod", "ConfigMap",
                                                  "Service", "Job"}


def test_strict_mode_does_refuse_what_a_cluster_would():
    # the check above means something: a misspelt field and a wrong type fail it
    daemon_set = next(d for _, d in _documents("default") if d["kind"] == "DaemonSet")
    bad = json.loads(json.dumps(daemon_set))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[0], strict=True)
    bad = json.loads(json.dumps(daemon_set))
    bad["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = [1]
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)


def _objects(variant: str = "default") -> dict[str, dict]:
    """The first object of each kind (the cluster's Pod example, examples/pod.yaml, before its podman twin)."""
    objs: dict[str, dict] = {}
    for _, d in _documents(variant):
        objs.setdefault(d["kind"], d)
    return objs


def test_runtime_class_names_the_handler_the_engines_get_and_selects_the_label():
    rc = _objects("mixed-mig")["RuntimeClass"]
    assert rc["metadata"]["name"] == rc["handler"] == node_config.RUNTIME_HANDLER
    assert rc["scheduling"]["nodeSelector"] == {"example.com/fake-gpu": "yes"}


def test_daemon_set_mounts_the_folders_the_plugin_and_runtime_use():
    from fakegpu_hook.contract import DEFAULT_CONFIG

    from fakegpu.cli import k8s as cli
    from fakegpu.k8s.manifests import CDI_DIR
    from fakegpu.k8s.plugin import DEFAULT_PLUGIN_DIR, DEFAULT_STATE_DIR, KUBELET_SOCKET

    ds = _objects("mixed-mig")["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    host = {volumes[m["name"]]["hostPath"]["path"]: m for m in mounts.values() if "hostPath" in volumes[m["name"]]}
    # each host folder is mounted at its own path: the plugin and `fakegpu fault inject` on the host agree
    assert all(path == m["mountPath"] for path, m in host.items())
    assert set(host) == {DEFAULT_PLUGIN_DIR, posixpath.dirname(DEFAULT_CONFIG), DEFAULT_STATE_DIR, CDI_DIR}
    assert cli.DEFAULT_STATE_DIR == DEFAULT_STATE_DIR
    assert not host[DEFAULT_PLUGIN_DIR].get("readOnly")  # its sockets are made there, kubelet.sock dialled
    assert KUBELET_SOCKET and not host[DEFAULT_STATE_DIR].get("readOnly")  # the board is mapped read-write
    assert host[posixpath.dirname(DEFAULT_CONFIG)]["readOnly"] is True
    command = container["command"]
    assert command[:2] == ["fakegpu", "device-plugin"]
    options = dict(zip(command[2::2], command[3::2], strict=True))
    assert options == {"--mig-strategy": "mixed", "--resource-name": "nvidia.com/gpu",
                       "--plugin-dir": DEFAULT_PLUGIN_DIR, "--state-dir": DEFAULT_STATE_DIR}
    assert pod["nodeSelector"] == {"example.com/fake-gpu": "yes"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "CriticalAddonsOnly"}
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["readOnlyRootFilesystem"] is True
    # with a read-only root, the place the plugin compiles its gRPC messages to is a writable volume
    env = {e["name"]: e["value"] for e in container["env"]}
    assert mounts[env["XDG_CACHE_HOME"]]["name"] in {n for n, v in volumes.items() if "emptyDir" in v}


def test_the_daemon_sets_command_is_one_the_plugin_accepts():
    ds = _objects("mixed-mig")["DaemonSet"]
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    spec = VARIANTS["mixed-mig"].devices
    result = run_cli(*command[1:], "--devices", spec, "--list", "--json")
    assert result.returncode == 0, result.stderr
    served = json.loads(result.stdout)["data"]["resources"]
    assert [r["resource"] for r in served] == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb",
                                               "nvidia.com/mig-1g.10gb"]


def test_examples_ask_for_a_resource_the_node_advertises():
    pod = _objects("single-mig")["Pod"]
    assert pod["spec"]["runtimeClassName"] == node_config.RUNTIME_HANDLER
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"fakegpu.dev/gpu": 2}
    assert pod["spec"]["containers"][0]["command"] == ["nvidia-smi", "-L"]
    # an image that asks for no GPU of its own: the runtime gives it the allocated ones (NVIDIA_VISIBLE_DEVICES)
    assert not pod["spec"]["containers"][0]["image"].startswith("fakegpu/")


def test_the_podman_pod_names_the_devices_the_cluster_pod_asks_for():
    # podman kube play has no device plugin: the Pod itself names the first devices of the resource, by index
    for variant, devices in (("default", "0,1"), ("single-mig", "0:0,0:1"), ("mixed-mig", "2,3")):
        (pod,) = [d for path, d in _documents(variant) if path == "examples/pod-podman.yaml"]
        container = pod["spec"]["containers"][0]
        assert container["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": devices}], variant
        assert "resources" not in container and "runtimeClassName" not in pod["spec"]
        assert container["command"] == ["nvidia-smi", "-L"]


def test_the_job_gives_each_pod_its_node_rank_and_rank_0s_address():
    objs = _objects()
    job, service, config = objs["Job"], objs["Service"], objs["ConfigMap"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[0] == "torchrun"
    options = dict(zip(command[1:-1:2], command[2:-1:2], strict=True))
    assert options["--nnodes"] == str(spec["completions"])
    assert options["--node-rank"] == "$(JOB_COMPLETION_INDEX)"
    assert int(options["--nproc-per-node"]) == container["resources"]["limits"]["nvidia.com/gpu"] == 2
    # rank 0 is pod <job>-0 in the headless Service's DNS subdomain, which selects the Job's pods
    assert options["--master-addr"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert pod["subdomain"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert int(options["--master-port"]) == service["spec"]["ports"][0]["port"]
    assert pod["runtimeClassName"] == node_config.RUNTIME_HANDLER and pod["restartPolicy"] == "Never"
    # the script is the one the Docker rehearsals run, mounted where torchrun looks
    (name, text), = config["data"].items()
    assert text == (REPO / "compose" / "examples" / name).read_text()
    (mount,) = container["volumeMounts"]
    assert command[-1] == posixpath.join(mount["mountPath"], name)
    assert {v["name"]: v["configMap"]["name"] for v in pod["volumes"]} == {mount["name"]: config["metadata"]["name"]}


def test_the_kubeflow_pytorchjob_is_a_master_and_a_worker_on_the_runtime_class():
    docs = dict(_documents("default"))
    assert "examples/pytorchjob.yaml" in docs
    assert "examples/pytorchjob.yaml" not in render(RenderOptions(), NODE).files
    job = _objects()["PyTorchJob"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {k: r["replicas"] for k, r in replicas.items()} == {"Master": 1, "Worker": 1}
    for r in replicas.values():
        (c,) = r["template"]["spec"]["containers"]
        assert c["name"] == "pytorch" and r["template"]["spec"]["runtimeClassName"] == "fakegpu"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_containerd_and_crio_drop_ins_parse_with_the_handler_and_binary(variant):
    opts = VARIANTS[variant]
    files = render(opts, NODE).files
    tables = {2: ("io.containerd.grpc.v1.cri",), 3: ("io.containerd.cri.v1.runtime",)}
    for version, (plugin,) in tables.items():
        doc = tomllib.loads(files[f"node/containerd-fakegpu.v{version}.toml"])
        assert doc["version"] == version
        runtime = doc["plugins"][plugin]["containerd"]["runtimes"][node_config.RUNTIME_HANDLER]
        assert runtime == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": opts.runtime_path}}
    crio = tomllib.loads(files["node/crio-fakegpu.conf"])
    assert crio["crio"]["runtime"]["runtimes"][node_config.RUNTIME_HANDLER]["runtime_path"] == opts.runtime_path


@pytest.mark.skipif(not shutil.which("containerd"), reason="containerd is not installed")
def test_containerd_places_the_handler_from_the_drop_in_only_when_imported(tmp_path):
    """The installed containerd (1.x here: config version 2) merging the drop-in as the setup script checks."""
    out = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=True).stdout
    version = 3 if out.split()[2].lstrip("v").startswith("2.") else 2
    drop_ins = tmp_path / "conf.d"
    drop_ins.mkdir()
    files = render(RenderOptions(), NODE).files
    (drop_ins / "99-fakegpu.toml").write_text(files[f"node/containerd-fakegpu.v{version}.toml"])
    imported = tmp_path / "config.toml"
    imported.write_text(f'version = {version}\nimports = ["{drop_ins}/*.toml"]\n')
    alone = tmp_path / "alone.toml"
    alone.write_text(f"version = {version}\n")

    def dump(config: Path) -> str:
        return subprocess.run(["containerd", "--config", str(config), "config", "dump"], capture_output=True,
                              text=True, check=True, timeout=60).stdout

    merged = tomllib.loads(dump(imported))
    plugin = "io.containerd.grpc.v1.cri" if version == 2 else "io.containerd.cri.v1.runtime"
    runtime = merged["plugins"][plugin]["containerd"]["runtimes"]["fakegpu"]
    assert runtime["runtime_type"] == "io.containerd.runc.v2"
    assert runtime["options"]["BinaryName"] == RenderOptions().runtime_path
    assert "fakegpu" not in tomllib.loads(dump(alone))["plugins"][plugin]["containerd"]["runtimes"]


def test_setup_script_is_valid_bash_with_the_checked_values_quoted(tmp_path):
    opts = RenderOptions(devices="a100:2,h100:1:mig=3g.40gb", node_label="example.com/fake-gpu=yes")
    text = render(opts, NODE).files["node/setup.sh"]
    script = tmp_path / "setup.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert f"DEVICES={shlex.quote(opts.devices)}\n" in text
    assert f"NODE_LABEL={shlex.quote(opts.node_label)}\n" in text
    assert 'kubectl label node "$NODE" "$NODE_LABEL" --overwrite' in text
    # the drop-ins it writes are the ones render writes beside it, which come from node_config
    assert node_config.containerd_runtime(opts.runtime_path, 2) in text
    assert node_config.containerd_runtime(opts.runtime_path, 3) in text
    assert node_config.crio_runtime(opts.runtime_path) in text


STUBS = {  # what the rehearsal cannot run for real here: it records the call instead
    "systemctl": 'echo "systemctl $*" >> "$CALLS"',
    "kubectl": 'echo "kubectl $*" >> "$CALLS"',
    "id": 'echo 0',
}


def _rehearse(tmp_path: Path, engine: str, config_toml: str | None) -> tuple[subprocess.CompletedProcess, Path]:
    """node/setup.sh as rendered, with / moved to a folder (FAKEGPU_SETUP_ROOT): the real fakegpu writes the
    front, inventory and CDI spec there, the real containerd reads the drop-in; systemctl, kubectl are recorded."""
    root, stubs, calls = tmp_path / "root", tmp_path / "stubs", tmp_path / "calls"
    root.mkdir()
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    if config_toml is not None:
        (root / "etc" / "containerd").mkdir(parents=True)
        (root / "etc" / "containerd" / "config.toml").write_text(config_toml.replace("ROOT", str(root)))
    script = tmp_path / "setup.sh"
    script.write_text(render(RenderOptions(devices="a100:4"), NODE).files["node/setup.sh"])
    env = {**os.environ, "FAKEGPU_SETUP_ROOT": str(root), "ENGINE": engine, "NODE": "node-1", "CALLS": str(calls),
           "PATH": f"{stubs}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120), root


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.skipif(not shutil.which("containerd"), reason="containerd is not installed")
def test_setup_script_rehearsed_on_containerd(tmp_path):
    docker_json = Path("/etc/docker/daemon.json")
    before = docker_json.read_bytes() if docker_json.exists() else None
    version = 3 if subprocess.run(["containerd", "--version"], capture_output=True, text=True,
                                  check=True).stdout.split()[2].lstrip("v").startswith("2.") else 2
    result, root = _rehearse(tmp_path, "containerd",
                             f'version = {version}\nimports = ["ROOT/etc/containerd/conf.d/*.toml"]\n')
    assert result.returncode == 0, result.stdout + result.stderr
    assert _files(root) == ["etc/cdi/fakegpu.json", "etc/containerd/conf.d/99-fakegpu.toml",
                            "etc/containerd/config.toml", "etc/fakegpu/config.json",
                            "usr/local/libexec/fakegpu/fakegpu-container-runtime",
                            "usr/local/libexec/fakegpu/fakegpu-hook"]
    # the inventory as `runtime install --devices` keeps it, for the runtime and the plugin's DaemonSet
    assert json.loads((root / "etc/fakegpu/config.json").read_text()) == {"inventory": "a100:4"}
    assert len(json.loads((root / "etc/cdi/fakegpu.json").read_text())["devices"]) >= 4
    assert (root / "etc/containerd/conf.d/99-fakegpu.toml").read_text() == \
        render(RenderOptions(), NODE).files[f"node/containerd-fakegpu.v{version}.toml"]
    assert (tmp_path / "calls").read_text().splitlines() == [
        "systemctl restart containerd", "kubectl get node node-1",
        "kubectl label node node-1 fakegpu.dev/gpu=true --overwrite"]
    # Docker was left alone: daemon.json untouched, dockerd not signalled (--no-reload)
    assert (docker_json.read_bytes() if docker_json.exists() else None) == before


@pytest.mark.skipif(not shutil.which("containerd"), reason="containerd is not installed")
@pytest.mark.parametrize("config_toml", ["version = 2\n", None])
def test_setup_script_stops_when_containerd_would_not_read_the_drop_in(tmp_path, config_toml):
    # Without a config.toml under the rehearsal's root, containerd reads its default one, the host's: as on a real
    # node, where that is the same file. This host's does not import the rehearsal's conf.d.
    if config_toml is None and subprocess.run(["containerd", "--version"], capture_output=True,
                                              text=True).stdout.split()[2].lstrip("v") >= "2.2":
        pytest.skip("containerd 2.2+ imports conf.d by default")
    result, root = _rehearse(tmp_path, "containerd", config_toml)
    assert result.returncode == 1
    assert f'imports = ["{root}/etc/containerd/conf.d/*.toml"]' in result.stderr
    assert ("add this line at the top of" if config_toml else "create") in result.stderr
    assert not (tmp_path / "calls").exists()  # nothing restarted, no label
    if config_toml:
        assert (root / "etc/containerd/config.toml").read_text() == config_toml  # never edited


def test_setup_script_rehearsed_on_crio(tmp_path):
    result, root = _rehearse(tmp_path, "crio", None)
    assert result.returncode == 0, result.stdout + result.stderr
    conf = root / "etc/crio/crio.conf.d/99-fakegpu.conf"
    assert conf.read_text() == render(RenderOptions(), NODE).files["node/crio-fakegpu.conf"]
    assert (tmp_path / "calls").read_text().splitlines()[0] == "systemctl restart crio"


def test_render_prints_the_cluster_objects_for_kubectl_apply():
    result = runner.invoke(app, ["k8s", "render"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Namespace", "fakegpu"), ("RuntimeClass", "fakegpu"), ("DaemonSet", "fakegpu-device-plugin")]
    assert docs[2]["metadata"]["namespace"] == "fakegpu"


def test_out_writes_every_file_and_json_lists_them(tmp_path):
    out = tmp_path / "k8s"
    result = runner.invoke(app, ["k8s", "render", "--out", str(out), "--kubeflow", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["data"]
    listed = [f["path"] for f in data["files"]]
    assert data["written"] and sorted(listed) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert {"cluster.yaml", "examples/pod.yaml", "examples/pod-podman.yaml", "examples/ddp-job.yaml",
            "examples/pytorchjob.yaml",
            "node/setup.sh", "node/containerd-fakegpu.v2.toml", "node/containerd-fakegpu.v3.toml",
            "node/crio-fakegpu.conf"} == set(listed)
    assert (out / "node" / "setup.sh").stat().st_mode & 0o777 == 0o755
    assert next(f for f in data["files"] if f["path"] == "cluster.yaml")["objects"] == [
        "Namespace/fakegpu", "RuntimeClass/fakegpu", "DaemonSet/fakegpu-device-plugin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k8s"]  # no staging folder left


def test_out_refuses_a_folder_that_is_not_empty_unless_forced(tmp_path):
    out = tmp_path / "k8s"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    (out / "cluster.yaml").write_text("old")
    result = runner.invoke(app, ["k8s", "render", "--out", str(out)])
    assert result.exit_code == 2 and "not empty" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["cluster.yaml", "mine.txt"]
    assert (out / "cluster.yaml").read_text() == "old"
    result = runner.invoke(app, ["k8s", "render", "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert (out / "mine.txt").read_text() == "keep" and (out / "cluster.yaml").read_text() != "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k8s"]


def test_out_refuses_the_current_folder_and_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").write_text("x")
    for target in (".", str(tmp_path), "notes"):
        result = runner.invoke(app, ["k8s", "render", "--out", target, "--force"])
        assert result.exit_code == 2, (target, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_a_failure_midway_leaves_nothing(tmp_path, monkeypatch):
    files = render(RenderOptions(), NODE).files
    real = Path.write_text
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(self)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    out = tmp_path / "k8s"
    from fakegpu.errors import FakeGPUError

    with pytest.raises(FakeGPUError, match="nothing was written"):
        write_tree(files, out)
    assert list(tmp_path.iterdir()) == []
    # and with --force over an earlier render: the earlier files stay as they were
    monkeypatch.setattr(Path, "write_text", real)
    write_tree({"cluster.yaml": "earlier\n"}, out)
    calls.clear()
    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(FakeGPUError):
        write_tree(files, out, force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["k8s"] and (out / "cluster.yaml").read_text() == "earlier\n"
    assert [p.name for p in out.iterdir()] == ["cluster.yaml"]


def test_a_failure_names_the_out_folder_not_the_staging_one(tmp_path, monkeypatch):
    from fakegpu.errors import FakeGPUError

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))  # a path inside the staging folder

    monkeypatch.setattr(Path, "write_text", denied)
    out = tmp_path / "k8s"
    with pytest.raises(FakeGPUError) as caught:
        write_tree(render(RenderOptions(), NODE).files, out)
    assert caught.value.message == f"--out {out}: Permission denied; nothing was written"
    monkeypatch.undo()
    (tmp_path / "file").write_text("")
    with pytest.raises(FakeGPUError) as caught:  # the user's own path in the error is named
        write_tree({"cluster.yaml": "x\n"}, tmp_path / "file" / "k8s")
    assert caught.value.message == f"--out {tmp_path}/file/k8s: {tmp_path}/file: File exists; nothing was written"


@pytest.mark.parametrize(("args", "message"), [
    (["--mig-strategy", "mixd"], "unknown MIG strategy 'mixd'; accepted: none, single, mixed (did you mean mixed?)"),
    (["--node-label", "fakegpu.dev/gpu"], "--node-label 'fakegpu.dev/gpu': it has no '='"),
    (["--node-label", "Fake.dev/gpu=true"], "prefix 'Fake.dev' is not a DNS subdomain"),
    (["--node-label", "fakegpu.dev/gpu=no way"], "value 'no way' is not"),
    (["--devices", "a10O:2"], "--devices: invalid device spec 'a10O:2'"),
    (["--devices", "a100:2", "--mig-strategy", "single", "--devices", "a100:1:mig=3g.40gb,h100"],
     "MIG strategy single needs every GPU in MIG mode"),
    (["--image", "FakeGPU/cuda:1"], "--image 'FakeGPU/cuda:1' is not an image reference"),
    (["--workload-image", "fakegpu/pytorch:"], "--workload-image 'fakegpu/pytorch:' is not an image reference"),
    (["--image", ""], "--image '' is not an image reference"),
    (["--workload-image", ""], "--workload-image '' is not an image reference"),
    (["--resource-name", "gpu"], "resource name 'gpu' is not an extended resource name"),
    (["--namespace", "Fake_GPU"], "--namespace 'Fake_GPU' is not a Kubernetes namespace name"),
    (["--runtime-path", "relative/fakegpu-container-runtime"], "--runtime-path 'relative/"),
    (["--runtime-path", "/usr/bin/runc"], "ending in /fakegpu-container-runtime"),
])
def test_bad_input_is_refused_and_nothing_is_written(tmp_path, args, message):
    out = tmp_path / "k8s"
    result = runner.invoke(app, ["k8s", "render", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []
    result = runner.invoke(app, ["k8s", "render", "--json", *args])
    envelope = json.loads(result.stdout)
    assert envelope["exit_code"] == 2 and message in envelope["errors"][0]["message"]


def test_the_readme_example_prints_what_the_readme_shows(tmp_path):
    text = (REPO / "README.md").read_text()
    block = text[text.index("    $ fakegpu k8s render --out"):].split("\n\n", 1)[0]
    lines = [line[4:] for line in block.splitlines()]
    commands = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for n, start in enumerate(commands):
        shown = lines[start + 1:commands[n + 1] if n + 1 < len(commands) else None]
        result = subprocess.run(lines[start][2:], shell=True, cwd=tmp_path, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                                  f"{os.environ['PATH']}"})
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == shown, lines[start]
