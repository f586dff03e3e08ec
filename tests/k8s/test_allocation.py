"""Allocate's edits and GetPreferredAllocation's choice, on the node machine native/nvml describes."""

from __future__ import annotations

import pytest

from fakegpu.devices import resolve_devices
from fakegpu.errors import UsageError
from fakegpu.k8s.allocation import AllocationError, allocate, check_strategies, preferred
from fakegpu.k8s.resources import resources
from fakegpu.k8s.topology import CROSS_SOCKET, NVLINK, PCIE_SWITCH, SAME_SOCKET, best_set, path


def _node(spec: str, strategy: str = "none"):
    inventory = resolve_devices(spec, seed="0")
    return inventory, {r.name: r for r in resources(inventory, strategy)}


def test_envvar_allocation_names_the_devices_for_the_runtime():
    inventory, res = _node("h100:4")
    ids = [inventory[2].uuid, inventory[0].uuid]
    assert allocate(res["nvidia.com/gpu"], ids).envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}


def test_allocation_of_a_device_the_resource_lacks_is_refused():
    inventory, res = _node("h100:2")
    with pytest.raises(AllocationError, match="has no device GPU-nope"):
        allocate(res["nvidia.com/gpu"], [inventory[0].uuid, "GPU-nope"])
    with pytest.raises(AllocationError, match="named twice"):
        allocate(res["nvidia.com/gpu"], [inventory[0].uuid, inventory[0].uuid])


def test_cdi_strategies_name_the_devices_in_fakegpus_cdi_spec():
    from fakegpu_hook.cdi import CDI_KIND

    inventory, res = _node("h100:4,a100:1:mig=3g.40gb+2g.20gb", "mixed")
    gpu, mig = res["nvidia.com/gpu"], res["nvidia.com/mig-2g.20gb"]
    ids = [inventory[1].uuid, inventory[3].uuid]
    edits = allocate(gpu, ids, check_strategies("cdi-cri"))
    assert edits.cdi_devices == [f"{CDI_KIND}={i}" for i in ids] and edits.envs == {} and edits.annotations == {}
    edits = allocate(gpu, ids, check_strategies("envvar,cdi-annotations"))
    assert edits.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)} and edits.cdi_devices == []
    assert edits.annotations == {"cdi.k8s.io/fakegpu_nvidia.com_gpu": ",".join(f"{CDI_KIND}={i}" for i in ids)}
    # one annotation per resource: a container given a GPU and a slice keeps both
    slice_id = inventory[4].mig[1].uuid
    assert list(allocate(mig, [slice_id], ("cdi-annotations",)).annotations) == [
        "cdi.k8s.io/fakegpu_nvidia.com_mig-2g.20gb"]


def test_unknown_device_list_strategies_are_refused_with_a_close_match():
    with pytest.raises(UsageError, match=r"'volume-mounts' is not offered; accepted: envvar, cdi-cri"):
        check_strategies("volume-mounts")
    with pytest.raises(UsageError, match=r"did you mean cdi-cri"):
        check_strategies("envvar,cdi-cr")
    with pytest.raises(UsageError, match="not offered"):
        check_strategies(" , ")


def test_paths_on_the_hgx_style_node():
    pcie = resolve_devices("t4:8", seed="0")  # no NVLink
    h100 = resolve_devices("h100:8", seed="0")
    assert path(h100[0], h100[7]) == NVLINK
    assert path(pcie[0], pcie[1]) == PCIE_SWITCH
    assert path(pcie[0], pcie[2]) == SAME_SOCKET
    assert path(pcie[0], pcie[4]) == CROSS_SOCKET


def test_preferred_pairs_stay_behind_one_pcie_switch():
    inventory, res = _node("t4:8")
    ids = [d.uuid for d in inventory]
    gpu = res["nvidia.com/gpu"]
    assert preferred(gpu, inventory, ids, [], 2) == ids[0:2]
    # GPU 0 taken: the next pair behind one switch, not 1 with 2
    assert preferred(gpu, inventory, ids[1:], [], 2) == ids[2:4]
    # a must-include GPU brings its switch partner
    assert preferred(gpu, inventory, ids, [ids[5]], 2) == [ids[5], ids[4]]
    # four: one socket
    assert sorted(preferred(gpu, inventory, ids[2:], [], 4)) == sorted(ids[4:8])


def test_preferred_keeps_an_nvlink_domain_together():
    inventory, res = _node("t4:4,h100:4")  # GPUs 4-7 share NVSwitches, 0-3 only PCIe
    ids = [d.uuid for d in inventory]
    assert preferred(res["nvidia.com/gpu"], inventory, ids, [], 3) == ids[4:7]


def test_preferred_mig_devices_pack_onto_one_board():
    inventory, res = _node("a100:2:mig=1g.10gb*7", "single")
    gpu = res["nvidia.com/gpu"]
    second_board = [m.uuid for m in inventory[1].mig]
    available = [inventory[0].mig[0].uuid, *second_board[:3]]  # one slice left on board 0, three on board 1
    assert preferred(gpu, inventory, available, [], 3) == second_board[:3]


def test_preferred_refuses_requests_that_cannot_be_met():
    inventory, res = _node("t4:2")
    ids = [d.uuid for d in inventory]
    with pytest.raises(AllocationError, match="3 devices asked of 2"):
        preferred(res["nvidia.com/gpu"], inventory, ids, [], 3)
    with pytest.raises(AllocationError, match="has no device"):
        preferred(res["nvidia.com/gpu"], inventory, ids, ["GPU-x"], 1)


def test_best_set_is_greedy_past_the_exhaustive_limit_and_still_keeps_groups():
    # 64 candidates, 8 wanted: C(64, 8) is far past the limit. Groups of 8 worth 10 a pair inside, 1 across.
    worth = {(i, j): 10 if i // 8 == j // 8 else 1 for i in range(64) for j in range(i + 1, 64)}
    assert sorted(best_set(list(range(64)), [19], 8, worth)) == list(range(16, 24))
