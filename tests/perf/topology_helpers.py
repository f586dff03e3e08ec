"""Helpers for the topology tests: fabrics by shorthand, the CLI through typer's runner with its JSON checked
against the shipped schemas."""

from __future__ import annotations

import json

from fakegpu.perf.simulate import Request, parse_sizes, simulate
from fakegpu.perf.topology import Fabric, generated
from fakegpu.profiles import load_catalog
from fakegpu.reports import validate
from tests.perf.conftest import runner


def fabric(nodes: int = 1, gpus: int = 8, profile: str = "h100", network: str | None = None, **kw) -> Fabric:
    if nodes > 1 and network is None:
        network = "ib-ndr400"
    return Fabric(generated(nodes, gpus, load_catalog().get(profile), network, **kw))


def busbw(f: Fabric, collective: str = "all-reduce", algorithm: str | None = None, size: str = "8GiB") -> float:
    report = simulate(f, Request(collective=collective, algorithm=algorithm, sizes=parse_sizes(size)))
    return report["rows"][-1]["busbw_gb_s"]


def topology(*args: str):
    from fakegpu.cli.main import app

    return runner.invoke(app, ["simulate-topology", *args])


def topology_json(*args: str) -> dict:
    result = topology(*args, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validate(doc)
    validate(doc["data"])
    return doc["data"]


def topology_error(*args: str) -> tuple[int, str]:
    result = topology(*args, "--json")
    doc = json.loads(result.stdout)
    validate(doc)
    assert doc["status"] == "error" and doc["data"] is None
    return result.exit_code, doc["errors"][0]["message"]
