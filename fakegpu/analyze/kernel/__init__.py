"""`fakegpu analyze-kernel`: what CUDA kernels need, read from their source, PTX, cubins, fatbinaries and the
programs and libraries that embed them, and whether (and how full) they run on a catalog board.

    source.py      .cu/.cuh: kernels (templates, __launch_bounds__) and launches, by a token scan
    ptx.py         PTX per kernel: parameters, virtual registers, memory, instruction mix, tensor cores, FLOPs
    cubin.py       a cubin's per-kernel resources from its .nv.info attributes and sections
    fatbin.py      fatbinary containers: entries per architecture, SASS or PTX, compressed or not
    compat.py      CUDA's binary and PTX compatibility rules: does an image run on a compute capability
    occupancy.py   theoretical occupancy by the occupancy calculator's rules (occupancy_rules.yaml + catalog)
    report.py      one input file to its report entry (schema analyze-kernel)
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from fakegpu.analyze.kernel.report import SCHEMA, judge, read_file
from fakegpu.errors import UsageError

__all__ = ["SCHEMA", "analyze_kernels"]


def _missing(path: Path) -> UsageError:
    parent = path.parent if str(path.parent) else Path(".")
    hint = ""
    if parent.is_dir():
        close = difflib.get_close_matches(path.name, sorted(os.listdir(parent)), n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return UsageError(f"{path}: no such file.{hint}")


def analyze_kernels(paths: list[str | os.PathLike[str]], profile: str | None = None,
                    block_size: int | None = None, dynamic_shared: int = 0) -> dict[str, Any]:
    """The analyze-kernel report of `paths`. UsageError for a path that is not there, a folder, an unknown
    profile or a bad block size; files whose contents cannot be read are reported with what could not be read."""
    if block_size is not None and block_size < 1:
        raise UsageError(f"--block-size {block_size}: a block has at least one thread")
    if dynamic_shared < 0:
        raise UsageError("--dynamic-shared: a byte count, 0 or more")
    board = None
    if profile is not None:
        from fakegpu.profiles import load_catalog

        board = load_catalog().get(profile)
    files = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise _missing(path)
        if path.is_dir():
            raise UsageError(f"{path}: a folder; name the files (.cu, .cuh, .ptx, .cubin, .fatbin, or a program "
                             "or library with device code)")
        entry = read_file(path)
        if board is not None:
            judge(entry, board, block_size, dynamic_shared)
        else:
            entry["on_profile"] = None
        files.append(entry)
    device = None
    if board is not None:
        major, minor = board.compute_capability
        device = {"id": board.id, "name": board.name, "compute_capability": f"{major}.{minor}",
                  "sm_limits": dict(board.data["sm_limits"])}
    verdicts = [f["on_profile"]["runs"] for f in files if f.get("on_profile")]
    return {
        "schema": SCHEMA,
        "profile": device,
        "launch": {"block_size": block_size, "dynamic_shared_bytes": dynamic_shared},
        "files": files,
        "summary": {
            "files": len(files),
            "kernels": sum(len(f["kernels"]) for f in files),
            "unreadable": sum(1 for f in files if f["problems"]),
            "runs_on_profile": (all(verdicts) if verdicts else None) if board is not None else None,
        },
    }
