"""Telemetry recordings (fakegpu/faults/replay.py): parsed, checked, and compiled for NVML."""

from __future__ import annotations

import json

import pytest

from fakegpu.faults import replay
from fakegpu.faults.replay import InvalidReplay, Sample, parse

UUIDS = ["GPU-4d848940-5f8d-7a56-4be6-e569ff6f9f01", "GPU-9bd2ed49-1905-5dbd-e432-494455cda8c4"]
CSV = """time,device,metric,value
2s,0,utilization.gpu,90
0,0,utilization.gpu,20
0.5,GPU-9BD2ED49-1905-5dbd-e432-494455cda8c4,DCGM_FI_DEV_POWER_USAGE,410.5
1m,1,clocks.sm,900
"""


def test_csv_and_json_give_the_same_sorted_samples() -> None:
    got = parse(CSV, "rec.csv", UUIDS)
    assert got == [Sample(0, replay.METRIC_GPU_UTIL, 0, 20.0), Sample(0, replay.METRIC_GPU_UTIL, 2000, 90.0),
                   Sample(1, replay.METRIC_POWER_W, 500, 410.5), Sample(1, replay.METRIC_SM_CLOCK_MHZ, 60000, 900.0)]
    rows = [dict(zip(replay.COLUMNS, line.split(","), strict=True)) for line in CSV.splitlines()[1:]]
    assert parse(json.dumps(rows), "rec.json", UUIDS) == got
    assert parse(json.dumps({"samples": rows}), "rec.json", UUIDS) == got


def test_a_compiled_recording_reads_back(tmp_path) -> None:
    samples = parse(CSV, "rec.csv", UUIDS)
    path = replay.write(tmp_path, samples, start_ns=123)
    assert path.name == replay.FILE_NAME and path.stat().st_size == 24 + 16 * len(samples)
    assert replay.read(path) == (123, samples)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text, expected", [
    ("time,gpu,metric,value\n0,0,power.draw,1\n", "rec: the first line is 'time,gpu,metric,value'; a recording's "
                                                 "CSV header is time,device,metric,value"),
    ("time,device,metric,value\n0,2,power.draw,1\n", "rec:2: GPU 2: the run has GPUs 0..1"),
    ("time,device,metric,value\n0,GPU-x,power.draw,1\n", "rec:2: device 'GPU-x' is not a GPU of the run"),
    ("time,device,metric,value\n0,0,power,1\n", "rec:2: metric 'power' is not replayed (did you mean power.draw?); "
                                               "accepted: utilization.gpu"),
    ("time,device,metric,value\nsoon,0,power.draw,1\n", "rec:2: time 'soon' is not a duration from the run's start"),
    ("time,device,metric,value\n0,0,utilization.gpu,101\n", "rec:2: utilization.gpu 101 % is outside 0..100 %"),
    ("time,device,metric,value\n0,0,power.draw,hot\n", "rec:2: value 'hot' is not a number"),
    ("time,device,metric,value\n0,0,power.draw\n", "rec:2: no value; each sample has time, device, metric, value"),
    ("time,device,metric,value\n", "rec: no samples"),
    ('{"samples": 3}', "rec: expected a list of samples"),
    ('[{"time": 0, "device": 0}', "rec:1:26: not JSON"),
])
def test_a_bad_recording_says_where_and_what_is_accepted(text: str, expected: str) -> None:
    with pytest.raises(InvalidReplay) as err:
        parse(text, "rec", UUIDS)
    assert expected in err.value.message and err.value.exit_code == 2


def test_a_missing_huge_binary_or_endless_file_is_named(tmp_path) -> None:
    with pytest.raises(InvalidReplay, match=r"telemetry replay '.*missing\.csv': No such file"):
        replay.load(tmp_path / "missing.csv", UUIDS)
    huge = tmp_path / "huge.csv"
    with open(huge, "wb") as f:
        f.truncate(replay.MAX_FILE_BYTES + 1)  # sparse
    with pytest.raises(InvalidReplay, match=r"huge\.csv': more than 512 MiB; a recording is at most that"):
        replay.load(huge, UUIDS)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe" + bytes(range(256)) * 4096)  # 1 MiB of garbage
    with pytest.raises(InvalidReplay, match=r"binary\.csv': 'utf-8' codec can't decode"):
        replay.load(binary, UUIDS)
    with pytest.raises(InvalidReplay, match="'/dev/urandom': not a regular file"):
        replay.load("/dev/urandom", UUIDS)
