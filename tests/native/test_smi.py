"""nvidia-smi: golden files for the default view, -L, CSV and topo -m (homogeneous and mixed device lists),
the acceptance commands, the process table, and the real messages and exit codes on bad input.

Regenerate the golden files with FAKEGPU_UPDATE_GOLDEN=1 after a deliberate layout change, and read the diff.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from .conftest import GOLDEN, SMI, NativeEnv

pytestmark = pytest.mark.native

MIB = 1 << 20
HOMOGENEOUS = "a100:4"
MIXED = "a100:2,h100:2,l4-24gb,rtx4090"
TIMESTAMP = re.compile(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} +$")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("FAKEGPU_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing; run with FAKEGPU_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def mask_timestamp(text: str) -> str:
    first, rest = text.split("\n", 1)
    assert TIMESTAMP.match(first), first
    return "<timestamp>\n" + rest


@pytest.mark.parametrize(("label", "spec"), [("homogeneous", HOMOGENEOUS), ("mixed", MIXED)])
def test_default_view_golden(native: NativeEnv, label: str, spec: str) -> None:
    out = native.smi(devices=spec)
    assert out.returncode == 0, out.stdout + out.stderr
    body = mask_timestamp(out.stdout)
    rows = [line for line in body.splitlines()[1:] if line.strip()]
    assert all(len(line) == 91 for line in rows), "every table row is 91 characters"
    check_golden(f"smi-default-{label}.txt", body)


@pytest.mark.parametrize(("label", "spec"), [("homogeneous", HOMOGENEOUS), ("mixed", MIXED)])
def test_list_golden(native: NativeEnv, label: str, spec: str) -> None:
    out = native.smi("-L", devices=spec)
    assert out.returncode == 0
    check_golden(f"smi-L-{label}.txt", out.stdout)


CSV_FIELDS = ("index,name,uuid,serial,pci.bus_id,driver_version,count,memory.total,memory.used,memory.free,"
              "memory.reserved,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,"
              "clocks.mem,clocks.max.sm,clocks.max.mem,compute_cap,persistence_mode,pstate,mig.mode.current,"
              "fan.speed,ecc.mode.current")


@pytest.mark.parametrize(("label", "spec"), [("homogeneous", HOMOGENEOUS), ("mixed", MIXED)])
@pytest.mark.parametrize("fmt", ["csv", "csv,noheader,nounits"])
def test_csv_golden(native: NativeEnv, label: str, spec: str, fmt: str) -> None:
    out = native.smi(f"--query-gpu={CSV_FIELDS}", f"--format={fmt}", devices=spec)
    assert out.returncode == 0, out.stdout
    check_golden(f"smi-csv-{label}-{fmt.replace(',', '-')}.txt", out.stdout)


@pytest.mark.parametrize(("label", "spec"), [("homogeneous", "a100:8,a100:2"), ("mixed", MIXED)])
def test_topo_golden(native: NativeEnv, label: str, spec: str) -> None:
    out = native.smi("topo", "-m", devices=spec)
    assert out.returncode == 0
    check_golden(f"smi-topo-{label}.txt", out.stdout)


def test_acceptance_list(native: NativeEnv) -> None:
    out = native.smi("-L", devices="a100:4")
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    uuid = r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
    for i, line in enumerate(lines):
        assert re.fullmatch(rf"GPU {i}: NVIDIA A100-SXM4-80GB \(UUID: {uuid}\)", line)


def test_acceptance_csv(native: NativeEnv) -> None:
    out = native.smi("--query-gpu=index,name,memory.total", "--format=csv,noheader", devices="a100:4")
    assert out.stdout.splitlines() == [f"{i}, NVIDIA A100-SXM4-80GB, 81920 MiB" for i in range(4)]


def test_csv_header_units_and_aliases(native: NativeEnv) -> None:
    out = native.smi("--query-gpu=gpu_name,memory.total,power.draw,fan.speed", "--format=csv", devices="a100:1")
    header, row = out.stdout.splitlines()
    assert header == "name, memory.total [MiB], power.draw [W], fan.speed [%]"
    assert row == "NVIDIA A100-SXM4-80GB, 81920 MiB, 60.00 W, [N/A]"


def test_every_listed_field_is_queryable(native: NativeEnv) -> None:
    """Exporters ask --help-query-gpu for the field list and query it whole (nvidia_gpu_exporter does)."""
    listing = native.smi("--help-query-gpu", devices="a100:1").stdout
    fields = re.findall(r'^"([^"]+)"', listing, re.M)
    assert len(fields) >= 98 and len(set(fields)) == len(fields)
    out = native.smi(f"--query-gpu={','.join(fields)}", "--format=csv,nounits", devices="h100:1")
    assert out.returncode == 0, out.stdout
    header, row = out.stdout.splitlines()
    names = [h.split(" [")[0] for h in header.split(", ")]
    assert names == fields
    values = dict(zip(fields, row.split(", "), strict=True))
    assert values["power.draw.average"] == values["power.draw.instant"] == values["power.draw"]
    assert values["clocks_event_reasons.gpu_idle"] == "Active"
    assert values["clocks_event_reasons.sw_power_cap"] == "Not Active"
    assert values["pcie.link.gen.gpumax"] == "5" and values["driver_model.current"] == "[N/A]"
    # Hopper remaps rows instead of retiring pages (a real H200: retired_pages.pending [N/A])
    assert values["ecc.errors.corrected.aggregate.total"] == "0" and values["retired_pages.pending"] == "[N/A]"
    assert values["clocks.default_applications.graphics"] == values["clocks.max.graphics"]
    busy = subprocess.Popen(["sleep", "60"])
    try:
        native.register(busy.pid, 0, 1 << 30, "python3")
        with native.working(busy.pid, 0):
            again = native.smi("--query-gpu=clocks_throttle_reasons.gpu_idle,clocks_event_reasons.gpu_idle",
                               "--format=csv,noheader", devices="h100:1")
        assert again.stdout.strip() == "Not Active, Not Active"      # busy: the idle reason goes
    finally:
        busy.kill()
        busy.wait()


def test_select_by_index_list_uuid_and_bus_id(native: NativeEnv) -> None:
    uuids = [line.split("UUID: ")[1][:-1] for line in native.smi("-L", devices="a100:4").stdout.splitlines()]
    out = native.smi("-i", "3,1", "--query-gpu=index", "--format=csv,noheader", devices="a100:4")
    assert out.stdout.split() == ["1", "3"]
    out = native.smi(f"--id={uuids[2]}", "-L", devices="a100:4")
    assert out.stdout.startswith("GPU 2:")
    out = native.smi("-i", "00000000:5D:00.0", "-L", devices="a100:4")
    assert out.stdout.startswith("GPU 3:")


def test_registered_process_in_table_and_memory(native: NativeEnv) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        native.register(sleeper.pid, 1, 20480 * MIB, "python3")
        table = native.smi(devices="a100:2").stdout
        table_550 = native.smi(devices="a100:2", FAKEGPU_DRIVER_VERSION="550.127.08").stdout
        apps = native.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv", devices="a100:2")
        used = native.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", devices="a100:2")
    finally:
        sleeper.kill()
        sleeper.wait()
    # 570 and later (the default driver is 580) widen the PID column by six, as in a real 570 capture:
    # "|    0   N/A  N/A         2753460      C   VLLM::Worker_TP0                      79028MiB |"
    row = f"|    1   N/A  N/A{sleeper.pid:>16}      C   {'python3':<35}{'20480MiB':>11} |"
    assert row in table.splitlines()
    row_550 = f"|    1   N/A  N/A{sleeper.pid:>10}      C   {'python3':<41}{'20480MiB':>11} |"
    assert row_550 in table_550.splitlines()
    assert all(len(line) == 91 for line in table.splitlines()[1:] + table_550.splitlines()[1:] if line.strip())
    assert "No running processes found" not in table
    assert "|   20480MiB /  81920MiB |" in table  # no idle MiB on 580 (a real H200 shows 0MiB with no process)
    assert apps.stdout.splitlines() == ["pid, process_name, used_gpu_memory [MiB]",
                                        f"{sleeper.pid}, python3, 20480 MiB"]
    assert used.stdout.split() == ["0", "20480"]


def test_query_report(native: NativeEnv) -> None:
    out = native.smi("-q", "-i", "1", devices=MIXED)
    assert out.returncode == 0
    assert "==============NVSMI LOG==============" in out.stdout
    # Keys padded to column 55 on 580 (a real H200's q.txt)
    assert re.search(r"^    Product Name {39}: NVIDIA A100-SXM4-80GB$", out.stdout, re.M)
    assert re.search(r"^Attached GPUs {42}: 6$", out.stdout, re.M)
    assert "GPU 00000000:2A:00.0" in out.stdout


def _sections(report: str) -> dict[str, list[str]]:
    """A -q report's GPU-level blocks: a line at four spaces and the deeper lines under it."""
    blocks: dict[str, list[str]] = {}
    current: list[str] = []
    for line in report.splitlines():
        if re.match(r"^    \S", line):
            current = blocks.setdefault(line.split(":")[0].strip(), [line])
        elif line.startswith("        ") and current:
            current.append(line)
    return blocks


SAMPLES = [f"{kind} Utilization Samples" for kind in ("GPU", "Memory", "ENC", "DEC", "JPG", "OFA")]


# The sections a real H200 on 580.159.04 prints for each type (tests/data/gpu/h200/smi/qd_*.txt).
@pytest.mark.parametrize(
    ("display", "titles"),
    [
        ("MEMORY", ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"]),
        ("pids,POWER", ["GPU Power Readings", "Power Samples", "GPU Memory Power Readings", "Module Power Readings",
                        "Processes"]),                                # any case, the report's order
        ("CLOCK,TEMPERATURE", ["Temperature", "Clocks", "Applications Clocks", "Default Applications Clocks",
                               "Deferred Clocks", "Max Clocks", "Max Customer Boost Clocks", "SM Clock Samples",
                               "Memory Clock Samples", "Clock Policy"]),
        ("UTILIZATION,ECC,COMPUTE,PERFORMANCE", ["Performance State", "Clocks Event Reasons",
                                                 "Clocks Event Reasons Counters", "Sparse Operation Mode",
                                                 "Compute Mode", "Utilization", *SAMPLES, "ECC Mode", "ECC Errors"]),
        ("VOLTAGE", []),                                              # a type whose section we do not model
    ],
)
def test_query_display_narrows_the_report(native: NativeEnv, display: str, titles: list[str]) -> None:
    full = native.smi("-q", "-i", "0", devices="a100:2")
    narrow = native.smi("-q", "-d", display, "-i", "0", devices="a100:2")
    assert full.returncode == 0 and narrow.returncode == 0, narrow.stdout
    lines = narrow.stdout.splitlines()
    assert "GPU 00000000:18:00.0" in lines and "Driver Version" in narrow.stdout
    assert list(_sections(narrow.stdout)) == titles
    whole = _sections(full.stdout)
    for title, block in _sections(narrow.stdout).items():
        if "Samples" not in title:                                     # only -d shows the sample summaries
            assert block == whole[title]                               # the same lines the whole report has
    both = native.smi("-q", f"--display={display}", devices="a100:2")
    assert both.stdout.count("GPU 00000000:") == 2


@pytest.mark.parametrize("args", [("-q", "-x", "-d", "MEMORY"), ("-L", "-d", "MEMORY"), ("-q", "-d")])
def test_query_display_bad_combinations(native: NativeEnv, args: tuple[str, ...]) -> None:
    out = native.smi(*args, devices="a100:1")
    assert out.returncode == 2 and "Invalid combination of input arguments" in out.stdout


# RESET_STATUS too: driver 580 refuses it like an unknown type (a real H200, qd_RESET_STATUS.txt, status 2).
@pytest.mark.parametrize("display", ["MEMORY,BOGUS", "", "RESET_STATUS"])
def test_query_display_unknown_types(native: NativeEnv, display: str) -> None:
    out = native.smi("-q", "-d", display, devices="a100:1")
    assert (out.returncode, out.stdout) == (2, "Failed to parse --display/-d flags\n")


@pytest.mark.parametrize(
    ("spec", "links", "speed"),
    [("a100:2", 12, "25 GB/s"), ("h100:1", 18, "26.562 GB/s"), ("l4-24gb", 0, None)],
)
def test_nvlink_status(native: NativeEnv, spec: str, links: int, speed: str | None) -> None:
    listing = native.smi("-L", devices=spec).stdout.splitlines()
    for args in (("nvlink", "-s"), ("nvlink", "--status")):
        out = native.smi(*args, devices=spec)
        assert out.returncode == 0, out.stdout
        lines = out.stdout.splitlines()
        gpus = [line for line in lines if line.startswith("GPU ")]
        assert gpus == listing                                # the same GPU lines as -L
        assert lines[1:links + 1] == [f"\t Link {n}: {speed}" for n in range(links)]
        assert len(lines) == len(gpus) * (links + 1)
    one = native.smi("nvlink", "-s", "-i", "1", devices="a100:2").stdout.splitlines()
    assert one[0].startswith("GPU 1: ") and len(one) == 13


def _interruptible() -> None:
    # Ctrl-C's default action, whatever pytest inherited: a shell starts background jobs with SIGINT ignored,
    # and an ignored signal stays ignored across exec (nvidia-smi, like most tools, leaves the disposition alone)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_loop_repeats(native: NativeEnv) -> None:
    proc = subprocess.Popen([str(SMI), "-L", "-lms", "200"], stdout=subprocess.PIPE, text=True,
                            env=native.env("a100:1"), preexec_fn=_interruptible)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert out.count("GPU 0: NVIDIA A100-SXM4-80GB") >= 3


def test_help(native: NativeEnv) -> None:
    for flag in ("-h", "--help"):
        out = native.smi(flag)
        assert out.returncode == 0 and "--query-gpu=" in out.stdout


@pytest.mark.parametrize(
    ("args", "devices", "message", "code"),
    [
        (("--query-gpu=index,bogus", "--format=csv"), "a100:1", 'Field "bogus" is not a valid field to query.', 2),
        (("--query-compute-apps=pid,bogus", "--format=csv"), "a100:1", 'Field "bogus" is not a valid field', 2),
        (("-i", "4"), "a100:2", "No devices were found", 6),
        (("-i", "GPU-nope", "-L"), "a100:2", "No devices were found", 6),
        (("-i", ""), "a100:2", "No devices were found", 6),
        ((), "", "No devices were found", 6),
        (("-L",), None, "No devices were found", 6),
        # no option at all: a real 580 driver's words and status (err_flag.txt)
        (("--frobnicate",), "a100:1", "ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h'.",
         255),
        (("topo",), "a100:1", "Invalid combination of input arguments", 2),
        (("nvlink",), "a100:1", "Invalid combination of input arguments", 2),
        (("nvlink", "-e"), "a100:1", "Invalid combination of input arguments", 2),
        (("-L", "nvlink", "-s"), "a100:1", "ERROR: Option nvlink is not recognized", 255),  # a subcommand comes first
        (("-l", "abc"), "a100:1", "Invalid combination of input arguments", 2),
        (("-i",), "a100:1", "Invalid combination of input arguments", 2),
        (("--query-gpu=index",), "a100:1", "Missing --format option", 2),
        (("--query-gpu=index", "--format=xml"), "a100:1", "Format modifier is not recognized.", 2),  # err_format.txt
    ],
)
def test_bad_input(native: NativeEnv, args: tuple[str, ...], devices: str | None, message: str, code: int) -> None:
    out = native.smi(*args, devices=devices)
    assert out.returncode == code, out.stdout
    assert message in out.stdout


def test_garbage_arguments_never_crash(native: NativeEnv) -> None:
    garbage = ["-i", "\x01\x02", "--query-gpu=" + "x" * 10000, "--format=csv", "-q" * 300, "-" * 5000,
               "--id=" + ",".join(["0"] * 3000), "topo", "-m" * 50, "--loop-ms=-3", "\xff\xfe"]
    for i in range(len(garbage)):
        for j in range(len(garbage)):
            out = native.smi(garbage[i], garbage[j], devices="a100:2")
            assert out.returncode in (0, 2, 6, 255), (garbage[i][:20], garbage[j][:20], out.returncode)


def test_a_selection_keeps_the_hosts_identities(native: NativeEnv, tmp_path) -> None:
    """The table the runtime writes for NVIDIA_VISIBLE_DEVICES=3,1: GPUs 0 and 1 with host GPUs 1 and 3's UUID,
    serial, bus id and minor number, as nvidia-smi in a container under NVIDIA's runtime shows them."""
    from fakegpu.devices import resolve_devices, select_devices
    from fakegpu.devices.table import write_table

    host = resolve_devices("a100:4", seed="0")
    table = tmp_path / "devices.tbl"
    write_table(table, select_devices(host, ["3", "1"]), "a100:4", "0", ("3", "1"))
    out = native.smi("--query-gpu=index,uuid,serial,pci.bus_id", "--format=csv,noheader", devices=None,
                     FAKEGPU_DEVICE_TABLE=str(table))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{i}, {host[h].uuid}, {host[h].serial}, {host[h].pci_bus_id}"
                                       for i, h in enumerate((1, 3))]
    minors = [line.split(":")[1].strip() for line in native.smi("-q", devices=None, FAKEGPU_DEVICE_TABLE=str(table))
              .stdout.splitlines() if line.strip().startswith("Minor Number")]
    assert minors == ["1", "3"]


def test_a_selection_of_none_finds_no_devices(native: NativeEnv, tmp_path) -> None:
    from fakegpu.devices.table import write_table

    table = tmp_path / "devices.tbl"
    write_table(table, [], "a100:4", "0", ())
    out = native.smi("-L", devices=None, FAKEGPU_DEVICE_TABLE=str(table))
    assert (out.returncode, out.stdout) == (6, "No devices were found\n")  # real nvidia-smi's words and code


@pytest.mark.parametrize("args", [("mig", "-lgi"), ("mig", "--list-gpu-instances"), ("mig", "-lci", "-i", "0"),
                                  ("mig", "-lcip"), ("mig", "-cgi", "9,14", "-C"), ("mig", "-dci", "-gi", "1")])
@pytest.mark.parametrize("spec", ["a100:2", "l4-24gb"])
@pytest.mark.parametrize(("driver", "status"), [("580.95.05", 0), ("550.127.08", 6)])
def test_mig_reports_say_no_mig_enabled_device_as_a_driver_does(native: NativeEnv, args: tuple[str, ...],
                                                                spec: str, driver: str, status: int) -> None:
    # MIG mode is off on these boards (no layout); MIG-capable or not, the driver answers the one
    # line scripts test for (`grep "No MIG-enabled devices found"`): with status 0 on 580 (a real H200's
    # mig -lgi, -lcip and -cgi 19, exit_status.tsv), 6 before.
    out = native.smi(*args, devices=spec, FAKEGPU_DRIVER_VERSION=driver)
    assert (out.returncode, out.stdout) == (status, "No MIG-enabled devices found.\n"), out.stdout + out.stderr


@pytest.mark.parametrize("args", [("mig", "-lgip"), ("mig", "-lgipp")])
def test_mig_profile_lists_need_no_mig_mode(native: NativeEnv, args: tuple[str, ...]) -> None:
    """A board's GPU instance profiles and placements are listed with MIG off, every instance free (a real H200,
    mig_lgip.txt and mig_lgipp.txt); a board without MIG has none to list."""
    out = native.smi(*args, devices="a100:1")
    assert out.returncode == 0, out.stdout
    assert ("7/7" if args[1] == "-lgip" else "Profile ID 19 Placements: {0,1,2,3,4,5,6}:1") in out.stdout
    none = native.smi(*args, devices="l4-24gb")
    assert (none.returncode, none.stdout) == (0, "No MIG-enabled devices found.\n")


@pytest.mark.parametrize("args", [("mig",), ("mig", "-lgi", "-lci"), ("mig", "-x"), ("mig", "-i"),
                                  ("mig", "-cgi", "-C")])
def test_mig_with_no_report_or_two_is_refused(native: NativeEnv, args: tuple[str, ...]) -> None:
    out = native.smi(*args)
    assert out.returncode == 2 and out.stdout.startswith("Invalid combination of input arguments.")
