"""The soak and fault suite: counts that must come out with 0 failures, 0 escapes and 0 leaks.

`make test` runs it in a short form; `make soak` (FAKEGPU_SOAK=full) runs the counts of issue 13. Every test
records its figures with `soak_record`; the session writes them to build/soak/summary.json."""

from __future__ import annotations

import json
import os
import platform
import time

import pytest

from tests.conftest import REPO
from tests.container.conftest import base_image, fakegpu_runtime, site_config  # noqa: F401  (fixtures used here)

FULL = os.environ.get("FAKEGPU_SOAK") == "full"
SUMMARY = REPO / "build" / "soak" / "summary.json"
_FIGURES: dict[str, dict] = {}


def count(short: int, full: int) -> int:
    """How many of something this run does."""
    return full if FULL else short


@pytest.fixture
def soak_record(request):
    def record(**figures) -> None:
        _FIGURES.setdefault(request.node.name, {}).update(figures)

    return record


def pytest_sessionfinish(session, exitstatus):
    if not _FIGURES:
        return
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
    doc = {"schema": "fakegpu.soak-summary/v1", "form": "full" if FULL else "short",
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
           "cpus": os.cpu_count(), "tests": {**previous.get("tests", {}), **_FIGURES}}
    SUMMARY.write_text(json.dumps(doc, indent=2) + "\n")
