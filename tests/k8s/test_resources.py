"""What a node advertises under each MIG strategy, and the names Kubernetes would refuse."""

from __future__ import annotations

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.k8s.resources import StrategyError, check_resource_name, resources

SPLIT = "a100:1:mig=3g.40gb+2g.20gb+1g.10gb"


def _named(spec: str, strategy: str, name: str = "nvidia.com/gpu") -> dict[str, list[str]]:
    devices = resolve_devices(spec, seed="0")
    return {r.name: [a.id for a in r.devices] for r in resources(devices, strategy, name)}


def test_none_advertises_every_gpu_whole_mig_mode_or_not():
    devices = resolve_devices(f"h100:2,{SPLIT}", seed="0")
    assert _named(f"h100:2,{SPLIT}", "none") == {"nvidia.com/gpu": [d.uuid for d in devices]}


def test_single_advertises_each_mig_device_as_a_gpu():
    (gpu_a, gpu_b) = resolve_devices("a100:2:mig=1g.10gb*7", seed="0")
    got = _named("a100:2:mig=1g.10gb*7", "single")
    assert got == {"nvidia.com/gpu": [m.uuid for m in (*gpu_a.mig, *gpu_b.mig)]}
    assert len(got["nvidia.com/gpu"]) == 14 and all(i.startswith("MIG-") for i in got["nvidia.com/gpu"])


def test_single_on_a_node_without_mig_is_none():
    assert _named("t4:2", "single") == _named("t4:2", "none")


def test_single_refuses_mixed_profiles_and_whole_gpus_naming_them():
    with pytest.raises(StrategyError, match=r"1 x 1g\.10gb, 1 x 2g\.20gb, 1 x 3g\.40gb.*mixed"):
        _named(SPLIT, "single")
    with pytest.raises(StrategyError, match=r"GPUs 0, 1 are not"):
        _named("h100:2,a100:1:mig=1g.10gb*7", "single")


def test_mixed_gives_each_profile_its_resource_and_whole_gpus_the_gpu_resource():
    devices = resolve_devices(f"h100:2,{SPLIT}", seed="0")
    by_profile = {m.profile.name: m.uuid for m in devices[2].mig}
    assert _named(f"h100:2,{SPLIT}", "mixed") == {
        "nvidia.com/gpu": [devices[0].uuid, devices[1].uuid],
        "nvidia.com/mig-3g.40gb": [by_profile["3g.40gb"]],
        "nvidia.com/mig-2g.20gb": [by_profile["2g.20gb"]],
        "nvidia.com/mig-1g.10gb": [by_profile["1g.10gb"]],
    }


def test_mixed_names_media_extension_profiles_as_kubernetes_allows():
    got = _named("a100:1:mig=1g.10gb+me+1g.10gb", "mixed", "example.com/gpu")
    assert sorted(got) == ["example.com/mig-1g.10gb", "example.com/mig-1g.10gb.me"]


@pytest.mark.parametrize("bad", ["gpu", "nvidia.com/", "/gpu", "Nvidia.com/gpu", "nvidia.com/" + "g" * 64,
                                 "kubernetes.io/gpu", "nvidia.com/gpu!"])
def test_resource_names_kubernetes_refuses_are_refused(bad):
    with pytest.raises(StrategyError, match="resource name"):
        check_resource_name(bad)


def test_unknown_strategy_gets_a_close_match():
    with pytest.raises(StrategyError, match="did you mean mixed"):
        _named("t4:1", "mixd")


def test_numa_node_follows_the_gpu_slot():
    devices = resolve_devices("h100:8", seed="0")
    (res,) = resources(devices, "none")
    assert [a.numa for a in res.devices] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_api_compiles_from_our_proto_into_any_folder(tmp_path):
    from fakegpu.k8s import proto

    target = tmp_path / "fakegpu" / "k8s"
    proto.compile_to(target)
    assert proto._current(target, proto._digest())
    assert not proto._current(target, "0" * 64)  # an edited .proto is not served stale messages
    text = (target / "deviceplugin_pb2_grpc.py").read_text()
    assert "/v1beta1.DevicePlugin/Allocate" in text and "/v1beta1.Registration/Register" in text
    assert "/runtime.v1.RuntimeService/RunPodSandbox" in (target / "cri_pb2_grpc.py").read_text()
    assert list(target.parent.iterdir()) == [target]  # no staging folder left behind
