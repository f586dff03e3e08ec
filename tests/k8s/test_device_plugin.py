"""`fakegpu device-plugin` against a fake kubelet: the kubelet's Registration service on kubelet.sock and a client
of each plugin socket, speaking the v1beta1 API over real gRPC, as the kubelet's device manager does (no kubelet
can run here). The plugin runs as a user runs it: the CLI in its own process, stopped by SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from fakegpu.devices import resolve_devices
from tests.conftest import run_cli
from tests.k8s.fake_kubelet import FakeKubelet, Plugin

SPLIT = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"


@pytest.fixture
def folder(tmp_path):
    # unix socket paths are limited to 107 bytes; pytest's tmp_path can come close
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"fg-dp-{os.getpid()}-{tmp_path.name[-12:]}"
    path.mkdir()
    yield path
    for p in path.iterdir():
        p.unlink()
    path.rmdir()


@pytest.fixture
def kubelet(folder):
    k = FakeKubelet(folder).start()
    yield k
    k.stop()


@pytest.fixture
def start_plugin(folder, tmp_path):
    started: list[Plugin] = []

    def start(spec: str, *args: str) -> Plugin:
        board = tmp_path / "board"
        process = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "device-plugin", "--devices", spec, "--plugin-dir", str(folder),
             "--state-dir", str(board), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(Plugin(process, board, spec))
        return started[-1]

    yield start
    for p in started:
        code, err = p.stop()
        assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) in ([], ["kubelet.sock"]), "the plugin left its sockets"


def _devices(stub, pb2):
    stream = stub.ListAndWatch(pb2.Empty(), timeout=30)
    return stream, next(stream)


def test_registers_serves_its_options_and_lists_the_gpus(kubelet, start_plugin):
    start_plugin("h100:4,t4:4")
    (request,) = kubelet.registrations(1).values()
    assert request.version == "v1beta1" and request.resource_name == "nvidia.com/gpu"
    assert (kubelet.folder / request.endpoint).exists() and request.options.get_preferred_allocation_available
    stub = kubelet.plugin(request.endpoint)
    options = stub.GetDevicePluginOptions(kubelet.pb2.Empty(), timeout=10)
    assert options.get_preferred_allocation_available and not options.pre_start_required
    stream, listed = _devices(stub, kubelet.pb2)
    stream.cancel()
    inventory = resolve_devices("h100:4,t4:4", seed="0")
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in listed.devices] == [
        (g.uuid, "Healthy", [0 if g.index < 4 else 1]) for g in inventory]


def test_allocate_and_preferred_allocation_over_grpc(kubelet, start_plugin):
    start_plugin("t4:4,h100:4")
    (request,) = kubelet.registrations(1).values()
    stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
    ids = [g.uuid for g in resolve_devices("t4:4,h100:4", seed="0")]
    pref = stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2),
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids[:4], must_include_deviceIDs=[ids[3]],
                                                allocation_size=2)]), timeout=10)
    assert [list(r.deviceIDs) for r in pref.container_responses] == [ids[4:6], [ids[3], ids[2]]]
    answer = stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=ids[4:6]), pb2.ContainerAllocateRequest(devices_ids=[ids[0]])]),
        timeout=10)
    assert [dict(r.envs) for r in answer.container_responses] == [
        {"NVIDIA_VISIBLE_DEVICES": f"{ids[4]},{ids[5]}"}, {"NVIDIA_VISIBLE_DEVICES": ids[0]}]
    with pytest.raises(grpc.RpcError) as refused:
        stub.Allocate(pb2.AllocateRequest(container_requests=[
            pb2.ContainerAllocateRequest(devices_ids=["GPU-00000000-0000-0000-0000-000000000000"])]), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nvidia.com/gpu has no device GPU-00000000" in refused.value.details()


def test_mig_single_advertises_each_slice_as_a_gpu(kubelet, start_plugin):
    spec = "a100:2:mig=3g.40gb*2"
    start_plugin(spec, "--mig-strategy", "single")
    (request,) = kubelet.registrations(1).values()
    assert request.resource_name == "nvidia.com/gpu"
    stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
    stream, listed = _devices(stub, pb2)
    stream.cancel()
    slices = [m.uuid for g in resolve_devices(spec, seed="0") for m in g.mig]
    assert [d.ID for d in listed.devices] == slices and len(slices) == 4
    answer = stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=slices[2:3])]), timeout=10)
    assert dict(answer.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": slices[2]}


def test_mig_mixed_advertises_a_resource_per_profile(kubelet, start_plugin):
    spec = f"h100:1,{SPLIT}"
    start_plugin(spec, "--mig-strategy", "mixed")
    got = kubelet.registrations(4)
    inventory = resolve_devices(spec, seed="0")
    by_profile = {m.profile.name: m.uuid for m in inventory[1].mig}
    want = {"nvidia.com/gpu": [inventory[0].uuid], **{f"nvidia.com/mig-{p}": [u] for p, u in by_profile.items()}}
    assert sorted(got) == sorted(want)
    for name, request in got.items():
        stream, listed = _devices(kubelet.plugin(request.endpoint), kubelet.pb2)
        stream.cancel()
        assert [d.ID for d in listed.devices] == want[name], name


def test_a_lost_gpu_turns_unhealthy_with_its_mig_devices(kubelet, start_plugin):
    spec = f"h100:1,{SPLIT}"
    plugin = start_plugin(spec, "--mig-strategy", "mixed")
    got = kubelet.registrations(4)
    pb2 = kubelet.pb2
    gpu_stub, mig_stub = (kubelet.plugin(got[n].endpoint) for n in ("nvidia.com/gpu", "nvidia.com/mig-2g.20gb"))
    gpu_stream, gpu_first = _devices(gpu_stub, pb2)
    mig_stream, mig_first = _devices(mig_stub, pb2)
    assert [d.health for d in (*gpu_first.devices, *mig_first.devices)] == ["Healthy", "Healthy"]
    plugin.lose(1)  # the A100 holding the slices
    mig_next = next(mig_stream)
    assert [d.health for d in mig_next.devices] == ["Unhealthy"]
    with pytest.raises(grpc.RpcError) as refused:
        mig_stub.Allocate(pb2.AllocateRequest(container_requests=[
            pb2.ContainerAllocateRequest(devices_ids=[mig_next.devices[0].ID])]), timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    gpu_next = next(gpu_stream)  # every resource re-sends its list; the H100 stays healthy
    assert [d.health for d in gpu_next.devices] == ["Healthy"]
    gpu_stream.cancel()
    mig_stream.cancel()
    code, err = plugin.stop()
    assert code == 0 and "GPU 1 (GPU-" in err and "Unhealthy" in err


def test_a_restarted_kubelet_is_registered_with_again(kubelet, start_plugin, folder):
    start_plugin("t4:2")
    (first,) = kubelet.registrations(1).values()
    kubelet.stop()
    for p in folder.iterdir():  # the kubelet's device manager empties the folder when it starts
        p.unlink()
    kubelet.start()
    (again,) = kubelet.registrations(1, timeout_s=30).values()
    assert again.resource_name == first.resource_name and again.endpoint == first.endpoint
    stream, listed = _devices(kubelet.plugin(again.endpoint), kubelet.pb2)
    stream.cancel()
    assert len(listed.devices) == 2


def test_bad_setups_are_refused_and_leave_nothing(folder, tmp_path):
    result = run_cli("device-plugin", "--devices", "t4:1", "--plugin-dir", str(folder / "missing"),
                     "--state-dir", str(tmp_path / "b"))
    assert result.returncode != 0 and "device-plugins folder" in result.stderr
    result = run_cli("device-plugin", "--devices", "t4:1", "--plugin-dir", str(folder), "--state-dir",
                     str(tmp_path / "b"))
    assert result.returncode != 0 and "no kubelet registration socket" in result.stderr
    result = run_cli("device-plugin", "--devices", "t4:1", "--device-list-strategy", "volume-mounts", "--list")
    assert result.returncode != 0 and "accepted: envvar" in result.stderr
    result = run_cli("device-plugin", "--devices", "a100:9x", "--list")
    assert result.returncode == 2 and "--devices" in result.stderr
    result = run_cli("device-plugin", "--devices", "", "--list")  # not the runtime's inventory
    assert result.returncode == 2 and "--devices: invalid device spec '': part '': the spec is empty" in result.stderr
    assert list(folder.iterdir()) == []


def test_list_prints_what_would_be_advertised(tmp_path):
    import json

    result = run_cli("device-plugin", "--devices", f"h100:1,{SPLIT}", "--mig-strategy", "mixed", "--list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["data"]
    assert [r["resource"] for r in data["resources"]] == [
        "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.10gb"]


def test_the_readme_example_prints_what_the_readme_shows():
    import shlex

    from tests.conftest import REPO

    text = (REPO / "README.md").read_text()
    block = text[text.index("    $ fakegpu device-plugin"):].split("\n\n", 1)[0]
    command, *shown = [line[4:] for line in block.splitlines()]
    assert command.startswith("$ fakegpu ")
    result = run_cli(*shlex.split(command)[2:])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == shown


def test_cdi_strategies_write_the_spec_and_name_its_devices(kubelet, start_plugin, tmp_path):
    import json

    cdi = tmp_path / "cdi"
    start_plugin("t4:2,h100:2", "--device-list-strategy", "envvar,cdi-cri,cdi-annotations", "--cdi-dir", str(cdi))
    (request,) = kubelet.registrations(1).values()
    stub, pb2 = kubelet.plugin(request.endpoint), kubelet.pb2
    ids = [g.uuid for g in resolve_devices("t4:2,h100:2", seed="0")]
    spec = json.loads((cdi / "fakegpu.dev-gpu.json").read_text())
    assert spec["kind"] == "fakegpu.dev/gpu" and {ids[2], ids[3]} <= {d["name"] for d in spec["devices"]}
    (edits,) = stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=ids[2:])]), timeout=10).container_responses
    names = [f"fakegpu.dev/gpu={i}" for i in ids[2:]]
    assert [d.name for d in edits.cdi_devices] == names
    assert dict(edits.annotations) == {"cdi.k8s.io/fakegpu_nvidia.com_gpu": ",".join(names)}
    assert dict(edits.envs) == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids[2:])}
