"""The C++ charging hook (charge_hook.cpp, extension.py) and allocator model (allocator.cpp) against the Python ones
(dispatch.ChargeMode, allocator.py).

Both call the same rules (dispatch.ChargeRules); what the C++ hook changes is who runs the op and how its
arguments reach Python. So the allocator model must see the same events in the same order under either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakecuda.test_workspace import _per_call_workspaces

pytestmark = pytest.mark.torch
REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="module")
def extension():
    """The extension for this torch: `make test` builds it first; built here otherwise (~40 s), not skipped."""
    pytest.importorskip("torch")
    from fakegpu.fakecuda import extension

    extension.build()
    return extension.load()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _workloads(hook: str, state: Path, *options: str) -> dict:
    # (a state folder of its own: a fault board another run left in the default one would keep the fast path off)
    proc = subprocess.run([sys.executable, str(SCRIPTS / "charge_workloads.py"), *options], capture_output=True,
                          text=True, timeout=600, env=_env(FAKEGPU_FAKECUDA_HOOK=hook, FAKEGPU_STATE_DIR=str(state)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _same_events(got: dict, wanted: dict) -> None:
    assert got["workloads"].keys() == wanted["workloads"].keys()
    for name, expected in wanted["workloads"].items():
        got_one = got["workloads"][name]
        assert len(expected["events"]) > 10, name  # the workload reached the allocator at all
        events, want = got_one["events"], expected["events"]
        first = next((i for i, (e, w) in enumerate(zip(events, want, strict=False)) if e != w),
                     min(len(events), len(want)))
        assert events == want, (f"{name}: event {first} of {len(want)} differs: got {events[first:first + 3]}, "
                                f"expected {want[first:first + 3]}")
        assert got_one["stats"] == expected["stats"], name


def test_the_allocator_sees_the_same_events_under_either_hook(extension, tmp_path):
    cxx, python = _workloads("cxx", tmp_path), _workloads("python", tmp_path)
    assert (cxx["hook"], python["hook"]) == ("ChargeHook", "ChargeMode")
    # and the allocator model with each: C++ with the C++ hook, so both are compared here on real workloads
    assert (cxx["allocator"], python["allocator"]) == ("CxxDeviceAllocator", "DeviceAllocator")
    assert cxx["fast_ops"] > 300 and python["fast_ops"] is None  # the C++ side's common ops charged in C++
    _same_events(cxx, python)


def test_the_fast_path_charges_what_the_python_rules_charge(extension, tmp_path):
    """charge_fast.cpp against the same C++ hook with every op through ChargeRules.after: same model, so the
    addresses must agree too."""
    fast, rules = _workloads("cxx", tmp_path), _workloads("cxx", tmp_path, "--no-fast-path")
    assert fast["fast_ops"] > 300 and rules["fast_ops"] is None
    # GEMMs too, where workspaces are taken per call (torch 2.15 on); held ones stay with the Python rules
    assert fast["fast_gemms"] > 20 if _per_call_workspaces() else fast["fast_gemms"] == 0
    # reductions' staging and cuDNN's convolutions, forward and backward (the convnet's first ones load cuDNN
    # through the rules, then come here): 2 steps x 2 convolutions x (forward, backward)
    assert fast["fast_reductions"] > 20 and fast["fast_convolutions"] >= 6
    _same_events(fast, rules)


def test_the_cxx_hook_is_the_default_where_built_and_python_on_request(extension, fakecuda, monkeypatch):
    import fakegpu.fakecuda as fc
    from fakegpu.fakecuda.dispatch import ChargeHook, ChargeMode

    monkeypatch.delenv("FAKEGPU_FAKECUDA_HOOK", raising=False)
    fakecuda("a100")
    assert type(fc._active["charges"]) is ChargeHook and extension.enabled()
    fc.deactivate()
    assert not extension.enabled()
    monkeypatch.setenv("FAKEGPU_FAKECUDA_HOOK", "python")
    fakecuda("a100")
    assert type(fc._active["charges"]) is ChargeMode and not extension.enabled()


def test_a_hook_name_that_is_not_one_is_refused_with_the_accepted_ones(fakecuda, monkeypatch):
    import fakegpu.fakecuda as fc

    monkeypatch.setenv("FAKEGPU_FAKECUDA_HOOK", "cpp")
    with pytest.raises(ValueError, match=r"'cpp' is not a charging hook; accepted: auto, cxx, python"):
        fakecuda("a100")
    assert not fc.is_active()


def test_cxx_without_a_build_is_an_error_and_auto_falls_back_to_python(tmp_path):
    script = ("import fakegpu.fakecuda as fc, sys\n"
              "try:\n    fc.activate('a100')\nexcept Exception as e:\n    print(type(e).__name__, e); sys.exit(3)\n"
              "print(type(fc._active['charges']).__name__)\n")
    env = _env(XDG_CACHE_HOME=str(tmp_path))  # an empty cache: nothing built
    auto = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert auto.returncode == 0 and auto.stdout.strip() == "ChargeMode", auto.stderr
    cxx = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**env, "FAKEGPU_FAKECUDA_HOOK": "cxx"})
    assert cxx.returncode == 3, cxx.stderr
    assert "ExtensionUnavailable" in cxx.stdout and "-m fakegpu.fakecuda.extension" in cxx.stdout
    assert not list(tmp_path.rglob("*.so"))  # a process never compiles on its own


def test_the_build_command_refuses_unknown_arguments_and_says_what_is_missing(tmp_path):
    module = [sys.executable, "-m", "fakegpu.fakecuda.extension"]
    bad = subprocess.run([*module, "--forse"], capture_output=True, text=True, env=_env(), timeout=120)
    assert bad.returncode == 2 and "unknown argument '--forse'" in bad.stderr
    no_compiler = subprocess.run(module, capture_output=True, text=True, timeout=120,
                                 env=_env(XDG_CACHE_HOME=str(tmp_path), CXX="no-such-g++"))
    assert no_compiler.returncode == 1 and "no C++ compiler 'no-such-g++' on PATH" in no_compiler.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing half-built left


def test_out_of_memory_in_forward_and_backward_is_torchs_error_through_the_hook(extension, fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("t4")
    MiB = 1 << 20
    # a 40 MiB cap, so that small host tensors reach it (the host runs the math: no GiB-sized test tensors)
    torch.cuda.set_per_process_memory_fraction(40 * MiB / torch.cuda.get_device_properties(0).total_memory)
    big = torch.randn(4 * MiB, device="cuda", requires_grad=True)  # 16 MiB
    held = [big * 2]
    with pytest.raises(torch.cuda.OutOfMemoryError, match="CUDA out of memory"):
        held.append(big * 3)  # an op's output, charged by the hook: 48 MiB
    del held
    y = big.exp()  # 32 MiB held for backward, which then needs exp's gradient (16 MiB more), in the engine's C++
    with pytest.raises(torch.cuda.OutOfMemoryError):
        y.sum().backward()
    assert 32 * MiB <= torch.cuda.memory_allocated() < 33 * MiB  # big, exp's result, small scalars


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "python-rules"])
def test_a_gemm_whose_workspace_does_not_fit_is_torchs_out_of_memory_error(extension, fakecuda, fast):
    """The output fits, the call's workspace (8 MiB + 128 KiB on an A100) does not: torch's OOM, as from any
    allocation, whether charge_fast.cpp or ChargeRules._gemm takes it; the output is not left charged."""
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc

    fakecuda("a100")
    was = fc._active["charges"].set_fast(fast)
    try:
        MiB = 1 << 20
        a = torch.randn(256, 256, device="cuda")
        (a @ a).sum().item()  # cuBLAS loaded: the fast path may take GEMMs from here
        torch.cuda.empty_cache()  # (the last call's workspace segment, cached)
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 4 * MiB) / total)
        before, gemms = torch.cuda.memory_allocated(), extension.fast_gemms()
        with pytest.raises(torch.cuda.OutOfMemoryError, match="CUDA out of memory"):
            a @ a
        assert extension.fast_gemms() == (gemms + 1 if fast else None)  # taken where the test says
        assert torch.cuda.memory_allocated() == before
    finally:
        fc._active["charges"].set_fast(was)


def test_parameters_made_from_fake_tensors_and_views_keep_working(extension, fakecuda):
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    # nn.Parameter detaches inside C++ and gives the result a Python object of its own: the hook must not have
    # made one for the view first
    p = torch.nn.Parameter(torch.randn(4, 4, device="cuda"))
    assert p.is_cuda and isinstance(p, torch.nn.Parameter)
    before = torch.cuda.memory_allocated()
    views = [p.t(), p.view(16), p.detach(), p[1:], p.expand(2, 4, 4)]
    assert torch.cuda.memory_allocated() == before and all(v.is_cuda for v in views)


def test_suspended_ops_are_not_charged_and_threads_the_program_starts_are(extension, fakecuda):
    torch = pytest.importorskip("torch")
    import threading

    from fakegpu.fakecuda.dispatch import suspended

    fakecuda("a100")
    x = torch.randn(256, 256, device="cuda")
    before = torch.cuda.memory_allocated()
    # (the function mode off too: it would charge a Python-level call itself)
    with suspended(), torch._C.DisableTorchFunction():
        kept = torch.ops.aten.mul.Tensor(x, 2)  # the caller charges what it makes in there
        assert extension.set_excluded(True)  # the hook is excluded in here (setting it again changes nothing)
    assert torch.cuda.memory_allocated() == before and kept.shape == x.shape
    assert not extension.set_excluded(False)  # and back after
    with torch._C.DisableTorchFunction():
        plain = x.as_subclass(torch.Tensor)  # a view, the storage charged to cuda:0
    results: list = []
    thread = threading.Thread(target=lambda: results.append(torch.ops.aten.mul.Tensor(plain, 2)))
    thread.start()
    thread.join()
    # the hook is per thread, as a mode is: fakecuda turns it on in threads started while it is active (threads.py)
    assert results and torch.cuda.memory_allocated() == before + 256 * 256 * 4
    results.clear()
    assert torch.cuda.memory_allocated() == before
    with torch._C.DisableTorchFunction():
        y = torch.ops.aten.mul.Tensor(plain, 2)  # and on in this one, without the function mode's help
    assert torch.cuda.memory_allocated() == before + 256 * 256 * 4 and y.shape == x.shape


def test_a_built_file_that_does_not_load_is_reported_and_auto_takes_the_python_hook(extension, tmp_path):
    script = ("import fakegpu.fakecuda as fc\n"
              "from fakegpu.fakecuda import extension\n"
              "path = extension.built_path(); path.parent.mkdir(parents=True); path.write_bytes(b'not an ELF')\n"
              "try:\n    extension.load()\nexcept extension.ExtensionUnavailable as e:\n    print('refused:', e)\n"
              "fc.activate('a100')\nprint(type(fc._active['charges']).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=_env(XDG_CACHE_HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    refused, hook = proc.stdout.strip().splitlines()
    assert refused.startswith("refused: cannot load") and "--force" in refused
    assert hook == "ChargeMode"


def test_busy_time_kept_by_the_fast_path_reaches_the_telemetry_in_order(extension, fakecuda):
    """charge_fast.cpp keeps each op's busy time and hands it over in batches: before busy time that Python reports
    itself (an add without grad mode: the engine's sums in backward have a rule of their own), and at a sync point.
    Every op's, in the order the ops ran, back-to-back ops of one kind joined."""
    torch = pytest.importorskip("torch")
    import time

    runtime = fakecuda("a100")
    runtime.faults = None  # (no fault board to look for: the fast path's window stays open)
    x = torch.randn(64, 64, device="cuda")  # the first launch
    x @ x  # cuBLAS loaded, by the Python rules
    time.sleep(0.15)  # past any "not yet" the fast path heard before it (it asks again 100 ms later)
    # (the state file's C++ writer closed: what follows is the way busy time takes without one, where the publisher
    # has no file, or has a Python writer of its own; test_busy_time_of_the_fast_path_is_written_without_python)
    publisher = runtime.on_busy.__self__
    publisher.ring.close()
    publisher.ring = None
    seen: list[tuple[int, str]] = []
    runtime.on_busy = lambda board, compute, started, ended=None: seen.append((started, "tc" if compute else "mem"))
    before, gemms = extension.fast_handled(), extension.fast_gemms()
    for _ in range(5):
        x.exp().sin()  # two element-wise ops charged in C++
        x @ x  # a GEMM charged in C++ too (workspaces per call: torch 2.15), tensor-core work
        with torch.no_grad():  # an add without grad mode, as the engine's sums run: the rules, in Python
            torch.add(x, x)  # (what the fast path kept goes first)
    def runs() -> list[str]:
        """The kinds seen, a run of one kind as one: exp and sin come as one record, or two where a telemetry slot
        ended between them."""
        kinds = [kind for _, kind in seen]
        return [k for i, k in enumerate(kinds) if not i or k != kinds[i - 1]]

    assert runs() == ["mem", "tc"] * 5 + ["mem"] and 15 <= len(seen) <= 20
    handed = len(seen)
    x.exp()
    gemm = _per_call_workspaces()  # (held workspaces, before torch 2.15: the GEMM's rules run in Python)
    assert extension.fast_handled() - before == 5 * (3 if gemm else 2) + 1 and len(seen) == handed  # kept, for now
    assert extension.fast_gemms() - gemms == (5 if gemm else 0)
    torch.cuda.synchronize()
    assert len(seen) == handed + 1 and seen[-1][1] == "mem"
    assert [started for started, _ in seen] == sorted(started for started, _ in seen)


def test_busy_time_of_the_fast_path_is_written_without_python(extension, fakecuda):
    """With the state file made, its busy rings are written in C++ (busy_ring.cpp): the fast path's ops reach them
    at once, without handing records to Python, and Python's own ops' busy time goes through the same writer."""
    torch = pytest.importorskip("torch")
    import time

    from fakegpu.fakecuda.dispatch import ChargeHook
    from fakegpu.shared_state import OFF_BUSY, OFF_INSTANCE

    runtime = fakecuda("a100")
    runtime.faults = None
    x = torch.randn(256, 256, device="cuda")  # memory: the state file, and its writer
    publisher = runtime.on_busy.__self__
    assert publisher.ring is not None and publisher.ring.open
    rules = ChargeHook._installed.rules
    handed: list = []
    rules.fast_busy = handed.append  # (the C++ side asks the rules for it at each hand-over)
    time.sleep(0.15)  # past any "not yet" the fast path heard before it
    before = bytes(publisher.file.mapping[OFF_BUSY:OFF_INSTANCE])
    done = extension.fast_handled()
    for _ in range(50):
        x = (x.exp() * 0.5).sin()
    torch.cuda.synchronize()
    assert extension.fast_handled() - done >= 150 and handed == []
    after = bytes(publisher.file.mapping[OFF_BUSY:OFF_INSTANCE])
    assert after != before  # the ops' time is in the ring


def test_busy_records_joined_by_the_fast_path_make_the_spans_op_by_op_records_make(extension, tmp_path):
    """charge_fast.cpp hands back-to-back ops over as one record where the publisher would join them into one span
    whatever span it holds: the publisher must then write exactly the spans it writes fed op by op."""
    from fakegpu.fakecuda.runtime import Runtime
    from fakegpu.fakecuda.state import Publisher
    from fakegpu.shared_state import BUSY_GAP_NS, OFF_BUSY, OFF_INSTANCE, SLOT_NS, StateFile
    from tests.fakecuda.test_state import busy_ops

    def publish(name: str, records) -> tuple[list, bytes]:
        pub = Publisher(Runtime.from_spec("a100:2", environ={}), str(tmp_path / name))
        pub.file = StateFile(pub.dir, pub.pid, name)
        writes: list[tuple] = []
        write = pub._write
        pub._write = lambda *span: (writes.append(span), write(*span))
        for record in records:
            pub.busy(*record)
        pub.flush()
        ring = bytes(pub.file._map[OFF_BUSY:OFF_INSTANCE])
        pub.close()
        return writes, ring

    for seed in (22, 23, 24):
        ops = busy_ops(seed)
        last = 0
        for i, (board, compute, start, end) in enumerate(ops):  # the fast path's ops end in order (one clock)
            last = max(last, end)
            ops[i] = (board, compute, start, last)
        joined = extension.join_busy(ops, SLOT_NS, BUSY_GAP_NS)
        assert len(joined) < len(ops) / 2, len(joined)  # it did join ops
        op_by_op, one_by_one_ring = publish(f"ops-{seed}", ops)
        assert any(one_by_one_ring)
        assert publish(f"joined-{seed}", joined) == (op_by_op, one_by_one_ring)


def test_the_fast_path_hands_a_device_back_once_a_fault_board_appears(extension, fakecuda, tmp_path):
    """The fast path runs only while the run's fault board cannot speak: it asks again when faults/board.py would look
    for a board again (RETRY_S), and from then the Python rules raise for a GPU that fell off the bus."""
    torch = pytest.importorskip("torch")
    import time

    from fakegpu.faults import board
    from fakegpu.faults.plan import parse_flag, records

    runtime = fakecuda("a100")
    runtime.faults = board.Watch(str(tmp_path))
    x = torch.randn(64, 64, device="cuda")
    time.sleep(0.15)
    before = extension.fast_handled()
    x.exp()
    assert extension.fast_handled() == before + 1
    board.append(str(tmp_path), records([parse_flag("xid=79,device=0")], ["GPU-4d848940-5f8d-7a56-4be6-e569ff6f9f01"],
                                        time.time_ns()))
    time.sleep(board.Watch.RETRY_S + 0.05)
    with pytest.raises(getattr(torch, "AcceleratorError", RuntimeError), match="unknown error"):
        x.exp()
    assert extension.fast_handled() == before + 1
