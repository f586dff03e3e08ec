"""The torch.cuda surface fakecuda serves, as `fakegpu capabilities` lists it: the (owner, name) pairs its
FakeCudaApi installs (cuda_api.py, `replacements`), so this list cannot drift from what a run replaces. Needs
torch; without it the answer says so. It lives here, not in analyze/: the capabilities report takes it as an
input (the CLI passes it), so the analyze room does not import fakecuda (whose preflight reaches the launcher,
which uses analyze)."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def _owner_name(owner: Any) -> str:
    return owner.__name__ if isinstance(owner, ModuleType) else f"{owner.__module__}.{owner.__qualname__}"


def surface() -> dict[str, Any]:
    try:
        import torch

        from fakegpu.fakecuda.cuda_api import FakeCudaApi
    except ImportError as exc:
        return {"available": False, "reason": f"torch is not importable here ({exc}): fakecuda needs it "
                                             "(pip install 'fakegpu[fakecuda]')", "torch_version": None,
                "entry_points": []}
    # replacements() only looks up the bound methods and the Stream/Event classes __init__ makes, and hands the
    # mode to the wrappers it builds (which read it when called); building a runtime (devices, shared state) to
    # list names would be a run, not a read.
    api = object.__new__(FakeCudaApi)
    api.Stream, api.Event = type("Stream", (), {}), type("Event", (), {})
    api.mode = None
    entries = sorted({(_owner_name(owner), name) for owner, name, _ in api.replacements()})
    return {
        "available": True,
        "reason": None,
        "torch_version": torch.__version__,
        "entry_points": [{"owner": owner, "name": name,
                          "public": not name.startswith("_") and not any(p.startswith("_") for p in owner.split("."))}
                         for owner, name in entries],
    }
