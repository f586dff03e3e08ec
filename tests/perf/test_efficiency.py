"""efficiency.yaml: every factor has its source or says why it is assumed; every architecture of the catalog can
be priced for every dtype its boards publish; a broken table is refused, not half-read."""

from __future__ import annotations

import pytest
import yaml

from fakegpu.errors import CatalogError
from fakegpu.perf.ops import Gemm, MemoryOp
from fakegpu.perf.roofline import Board, estimate_op
from fakegpu.profiles import efficiency, load_catalog


def test_every_factor_has_a_source_or_an_assumption():
    doc = yaml.safe_load(efficiency.DATA.read_text())
    entries = efficiency.factor_entries(doc)
    assert len(entries) > 50
    for path, entry in entries:
        text = entry.get("source") or entry.get("assumed")
        assert isinstance(text, str) and len(text) > 20, path


def test_the_hopper_factors_come_from_the_h200_capture():
    eff = efficiency.load()
    for key in ("gemm.compute.bf16", "gemm.memory", "attention.flash.forward", "attention.cudnn.memory",
                "memory.copy", "memory.softmax"):
        factor = eff.factor("hopper", key)
        assert "H200 capture" in factor.source and not factor.assumed, key


@pytest.mark.parametrize("profile", [p.id for p in load_catalog()])
def test_every_board_prices_every_dtype_it_publishes(profile):
    eff, board = efficiency.load(), Board.of(load_catalog().get(profile))
    for dtype in ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"):
        if dtype in board.tflops:
            result = estimate_op(Gemm(name="g", m=4096, n=4096, k=4096, dtype=dtype), board, eff)
            assert result["seconds"]["lower"] < result["seconds"]["expected"] < result["seconds"]["upper"]
    for kind in eff.memory_kinds():
        result = estimate_op(MemoryOp(name=kind, bytes=1 << 30, kind=kind), board, eff)
        assert 0 < result["achieved_bandwidth_gb_s"] <= board.bandwidth / 1e9


def test_a_factor_without_source_is_refused(tmp_path, monkeypatch):
    doc = yaml.safe_load(efficiency.DATA.read_text())
    del doc["architectures"]["hopper"]["memory"]["copy"]["source"]
    broken = tmp_path / "efficiency.yaml"
    broken.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(efficiency, "DATA", broken)
    efficiency.load.cache_clear()
    try:
        with pytest.raises(CatalogError, match=r"memory\.copy: needs a source"):
            efficiency.load()
    finally:
        efficiency.load.cache_clear()
