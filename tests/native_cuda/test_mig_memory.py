"""Memory per MIG instance: a process on a slice is charged to that slice (NVML's MIG handles, their process
lists with the instance's IDs, nvidia-smi's process rows) and competes for memory only with the processes on the
same slice, in native mode and in fakecuda (the twin writers of fakegpu/shared_state.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fakegpu.devices import resolve_devices
from tests.native_cuda.conftest import run_fakegpu
from tests.subprocess_torch import stdout_json

pytestmark = [pytest.mark.native, pytest.mark.torch]

SPEC = "a100:mig=3g.40gb+2g.20gb+1g.10gb"
PROBE = Path(__file__).resolve().parents[1] / "data" / "probes" / "mig_memory.py"
MIB = 1 << 20


@pytest.mark.parametrize("mode", ["native", "fakecuda"])
def test_each_process_is_charged_to_its_slice(cuda_build, torch_python, mode: str) -> None:
    (board,) = resolve_devices(SPEC)
    # the probe reads NVML with pynvml (this interpreter's); its torch processes run on `torch_python`
    proc = run_fakegpu(["--devices", SPEC, "--mode", mode, "--", sys.executable, str(PROBE), torch_python], timeout=300,
                       complete=stdout_json())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    pa, pb = out["pids"]
    three, two, one = out["slices"]
    assert [s["gi"] for s in out["slices"]] == [m.gi_id for m in board.mig]
    # nothing on the 3g.40gb; each holder on its own slice, with at least what it allocated, and its IDs
    assert three == {"gi": board.mig[0].gi_id, "used": 0, "procs": []}
    for s, pid, held, m in ((two, pa, 2048, board.mig[1]), (one, pb, 6144, board.mig[2])):
        assert [p[0] for p in s["procs"]] == [pid], s
        assert s["used"] == s["procs"][0][1] >= held * MIB
        assert s["procs"][0][2:] == [m.gi_id, 0]
    assert sorted(out["board_procs"]) == sorted([[pa, board.mig[1].gi_id, 0], [pb, board.mig[2].gi_id, 0]])
    # a slice's memory is its own: full on the 1g.10gb, room on the 2g.20gb
    assert out["tries"] == {"same_slice": "oom", "other_slice": "ok"}
    # nvidia-smi's process rows carry the GPU and compute instance IDs
    rows = {int(m[2]): (int(m[0]), int(m[1])) for m in re.findall(r"\|\s+0\s+(\d+)\s+(\d+)\s+(\d+)\s+C ", out["smi"])}
    assert rows == {pa: (board.mig[1].gi_id, 0), pb: (board.mig[2].gi_id, 0)}, out["smi"]
