"""The fabric options simulate-topology and replay-trace share: declared once, so both commands spell, default
and explain them alike (fakegpu.perf.fabric_options builds the fabric from them)."""

from __future__ import annotations

import typer

FABRIC_FILE = typer.Option(None, "--fabric-file", "-f", help="A fabric in YAML or JSON "
                           "(fakegpu/perf/fabric.schema.json); or describe one with the options below.")
NODES = typer.Option(None, "--nodes", help="Nodes of a generated fabric (default 1).")
GPUS_PER_NODE = typer.Option(None, "--gpus-per-node", help="GPUs per node of a generated fabric (default 8).")
NETWORK = typer.Option(None, "--fabric", help="Scale-out network of a generated fabric: ib-ndr400, ib-hdr200, "
                       "roce-400, ... (fakegpu/perf/fabrics.yaml).")
RAIL_OPTIMIZED = typer.Option(None, "--rail-optimized/--no-rail-optimized", help="NIC i of every node on rail i's "
                              "leaf (default), or a node's NICs on one leaf.")
NICS_PER_NODE = typer.Option(None, "--nics-per-node", help="NICs per node (default: one per GPU).")
OVERSUBSCRIPTION = typer.Option(None, "--oversubscription", help="Leaf downlinks per uplink (1: non-blocking, the "
                                "default; 2: 2:1).")
