"""Fault plans (fakegpu/faults/plan.py) and the fault board file (fakegpu/faults/board.py)."""

from __future__ import annotations

import multiprocessing
import os
import re
import time

import pytest

from fakegpu.faults import board
from fakegpu.faults.plan import (
    Fault,
    InvalidFaultPlan,
    from_environment,
    load_file,
    load_text,
    parse_flag,
    records,
)
from fakegpu.launcher import prepare

UUIDS = ["GPU-4d848940-5f8d-7a56-4be6-e569ff6f9f01", "GPU-9bd2ed49-1905-5dbd-e432-494455cda8c4"]


def test_a_flag_and_a_yaml_plan_give_the_same_faults(tmp_path):
    flag = parse_flag("xid=79,device=1,at=20s")
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: xid, xid: 79, device: 1, at: 20s}\n  - {xid: 13, device: " + UUIDS[0] +
                    ", at: 1.5m}\n")
    assert flag == Fault(79, 1, 20.0) and flag.lost
    assert load_file(plan) == [flag, Fault(13, UUIDS[0], 90.0)]
    assert not load_file(plan)[1].lost
    assert from_environment(str(plan)) == load_file(plan)
    assert from_environment('{"faults": [{"xid": 48, "device": 0}]}') == [Fault(48, 0, 0.0)]


@pytest.mark.parametrize("value, expected", [
    ("xid=79,device=1,att=2", "unknown key 'att' (did you mean 'at'?); accepted: kind, xid, corrected_ecc, "
                              "memory_pressure, throttle, nccl, clock, device, rank, at, for, after_allocations, "
                              "after_collectives"),
    ("xid=80,device=1", "faults[0].xid: 80 is not accepted; expected one of: 13, 31, 43, 48, 63, 64, 74, 79, 94, 95"),
    ("xid=79,device=GPU-zz", "faults[0].device: 'GPU-zz' is not a GPU; expected its index (0, 1) or UUID"),
    ("xid=79,device=1,at=soon", "faults[0].at: 'soon' is not a duration"),
    ("xid=79", "faults[0]: give device: the GPU, its index in the run or its UUID"),
    ("xid=79,device", "'device' is not KEY=VALUE; expected e.g. xid=79,device=1,at=20s"),
    ("xid=79,device=1,kind=ecc", "faults[0].kind: 'ecc' is not accepted; expected one of: xid, corrected_ecc, "
                                 "memory_pressure, throttle, nccl"),
    ("device=1,at=2", "faults[0]: say what goes wrong: xid (an Xid event), corrected_ecc (how many correctable"),
    ("xid=48,corrected_ecc=2,device=1", "faults[0]: give one of xid, corrected_ecc, memory_pressure, throttle, nccl, "
                                        "not xid and corrected_ecc"),
    ("nccl=hung,rank=1", "faults[0].nccl: 'hung' is not accepted (did you mean 'hang'?); expected one of: hang, error"),
    ("throttle=thermall,device=0", "faults[0].throttle: 'thermall' is not accepted (did you mean 'thermal'?); "
                                   "expected one of: thermal, hw_thermal,"),
    ("nccl=hang,device=1", "faults[0]: an NCCL fault needs rank: N (the global rank, $RANK, whose NCCL operations "
                           "it hits); faults[0].device: an NCCL fault hits a rank, not a GPU; give rank: N instead"),
    ("nccl=error,rank=1,after_allocations=3", "faults[0].after_allocations: an NCCL fault fires at a time (at), at "
                                              "the rank's Nth NCCL operation (after_collectives) or training step"),
    ("xid=48,device=1,for=3s", "faults[0].for: only memory_pressure, throttle and nccl faults end again; an Xid has "
                               "happened"),
    ("nccl=error,rank=-1", "faults[0].rank: -1 is less than the minimum of 0"),
    ("corrected_ecc=-5,device=1", "faults[0].corrected_ecc: -5 is less than the minimum of 1"),
    ("xid=-1,device=1", "faults[0].xid: -1 is not accepted; expected one of: 13, 31,"),
    ("nccl=hang,rank=1,at=2s,after_collectives=3", "faults[0]: give one trigger: at, after_allocations, "
                                                   "after_collectives or after_steps"),
    ("xid=79,device=0,rank=1", "faults[0].rank: only an NCCL fault (nccl: hang or error) hits a rank; give device"),
    ("xid=79,device=0,after_collectives=5", "faults[0].after_collectives: only an NCCL fault fires at a rank's Nth "
                                            "NCCL operation; use at, after_allocations or after_steps"),
    ("corrected_ecc=0,device=1", "faults[0].corrected_ecc: 0 is less than the minimum of 1"),
    ("corrected_ecc=2,device=1,kind=xid", "faults[0].kind: 'xid' does not go with corrected_ecc"),
])
def test_bad_flags_say_what_is_wrong_and_what_is_accepted(value, expected):
    with pytest.raises(InvalidFaultPlan) as err:
        parse_flag(value)
    assert expected in err.value.message
    assert err.value.exit_code == 2


def test_a_yaml_error_names_its_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - xid: 79\n    device: [1\n")
    with pytest.raises(InvalidFaultPlan, match=r"plan.yaml:4:1: not YAML or JSON"):
        load_file(plan)
    with pytest.raises(InvalidFaultPlan, match="the plan: 'faults' is a required property"):
        load_text("{}", "x")
    with pytest.raises(InvalidFaultPlan, match="No such file"):
        load_file(tmp_path / "missing.yaml")
    # what is not a plan file costs a bounded read: a device that never ends, a runaway file
    with pytest.raises(InvalidFaultPlan, match="fault plan '/dev/urandom': not a regular file"):
        load_file("/dev/urandom")
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate((1 << 20) + 1)
    with pytest.raises(InvalidFaultPlan, match=r"huge\.yaml': more than 1 MiB"):
        load_file(huge)


def test_records_name_each_gpu_by_its_index_in_the_run():
    got = records([Fault(79, UUIDS[1].upper(), 2.0), Fault(13, 0)], UUIDS, start_ns=1_000)
    assert got == [board.Record(2_000_001_000, 1, 79, board.KIND_XID, board.FLAG_LOST),
                   board.Record(1_000, 0, 13, board.KIND_XID, 0)]
    with pytest.raises(InvalidFaultPlan, match=r"fault on GPU 2: the run has GPUs 0\.\.1"):
        records([Fault(79, 2)], UUIDS, 0)
    with pytest.raises(InvalidFaultPlan, match=f"no GPU of the run has this UUID; did you mean {UUIDS[0]}"):
        records([Fault(79, UUIDS[0][:-1] + "0")], UUIDS, 0)


def test_corrected_ecc_errors_are_a_count_on_a_record_of_their_own_kind():
    flag = parse_flag("corrected_ecc=12,device=1,at=5s")
    assert flag == Fault(None, 1, 5.0, corrected_ecc=12) and not flag.lost
    assert flag.describe() == "12 corrected ECC errors" and Fault(79, 0).describe().startswith("Xid 79 (GPU has")
    assert load_text("faults: [{kind: corrected_ecc, corrected_ecc: 12, device: 1, at: 5}]", "x") == [flag]
    # an allocation trigger keeps its count in data: the errors' count is the record's code
    got = records([flag, Fault(None, 0, after_allocations=3, corrected_ecc=1)], UUIDS, start_ns=0)
    assert got == [board.Record(5_000_000_000, 1, 12, board.KIND_CORRECTED_ECC, 0),
                   board.Record(board.NEVER, 0, 1, board.KIND_CORRECTED_ECC, board.FLAG_AFTER_ALLOCATIONS, 3)]


def test_memory_pressure_is_a_size_held_in_whole_mib():
    flag = parse_flag("memory_pressure=20GiB,device=1,at=5s")
    assert flag == Fault(None, 1, 5.0, memory_pressure=20 << 30) and not flag.lost
    assert flag.describe() == "20480 MiB held outside the run"
    assert load_text("faults: [{memory_pressure: 1048577, device: 0}]", "x")[0].memory_pressure == 2 << 20
    got = records([flag, Fault(None, 0, after_allocations=2, memory_pressure=3 << 20)], UUIDS, start_ns=0)
    assert got == [board.Record(5_000_000_000, 1, 20480, board.KIND_MEMORY_PRESSURE, 0),
                   board.Record(board.NEVER, 0, 3, board.KIND_MEMORY_PRESSURE, board.FLAG_AFTER_ALLOCATIONS, 2)]
    for value, expected in (("20G", "'20G' is not a size (20GiB or 20GB?)"), ("0", "0 holds nothing"),
                            ("5000TiB", "'5000TiB' is more than any GPU has")):
        with pytest.raises(InvalidFaultPlan, match=re.escape(f"faults[0].memory_pressure: {expected}")):
            parse_flag(f"memory_pressure={value},device=0")
    with pytest.raises(InvalidFaultPlan, match="give one of xid, corrected_ecc, memory_pressure, throttle, nccl, not "
                                               "xid and memory_pressure"):
        parse_flag("memory_pressure=1GiB,xid=79,device=0")


def test_a_throttle_holds_a_reason_and_a_clock():
    thermal = parse_flag("throttle=thermal,clock=900MHz,device=1,at=5s")
    assert thermal == Fault(None, 1, 5.0, throttle="thermal", clock=(900, False))
    assert thermal.describe() == "SW thermal slowdown to 900 MHz"
    power = load_text("faults: [{throttle: power, device: 0}]", "x")[0]  # half the boost clock by default
    assert power.clock == (50, True) and power.describe() == "SW power cap to 50% of the boost clock"
    got = records([thermal, power], UUIDS, start_ns=0)
    assert got == [board.Record(5_000_000_000, 1, 0x20 | 900 << 8, board.KIND_THROTTLE, 0),
                   board.Record(0, 0, 0x04 | 50 << 8, board.KIND_THROTTLE, board.FLAG_CLOCK_PERCENT)]
    # the clock the readers hold it to: MHz as given, a share of the boost in 15 MHz steps, never above the boost
    assert [board.throttle_mhz(r, 1410) for r in got] == [900, 705]
    assert board.throttle_mhz(got[0], 765) == 765
    for value, expected in (("fast", "'fast' is not a clock"), ("0%", "'0%': a share of the boost clock is 1% "
                                                                       "to 100%")):
        with pytest.raises(InvalidFaultPlan, match=re.escape(f"faults[0].clock: {expected}")):
            parse_flag(f"throttle=sync_boost,clock={value},device=0")
    with pytest.raises(InvalidFaultPlan, match=re.escape("faults[0].clock: only a throttle holds clocks")):
        parse_flag("xid=13,clock=50%,device=0")


def test_memory_pressure_and_throttles_may_end_again():
    throttle = parse_flag("throttle=thermal,device=0,at=10s,for=1.5s")
    pressure = parse_flag("memory_pressure=1GiB,device=1,after_allocations=3,for=2m")
    assert throttle.describe() == "SW thermal slowdown to 50% of the boost clock for 1.5 s"
    assert pressure.describe() == "1024 MiB held outside the run for 120 s"
    t, p = records([throttle, pressure], UUIDS, start_ns=0)
    assert (t.lasts_ns, t.allocations, p.lasts_ns, p.allocations) == (1_500_000_000, 0, 120 * 10**9, 3)
    assert not t.active(9 * 10**9) and t.active(10 * 10**9) and t.active(11_499_999_999)
    assert not t.active(11_500_000_000)  # over
    assert records([parse_flag("throttle=power,device=0")], UUIDS, 0)[0].active(10**18)  # until the run ends
    for value, expected in (("xid=79,device=0,for=3s", "faults[0].for: only memory_pressure, throttle and nccl "
                                                       "faults end again"),
                            ("throttle=power,device=0,for=0", "faults[0].for: '0': give a length of at least 1 ms"),
                            ("throttle=power,device=0,for=0.0004", "faults[0].for: '0.0004': give a length of at "
                                                                   "least 1 ms")):
        with pytest.raises(InvalidFaultPlan, match=re.escape(expected)):
            parse_flag(value)


def test_board_round_trip_fired_and_full(tmp_path):
    state = str(tmp_path)
    assert board.read(state) == []
    planned = [board.Record(10, 0, 13), board.Record(30, 1, 79, flags=board.FLAG_LOST)]
    assert board.append(state, planned) == 2
    assert board.read(state) == planned
    assert board.fired(board.read(state), now_ns=20) == planned[:1]
    assert os.path.getsize(board.board_path(state)) == board.SIZE
    with pytest.raises(board.BoardFull):
        board.append(state, [board.Record(0, 0, 13)] * (board.MAX_RECORDS - 1))
    assert len(board.read(state)) == board.MAX_RECORDS  # the ones that fitted are published


def _append_many(state: str, device: int) -> None:
    for n in range(10):
        board.append(state, [board.Record(n, device, 13)])


def test_concurrent_writers_lose_no_record(tmp_path):
    # Writers race to create the board and to append: the flock and the link-into-place keep every record.
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), d)) for d in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    got = board.read(str(tmp_path))
    assert sorted((r.device, r.fire_ns) for r in got) == sorted((d, n) for d in range(6) for n in range(10))
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_run_puts_its_plan_on_its_board_before_the_command_starts(monkeypatch):
    monkeypatch.delenv("FAKEGPU_FAULTS", raising=False)
    launch = prepare("a100:2", mode="fakecuda", faults=[Fault(79, 1, 5.0)])
    try:
        (r,) = board.read(launch.env["FAKEGPU_STATE_DIR"])
        assert (r.device, r.code, r.lost) == (1, 79, True)
    finally:
        launch.cleanup()
    with pytest.raises(InvalidFaultPlan, match=r"the run has GPUs 0\.\.1"):
        prepare("a100:2", mode="fakecuda", faults=[Fault(79, 5)])
    monkeypatch.setenv("FAKEGPU_FAULTS", '{"faults": [{"xid": 13, "device": 0}]}')
    launch = prepare("a100:2", mode="fakecuda")
    try:
        assert [r.code for r in board.read(launch.env["FAKEGPU_STATE_DIR"])] == [13]
    finally:
        launch.cleanup()


def test_an_allocation_trigger_waits_on_the_board_until_it_fires():
    fault = parse_flag("xid=79,device=1,after_allocations=20")
    assert fault == Fault(79, 1, 0.0, 20)
    (r,) = records([fault], UUIDS, start_ns=5)
    assert (r.fire_ns, r.data, r.flags) == (board.NEVER, 20, board.FLAG_LOST | board.FLAG_AFTER_ALLOCATIONS)
    assert board.fired([r]) == []
    with pytest.raises(InvalidFaultPlan, match="give one trigger: at, after_allocations, after_collectives or "
                                               "after_steps"):
        parse_flag("xid=79,device=1,at=2s,after_allocations=20")
    with pytest.raises(InvalidFaultPlan, match="after_allocations: 0 is less than the minimum of 1"):
        parse_flag("xid=79,device=1,after_allocations=0")


def test_a_watch_sees_lost_gpus_and_fires_allocation_triggers_once(tmp_path):
    watch = board.Watch(str(tmp_path))
    assert not watch.lost(1)  # no board yet: looked for again only after RETRY_S
    (record,) = records([parse_flag("xid=79,device=1,after_allocations=2")], UUIDS, 0)
    board.append(str(tmp_path), [record])
    watch._looked -= board.Watch.RETRY_S
    watch.allocated(0)
    watch.allocated(1)
    assert not watch.lost(1) and board.fired(board.read(str(tmp_path))) == []
    watch.allocated(1)
    assert watch.lost(1) and not watch.lost(0)
    (fired,) = board.read(str(tmp_path))
    stamped = fired.fire_ns
    board.Watch(str(tmp_path)).allocated(1)  # another process reaching the count later changes nothing
    other = board.Watch(str(tmp_path))
    other.allocated(1)
    other.allocated(1)
    assert board.read(str(tmp_path))[0].fire_ns == stamped


def test_a_huge_plan_is_refused_without_being_echoed_back():
    many = '{"faults": [' + ",".join(['{"xid": 79, "device": 0}'] * 5000) + "]}"
    with pytest.raises(InvalidFaultPlan) as err:
        from_environment(many)
    assert "faults: 5000 faults; a run's board holds at most 64" in err.value.message
    assert len(err.value.message) < 400


def test_an_nccl_fault_is_a_rank_s_and_may_wait_for_its_nth_operation():
    hang = parse_flag("nccl=hang,rank=1,after_collectives=4")
    assert hang == Fault(None, None, 0.0, nccl="hang", rank=1, after_collectives=4) and not hang.lost
    assert hang.describe() == ("NCCL operations that hang until the watchdog's timeout on rank 1 from its NCCL "
                               "operation 4")
    error = load_text("faults: [{nccl: error, rank: 3, at: 2s}]", "plan")[0]
    # a rank is no GPU of the run: rank 3 of a run with two GPUs is fine, and names the rank on the board
    hang_r, error_r = records([hang, error], UUIDS, start_ns=7)
    assert hang_r == board.Record(board.NEVER, 1, board.NCCL_HANG, board.KIND_NCCL,
                                  board.FLAG_RANK | board.FLAG_AFTER_COLLECTIVES, 4)
    assert error_r == board.Record(2_000_000_007, 3, board.NCCL_REMOTE_ERROR, board.KIND_NCCL, board.FLAG_RANK, 0)
    assert hang_r.for_rank and hang_r.allocations == 4


def test_a_watch_fires_a_rank_s_nccl_fault_at_its_nth_operation_and_only_for_that_rank(tmp_path):
    state = str(tmp_path)
    board.append(state, records([parse_flag("nccl=hang,rank=1,after_collectives=3"),
                                 parse_flag("nccl=error,rank=1,after_collectives=5"),
                                 parse_flag("xid=79,device=1,after_allocations=1")], UUIDS, 0))
    rank0, rank1 = board.Watch(state), board.Watch(state)
    assert [rank0.collective(0) for _ in range(6)] == [0] * 6  # rank 0's operations fire nothing of rank 1's
    assert [rank1.collective(1) for _ in range(2)] == [0, 0]
    assert rank1.collective(1) == board.NCCL_HANG  # the 3rd
    assert [rank1.collective(1) for _ in range(3)] == [board.NCCL_HANG] * 3  # the hang came first, and stays
    hang, error, lost = board.read(state)
    assert hang.fire_ns < error.fire_ns < board.NEVER and lost.fire_ns == board.NEVER
    # the device-keyed readers take no rank's record for a GPU's: GPU 1 is not lost, nor its allocations counted
    assert not rank1.lost(1) and rank1.pressure(1) == 0 and rank1.slowdown(1, 1410) == 1.0
    assert board.Watch(state).collective(1) == board.NCCL_HANG  # fired for good: another process of rank 1 meets it


def test_an_nccl_fault_with_a_length_hits_only_the_operations_that_start_within_it(tmp_path):
    fault = parse_flag("nccl=hang,rank=0,for=2s")
    assert fault.describe() == "NCCL operations that hang until the watchdog's timeout on rank 0 for 2 s"
    board.append(str(tmp_path), records([fault], UUIDS, start_ns=time.time_ns() - 3 * 10**9))  # fired 3 s ago
    assert board.Watch(str(tmp_path)).collective(0) == 0  # over: a worker restarted after it runs
    board.append(str(tmp_path), records([fault], UUIDS, start_ns=time.time_ns()))
    assert board.Watch(str(tmp_path)).collective(0) == board.NCCL_HANG


def test_a_training_step_trigger_fires_at_a_process_s_nth_step_or_its_rank_s(tmp_path):
    fault = parse_flag("xid=79,device=1,after_steps=2")
    assert fault == Fault(79, 1, 0.0, after_steps=2)
    with pytest.raises(InvalidFaultPlan, match="give one trigger: at, after_allocations, after_collectives or "
                                               "after_steps"):
        parse_flag("xid=79,device=1,after_steps=2,after_allocations=3")
    state = str(tmp_path)
    board.append(state, records([fault, parse_flag("nccl=error,rank=1,after_steps=1")], UUIDS, 0))
    lost, error = board.read(state)
    assert lost.flags == board.FLAG_LOST | board.FLAG_AFTER_STEPS and lost.fire_ns == board.NEVER
    assert error.flags == board.FLAG_RANK | board.FLAG_AFTER_STEPS and error.device == 1
    rank0 = board.Watch(state)
    rank0.stepped(0)  # rank 0's first step: nothing of rank 1's, and one step is not two
    assert board.fired(board.read(state)) == []
    rank0.stepped(0)
    assert [r.code for r in board.fired(board.read(state))] == [79]  # a GPU's fault: any process's 2nd step
    board.Watch(state).stepped(1)
    assert [r.code for r in board.fired(board.read(state))] == [79, board.NCCL_REMOTE_ERROR]


def test_native_mode_refuses_a_training_step_trigger_it_cannot_see():
    from fakegpu.launcher import LaunchUsageError

    with pytest.raises(LaunchUsageError, match="native mode cannot see training steps"):
        prepare("a100:2", "native", faults=[parse_flag("xid=79,device=1,after_steps=2")])
