"""fakecuda publishes its device memory to the shared state; the native nvidia-smi lists the process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from fakegpu.fakecuda.runtime import Runtime
from fakegpu.fakecuda.state import Publisher
from fakegpu.shared_state import read_file, state_dir
from tests.conftest import IN_CI, REPO

MiB = 1 << 20
GiB = 1 << 30


def read(publisher: Publisher) -> dict[int, int]:
    if not os.path.exists(publisher.path):
        return {}
    entry = read_file(publisher.path)
    assert entry is not None, f"{publisher.path} is not a shared-state file"
    pid, kind, name, used = entry
    assert pid == os.getpid() and kind == "C" and name and "\t" not in name
    return {device: n for device, n in enumerate(used) if n}


def test_process_name_is_argv0_as_given():
    """Real NVML and nvidia-smi show argv[0] as the process was started, not its command line: `python3
    torch_memory.py OUT` is "python3" on a real H200 (tests/data/gpu/h200/smi/holding_apps.txt)."""
    code = "from fakegpu.shared_state import process_name; print(process_name())"
    for argv0 in ("python3", sys.executable):
        out = subprocess.run([argv0, "-c", code, "an", "argument"], capture_output=True, text=True, check=True,
                             env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                                  "PYTHONPATH": str(REPO)})
        assert out.stdout.strip() == argv0


def test_state_dir_resolution(tmp_path):
    assert state_dir({"FAKEGPU_STATE_DIR": str(tmp_path)}) == str(tmp_path)
    if not os.path.isdir("/run/fakegpu"):
        assert state_dir({"TMPDIR": "/x"}) == f"/x/fakegpu-{os.getuid()}"


def test_usage_is_context_plus_reserved_published_at_once(tmp_path):
    rt = Runtime.from_spec("a100:2", environ={})
    pub = Publisher(rt, str(tmp_path))
    rt.on_usage = pub.notify
    assert read(pub) == {}                       # nothing used, no file
    block = rt.malloc(1, 100 * MiB)              # context + one 100 MiB segment, published at once
    context = rt.context_bytes(1)
    assert read(pub) == {1: context + 100 * MiB}
    rt.free(1, block)                            # cached: nvidia-smi still shows the segment
    rt.malloc(1, 100)                            # a cache hit on a new small segment: 2 MiB more, a rise
    assert read(pub) == {1: context + 102 * MiB}
    rt.devices[1].allocator.empty_cache()
    rt.usage_changed()                           # a fall shows at once too, as on a real driver
    assert read(pub) == {1: context + 2 * MiB}
    pub.close()
    assert not os.path.exists(pub.path) and not os.listdir(tmp_path)


SCRIPT = """
import sys, torch
import fakegpu.fakecuda.auto
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.torch
def test_nvidia_smi_lists_the_fakecuda_process(tmp_path):
    pytest.importorskip("torch")
    smi = REPO / "native" / "build" / "bin" / "nvidia-smi"
    if not smi.exists():
        if IN_CI:
            pytest.fail("native/build/bin/nvidia-smi missing under CI: `make native` must run first")
        pytest.skip("native nvidia-smi not built (make native)")
    env = {**os.environ, "FAKEGPU_DEVICES": "a100", "FAKEGPU_STATE_DIR": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        out = subprocess.run([str(smi), "--query-compute-apps=pid,used_memory", "--format=csv"], env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        # 1 GiB in one segment plus the A100's CUDA context (the workspace profiles: 420 MiB)
        assert f"{child.pid}, {1024 + 420} MiB" in out.stdout.splitlines()
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert not (tmp_path / f"{child.pid}.proc").exists()  # removed at exit


def test_other_processes_on_the_device_leave_less_for_this_one(tmp_path):
    """One GPU's memory serves every process on it: what another process of the run holds there (its state file)
    is neither free for cudaMemGetInfo nor allocatable here; when that process is gone, it is again."""
    import time

    from fakegpu.fakecuda.errors import ModelOutOfMemory
    from fakegpu.shared_state import StateFile

    rt = Runtime.from_spec("a100:2", environ={})
    pub = Publisher(rt, str(tmp_path))
    rt.on_usage = pub.notify
    alone = rt.mem_get_info(0)[0]
    other = subprocess.Popen(["sleep", "60"])  # a live pid for the other process's file
    try:
        held = StateFile(str(tmp_path), other.pid, "python3")
        held.set(0, 60 * GiB)                    # on board 0 only
        assert rt.mem_get_info(0)[0] == alone - 60 * GiB
        assert rt.mem_get_info(1)[0] == alone     # the other GPU is untouched
        with pytest.raises(ModelOutOfMemory):
            rt.malloc(0, 30 * GiB)
        block = rt.malloc(1, 30 * GiB)
        held.set(0, 10 * GiB)                    # the other process freed some: seen at the next call
        block0 = rt.malloc(0, 30 * GiB)
        rt.free(0, block0)
        rt.free(1, block)
    finally:
        other.kill()
        other.wait()
    # a killed process's file stays until a reader reaps it; this reader skips it at its next rescan (50 ms)
    deadline = time.monotonic() + 5
    while rt.mem_get_info(0)[0] != alone - 30 * GiB and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rt.mem_get_info(0)[0] == alone - 30 * GiB  # only this process's own cached 30 GiB segment
    held.close()
    pub.close()


SHARER = """
import sys, torch
import fakegpu.fakecuda.auto
held = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda")
print("ready", torch.cuda.mem_get_info()[0], flush=True)
try:
    torch.empty(int(sys.argv[2]) << 30, dtype=torch.uint8, device="cuda")
    print("allocated", flush=True)
except torch.OutOfMemoryError as e:
    print("oom", str(e).splitlines()[0], flush=True)
sys.stdin.readline()
"""


@pytest.mark.torch
def test_two_fakecuda_processes_share_one_gpu(tmp_path):
    # A T4 (about 14.6 GiB for CUDA): fakecuda's tensors are host memory, left untouched here, so never resident
    pytest.importorskip("torch")
    env = {**os.environ, "FAKEGPU_DEVICES": "t4", "FAKEGPU_STATE_DIR": str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-c", SHARER, "6", "4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    second = None
    try:
        ready, free1 = first.stdout.readline().split()
        assert ready == "ready" and first.stdout.readline().strip() == "allocated"   # 6 + 4 GiB fit alone
        second = subprocess.Popen([sys.executable, "-c", SHARER, "1", "4"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        ready, free2 = second.stdout.readline().split()
        # the second sees the first's 10 GiB and its context as used (and its own 1 GiB), and 4 GiB more do not fit
        assert ready == "ready" and int(free1) - int(free2) > 5 * GiB
        oom = second.stdout.readline().strip()
        assert oom.startswith("oom CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "), oom
        # as PyTorch words it from NVML: each other process on the GPU, then this one
        assert re.search(rf" is free\. Process {first.pid} has 10\.\d\d GiB memory in use\. Including non-PyTorch "
                         r"memory, this process has 1\.\d\d GiB memory in use\.", oom), oom
    finally:
        for p in (first, second):
            if p is not None:
                p.stdin.close()
                p.wait(timeout=60)


def test_memory_pressure_leaves_less_and_names_no_process(tmp_path):
    import time

    from fakegpu.fakecuda.errors import ModelOutOfMemory
    from fakegpu.faults import board

    rt = Runtime.from_spec("a100:2", environ={"FAKEGPU_STATE_DIR": str(tmp_path)})
    pub = Publisher(rt, str(tmp_path))
    rt.on_usage = pub.notify
    alone = rt.mem_get_info(1)[0]
    board.append(str(tmp_path), [board.Record(time.time_ns(), 1, 60 * 1024, board.KIND_MEMORY_PRESSURE)])
    deadline = time.monotonic() + 5  # a run without a board looks for one again every 100 ms
    while rt.mem_get_info(1)[0] == alone and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rt.mem_get_info(1)[0] == alone - 60 * GiB and rt.mem_get_info(0)[0] == alone
    with pytest.raises(ModelOutOfMemory) as oom:
        rt.malloc(1, 30 * GiB)
    assert "Process" not in str(oom.value) and "Including non-PyTorch memory, this process has" in str(oom.value)
    pub.close()


def test_a_throttled_gpu_is_a_straggler_its_ops_take_boost_over_clock_as_long(tmp_path, monkeypatch):
    import time

    from fakegpu.fakecuda import runtime as runtime_module
    from fakegpu.faults import board

    rt = Runtime.from_spec("a100:2", environ={"FAKEGPU_STATE_DIR": str(tmp_path)})
    # 25% of the A100's 1410 MHz boost, in 15 MHz steps: 345 MHz, so each op takes 1410/345 = 4.09 times as long
    board.append(str(tmp_path), [board.Record(time.time_ns(), 1, 0x20 | 25 << 8, board.KIND_THROTTLE,
                                              board.FLAG_CLOCK_PERCENT)])
    time.sleep(0.2)  # a run without a board looks for one again every 100 ms
    slept: list[float] = []
    monkeypatch.setattr(runtime_module.time, "sleep", slept.append)
    started = time.monotonic_ns() - 10_000_000  # an op that took 10 ms of CPU
    rt.ran(1, started_ns=started)
    rt.ran(0, started_ns=started)  # GPU 0 is not throttled
    (stretch,) = slept
    assert 0.0305 <= stretch < 0.0305 + 0.05, stretch  # (4.087 - 1) x 10 ms, and whatever the call took
    assert rt.faults.slowdown(1, 1410) == 1410 / 345 and rt.faults.slowdown(0, 1410) == 1.0


def busy_ops(seed: int = 22, count: int = 4000) -> list[tuple[int, bool, int, int]]:
    """Ops' busy time (board, compute, started, ended): back to back, overlapping, instantaneous, after short and long
    gaps, across slots, on two boards and of both kinds; in runs of one board and kind, as a training step's come."""
    import random

    from fakegpu.shared_state import BUSY_GAP_NS, SLOT_NS

    rng = random.Random(seed)
    t = (time.monotonic_ns() // SLOT_NS) * SLOT_NS
    ops = []
    board, compute = 0, False
    for _ in range(count):
        if rng.random() < 0.05:
            board, compute = rng.choice([(0, False), (0, True), (1, False), (1, True)])
        t += rng.choice([0] * 12 + [700, 30_000, -2_000, BUSY_GAP_NS + 1, SLOT_NS // 3])
        length = rng.choice([0, 1, 999, 4_000, 25_000, 25_000, 90_000, 900_000])
        ops.append((board, compute, t, t + length))
        t += length
    return ops


def test_busy_spans_joined_per_slot_store_what_a_write_per_op_stores(tmp_path):
    """Publisher.busy joins back-to-back ops of one kind on one board into one span per time slot, written when the
    kind, the board or the slot changes, after a gap, and at flush() (synchronize, exit): the ring must then hold,
    microsecond for microsecond, what StateFile.busy called once per op holds. Ops here: back to back, overlapping,
    instantaneous, after short and long gaps, across slots, on two boards and of both kinds."""
    from fakegpu.shared_state import OFF_BUSY, OFF_INSTANCE, WORK_COMPUTE, WORK_MEMORY, StateFile

    ops = busy_ops()
    per_op = StateFile(str(tmp_path / "per-op"), os.getpid(), "per-op")
    rt = Runtime.from_spec("a100:2", environ={})
    pub = Publisher(rt, str(tmp_path / "joined"))
    pub.file = StateFile(pub.dir, pub.pid, "joined")
    writes = []
    write = pub._write
    pub._write = lambda *span: (writes.append(span), write(*span))
    for board, compute, start, end in ops:
        per_op.busy(board, WORK_COMPUTE if compute else WORK_MEMORY, start, end)
        pub.busy(board, compute, start, end)
    pub.flush()
    ring = per_op._map[OFF_BUSY:OFF_INSTANCE]
    assert any(ring) and pub.file._map[OFF_BUSY:OFF_INSTANCE] == ring
    assert len(writes) < len(ops) / 2, len(writes)  # it did join ops
    per_op.close()
    pub.close()


def run_forked_child(pub: Publisher, op: tuple) -> None:
    """A child of this process that uses `pub` as a DataLoader worker would: a sync point, one more op, its exit."""
    pid = os.fork()
    if pid == 0:
        try:
            pub.flush()
            pub.busy(*op)
            pub.close()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0


def test_a_forked_child_writes_none_of_its_parents_pending_busy_time(tmp_path):
    """A child forked while busy time is pending (the publisher's open span, records the C++ fast path keeps, both
    handed over at sync points and at exit) shares the parent's state file: what it would write there is the
    parent's work a second time. The child writes nothing; the parent writes its work once."""
    from fakegpu.shared_state import OFF_BUSY, OFF_INSTANCE, StateFile

    ops = busy_ops(seed=31, count=60)
    rt = Runtime.from_spec("a100:2", environ={})

    def ring_after(fork: bool) -> bytes:
        name = f"fork-{fork}"
        pub = Publisher(rt, str(tmp_path / name))
        pub.file = StateFile(pub.dir, pub.pid, name)
        for op in ops[:-1]:
            pub.busy(*op)
        pub.busy(*ops[-1])  # (the span it opens stays pending)
        assert pub._span is not None
        if fork:
            run_forked_child(pub, ops[0])
        pub.flush()
        ring = bytes(pub.file._map[OFF_BUSY:OFF_INSTANCE])
        pub.close()
        return ring

    alone = ring_after(fork=False)
    assert any(alone)
    assert ring_after(fork=True) == alone


@pytest.mark.torch
def test_the_cxx_busy_writer_stores_what_the_python_one_does(tmp_path):
    """While the C++ hook is installed the state file's busy rings are written by busy_ring.cpp (the fast path's ops
    without Python): for the same ops, with and without starts, the rings must hold what Publisher.busy and
    StateFile.busy write, word for word, and a forked child writes none of the parent's work. The ring holds the
    mapping: the publisher closes it before the file."""
    pytest.importorskip("torch")
    from fakegpu.fakecuda import extension
    from fakegpu.fakecuda.state import RING_LAYOUT
    from fakegpu.shared_state import OFF_BUSY, OFF_INSTANCE, StateFile

    extension.build()
    ext = extension.load()
    ops: list = busy_ops(seed=7)
    ops += [(board, compute, None, end) for board, compute, _, end in busy_ops(seed=8, count=200)]  # moments' work
    rt = Runtime.from_spec("a100:2", environ={})

    def ring(cxx: bool, fork: bool = False) -> bytes:
        name = f"cxx-{cxx}-fork-{fork}"
        pub = Publisher(rt, str(tmp_path / name))
        pub.file = StateFile(pub.dir, pub.pid, name)
        if cxx:
            pub.ring = ext.BusyRing(pub.file.mapping, RING_LAYOUT, pub.pid)
            with pytest.raises(BufferError):
                pub.file.mapping.close()  # (held by the ring)
        for op in ops:
            pub.busy(*op)
        if fork:
            run_forked_child(pub, ops[0])
        pub.flush()
        out = bytes(pub.file.mapping[OFF_BUSY:OFF_INSTANCE])
        pub.close()
        assert pub.ring is None and pub.file is None and not os.path.exists(pub.path)
        return out

    python = ring(cxx=False)
    assert any(python)
    assert ring(cxx=True) == python
    assert ring(cxx=True, fork=True) == python
