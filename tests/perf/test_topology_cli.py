"""`fakegpu simulate-topology` through typer's runner: its text table, its --json report against the shipped
schema, fabric files, and every bad input refused with a message that says what to fix."""

from __future__ import annotations

import pytest

from tests.perf.conftest import REPO
from tests.perf.topology_helpers import topology, topology_error, topology_json

EXAMPLE = REPO / "examples" / "topology" / "two-hgx-h100.yaml"


def test_the_text_output_reads_like_nccl_tests():
    result = topology("--profile", "h100", "--sizes", "8B:1GiB", "--step-factor", "8")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("all-reduce on 8 GPUs: 1 x 8 h100-sxm5-80gb (HGX H100/H200, NVLS, 8 NICs)")
    assert lines[1].split() == ["SIZE(B)", "COUNT", "TYPE", "TIME(us)", "ALGBW(GB/s)", "BUSBW(GB/s)", "ALGO/PROTO"]
    assert lines[3].split()[:3] == ["8", "2", "float"]
    assert any(line.startswith("critical links (nvls at the largest size") for line in lines)
    assert "node0/gpu0 NVLink out" in result.stdout


def test_the_json_report_validates_and_carries_its_parameters():
    data = topology_json("--nodes", "2", "--profile", "h100", "--fabric", "ib-ndr400", "--sizes", "1MiB:1GiB")
    assert data["schema"] == "fakegpu.simulate-topology/v1"
    assert data["fabric"]["gpus"] == 16 and data["fabric"]["network"]["gb_s_per_port"] == 50
    assert data["fabric"]["node_groups"][0]["nvlink_gb_s_per_direction"] == 450
    assert data["busbw_factor"] == pytest.approx(2 * 15 / 16)
    assert len(data["rows"]) == 11
    assert {p["key"] for p in data["parameters"]} >= {"shares.nvlink", "shares.nvls", "shares.network"}


@pytest.mark.parametrize("collective", ["all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce",
                                        "all-to-all", "send-recv"])
def test_every_collective_runs_across_nodes(collective):
    data = topology_json("--nodes", "2", "--gpus-per-node", "4", "--profile", "a100", "--fabric", "ib-hdr200",
                         "--collective", collective, "--sizes", "64MiB")
    assert data["collective"] == collective and data["rows"][0]["busbw_gb_s"] > 0


def test_a_fabric_file():
    data = topology_json("--fabric-file", str(EXAMPLE), "--sizes", "4GiB", "--algorithm", "ring")
    assert data["fabric"]["source"] == {"kind": "file", "path": str(EXAMPLE)}
    assert data["fabric"]["node_groups"][0]["count"] == 2
    assert data["critical_links"][0]["link"].startswith("hgx")


def test_mixed_nodes_in_a_file(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("fabric: roce-400\nnodes:\n  - {name: a, profile: h100, gpus: 8}\n"
                    "  - {name: b, profile: a100, gpus: 8, nics: 4}\n")
    data = topology_json("-f", str(path), "--sizes", "1GiB")
    assert [g["profile"] for g in data["fabric"]["node_groups"]] == ["h100-sxm5-80gb", "a100-sxm4-80gb"]
    assert data["rows"][0]["algorithm"] in ("ring", "tree")


@pytest.mark.parametrize("args,code,message", [
    (["--profile", "h10O"], 2, "unknown GPU profile 'h10O'. Did you mean: h100"),
    (["--profile", "h100", "--nodes", "2", "--fabric", "ib-ndr40"], 2, "Did you mean: ib-ndr400"),
    (["--profile", "h100", "--nodes", "2", "--fabric", ""], 2, "unknown fabric ''. (known: ib-edr100"),
    (["--profile", "h100", "--nodes", "2"], 2, "node1 (GPUs 8-15) cannot reach node0: no scale-out fabric"),
    (["--profile", "h100", "--sizes", "8GiB:8B"], 2, "runs backwards"),
    (["--profile", "h100", "--sizes", "8G"], 2, "8GiB or 8GB"),
    (["--profile", "h100", "--collective", "allreduce"], 2, "did you mean 'all-reduce'"),
    (["--profile", "a100", "--algorithm", "nvls"], 2, "nvls needs every GPU in one NVSwitch node"),
    (["--profile", "h100", "--collective", "all-gather", "--algorithm", "tree"], 2, "does not run all-gather"),
    (["--profile", "h100", "--dtype", "flaot"], 2, "did you mean 'float'"),
    (["--profile", "h100", "--gpus-per-node", "1"], 2, "needs at least 2 GPUs"),
    ([], 2, "name the board with --profile"),
    (["-f", str(EXAMPLE), "--profile", "h100"], 2, "the fabric file describes the fabric"),
    (["-f", str(EXAMPLE), "--no-rail-optimized", "--nodes", "1"], 2, "--nodes, --rail-optimized: the fabric file"),
    (["--profile", "h100", "--gpus-per-node", "1", "--collective", "broadcast"], 2, "needs at least 2 GPUs"),
    (["--profile", "h100", "--nodes", "2", "--fabric", "ib-ndr400", "--oversubscription", "0.5"], 2,
     "oversubscription 0.5 is not a finite number of 1 or more"),
    (["--profile", "h100", "--nodes", "2", "--fabric", "ib-ndr400", "--oversubscription", "nan"], 2,
     "oversubscription nan is not a finite number of 1 or more"),
    (["--profile", "h100", "--nodes", "2", "--fabric", "ib-ndr400", "--oversubscription", "inf"], 2,
     "oversubscription inf is not a finite number of 1 or more"),
])
def test_bad_input_is_refused_with_what_to_fix(args, code, message):
    got_code, got = topology_error(*args)
    assert got_code == code
    assert message in got


def test_fabric_file_problems_name_file_line_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("fabric: ib-ndr400\nnodes:\n  - profile: h100\n    gpus: 8\n    nicss: 8\n"
                   "  - profile: h1000\n    gpus: 8\n")
    _, message = topology_error("-f", str(bad))
    assert f"{bad}:5: nodes[0].nicss: unknown key 'nicss'; did you mean 'nics'?" in message
    bad.write_text("fabric: ib-ndr400\nnodes:\n  - profile: h1000\n    gpus: 8\n")
    _, message = topology_error("-f", str(bad))
    assert f"{bad}:3: nodes[0].profile: unknown GPU profile 'h1000'" in message
    bad.write_text("fabric: ib-nd400\nnodes:\n  - {profile: h100, gpus: 8}\n  - {profile: h100, gpus: 8}\n")
    _, message = topology_error("-f", str(bad))
    assert f"{bad}:1: fabric: 'ib-nd400' is not accepted; did you mean 'ib-ndr400'?" in message
    bad.write_text("nodes:\n  - {profile: h100, gpus: 8\n")
    _, message = topology_error("-f", str(bad))
    assert message.startswith(f"{bad}:") and "not valid YAML" in message
    bad.write_text("fabric: ib-ndr400\nnodes:\n  - {profile: h100, gpus: 8, nics: 0}\n  - {profile: h100, gpus: 8}\n")
    _, message = topology_error("-f", str(bad))
    assert "node0 (GPUs 0-7) cannot reach node1: their node has no NIC" in message
    _, message = topology_error("-f", str(tmp_path / "missing.yaml"))
    assert "no such fabric file" in message


def test_the_command_is_registered_next_to_estimate_roofline():
    result = topology("--help")
    assert result.exit_code == 0 and "--fabric-file" in result.stdout
