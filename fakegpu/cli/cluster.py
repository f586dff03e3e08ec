"""`fakegpu cluster up|run|status|down|list|report|fault`: parse, call fakegpu.cluster, render. Owns its Typer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.errors import EXIT_INTERRUPTED, FakeGPUError
from fakegpu.text import table

app = typer.Typer(help="Multi-node rehearsals: node containers with fake GPUs on this Docker Engine, or node "
                       "pods on a Kubernetes cluster (--backend k8s).", no_args_is_help=True)

# Where a cluster lives. Left out, a command uses what `up` recorded for the name (its state folder), else Docker.
BACKEND = typer.Option(None, "--backend", help="docker (default) or k8s; later commands find the one `up` used.")
KUBECONFIG = typer.Option(None, "--kubeconfig", help="k8s: kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
CONTEXT = typer.Option(None, "--context", help="k8s: kubeconfig context (default: its current one).")
NAMESPACE = typer.Option(None, "--namespace", help="k8s: namespace (default: the context's, else default).")


def _controller():
    from fakegpu.cluster.controller import Controller

    return Controller()


def _open(name: str | None, backend: str | None, kubeconfig: str | None, context: str | None,
          namespace: str | None):
    from fakegpu.cluster.select import open_controller

    return open_controller(name, backend, kubeconfig, context, namespace)


def _labels(values: list[str]) -> dict[str, str]:
    from fakegpu.cluster.models import ClusterUsageError

    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key:
            raise ClusterUsageError(f"--label wants KEY=VALUE, got {v!r}")
        out[key] = val
    return out


@app.command()
def up(
    name: str = typer.Argument(..., help="Cluster name (labels every object: fakegpu.cluster=NAME)."),
    nodes: int = typer.Option(2, "--nodes", "-n", help="Number of node containers."),
    devices: str = typer.Option("a100:4", "--devices", "-d", help="Device spec of each node, e.g. a100:4."),
    image: str = typer.Option("fakegpu/pytorch:latest", "--image", help="Node image (`make images` builds it)."),
    mode: str = typer.Option("fakecuda", "--mode", help="fakecuda (PyTorch math on the CPU) or native."),
    workdir: str | None = typer.Option(None, "--workdir", help="Host folder mounted at /workspace on every node."),
    nproc_per_node: int | None = typer.Option(None, "--nproc-per-node",
                                              help="NPROC_PER_NODE (default: the node's device count)."),
    docker_runtime: str | None = typer.Option(None, "--docker-runtime",
                                              help="Docker runtime for the nodes, e.g. fakegpu for other images."),
    label: list[str] = typer.Option([], "--label", help="Extra KEY=VALUE label on every object (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the versioned JSON envelope."),
    backend: str | None = BACKEND, kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Start a cluster: a labelled network and NODES containers node-0.. with torch.distributed's environment
    (with --backend k8s: a headless Service and NODES pods under the fakegpu RuntimeClass)."""
    from fakegpu.cluster.models import ClusterSpec

    try:
        spec = ClusterSpec(name=name, nodes=nodes, devices=devices, image=image, mode=mode, workdir=workdir,
                           nproc_per_node=nproc_per_node, docker_runtime=docker_runtime, labels=_labels(label))
        controller = _open(None, backend or "docker", kubeconfig, context, namespace)
        cluster = controller.up(spec, progress=lambda msg: print(f"[{name}] {msg}", file=sys.stderr))
    except FakeGPUError as exc:
        raise fail("cluster up", exc, as_json) from exc
    if as_json:
        emit_json("cluster up", cluster.as_dict())
    else:
        where = f"network {cluster.network}" if controller.backend.kind == "docker" else \
            f"service {cluster.network} in namespace {controller.backend.target()['namespace']}"
        typer.echo(f"cluster {name} up: {len(cluster.nodes)} nodes x {devices} ({mode}), {where}")


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    name: str = typer.Argument(..., help="Cluster name."),
    command: list[str] = typer.Argument(..., help="Command run on every node (after --); $NODE_RANK etc. are "
                                                  "the node's. One quoted argument with spaces runs under sh -c."),
    backend: str | None = BACKEND, kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Run COMMAND on every node at once; output prefixed by node; exit status of the job (first failed node).
    torchelastic's log lines (failures, restarts, rendezvous; LOGLEVEL=INFO for torchrun) go to `cluster report`."""
    if command and command[0] == "--":  # click keeps the separator when options are not interspersed
        command = command[1:]
    try:
        controller = _open(name, backend, kubeconfig, context, namespace)
        result = controller.run(name, command, emit=lambda line: typer.echo(line))
    except FakeGPUError as exc:
        raise fail("cluster run", exc, False) from exc
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP while the job ran: it was stopped on every node
        print("fakegpu cluster run: interrupted; the job was stopped on every node", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    for node in result.failed:
        print(f"fakegpu cluster run: {node.node} (node rank {node.rank}) failed: {node.reason}", file=sys.stderr)
    raise typer.Exit(result.exit_code)


@app.command()
def status(name: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json"),
           backend: str | None = BACKEND, kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT,
           namespace: str | None = NAMESPACE) -> None:
    """Nodes of a cluster and their container (or pod) status."""
    try:
        cluster = _open(name, backend, kubeconfig, context, namespace).status(name)
    except FakeGPUError as exc:
        raise fail("cluster status", exc, as_json) from exc
    if as_json:
        emit_json("cluster status", cluster.as_dict())
        return
    typer.echo(f"cluster {name} (run {cluster.run_id}, {cluster.mode}, image {cluster.image}, "
               f"network {cluster.network or 'missing'})")  # on k8s: the headless Service
    typer.echo(table([(n.hostname, n.container, n.status, n.exit_code, n.devices) for n in cluster.nodes],
                     ["node", "container", "status", "exit", "devices"]))


@app.command()
def down(
    name: str = typer.Argument(...),
    purge: bool = typer.Option(False, "--purge", help="Also delete the cluster's reports folder."),
    backend: str | None = BACKEND, kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Remove every container and network (pod and service) labelled with the cluster's name (idempotent)."""
    try:
        removed = _open(name, backend, kubeconfig, context, namespace).down(name, purge=purge)
    except FakeGPUError as exc:
        raise fail("cluster down", exc, False) from exc
    typer.echo(f"cluster {name} down: removed " + ", ".join(f"{n} {kind}" for kind, n in removed.items()))


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json"), backend: str | None = BACKEND,
          kubeconfig: str | None = KUBECONFIG, context: str | None = CONTEXT,
          namespace: str | None = NAMESPACE) -> None:
    """Every cluster on this engine (or in the namespace), found by label."""
    try:
        clusters = _open(None, backend, kubeconfig, context, namespace).list()
    except FakeGPUError as exc:
        raise fail("cluster list", exc, as_json) from exc
    if as_json:
        emit_json("cluster list", [c.as_dict() for c in clusters])
        return
    typer.echo(table([(c.name, len(c.nodes), sum(n.running for n in c.nodes), c.mode, c.run_id) for c in clusters],
                     ["cluster", "nodes", "running", "mode", "run"]))


@app.command()
def report(
    name: str = typer.Argument(...),
    json_out: Path | None = typer.Option(None, "--json", help="Write the merged report (JSON) here."),
    html_out: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML page here."),
) -> None:
    """Merge every process report of every node: per node, rank and device peaks, verdicts, collectives."""
    from fakegpu.cluster import html
    from fakegpu.cluster import report as merge

    try:
        doc = merge.build(name)
    except FakeGPUError as exc:
        raise fail("cluster report", exc, False) from exc
    if json_out:
        json_out.write_text(json.dumps(doc, indent=1))
    if html_out:
        html_out.write_text(html.render(doc), encoding="utf-8")
    typer.echo(merge.summary(doc))


@app.command()
def fault(
    name: str = typer.Argument(..., help="Cluster name."),
    action: str = typer.Argument(..., help="kill, pause, resume, partition, heal, gpu-lost, nccl-hang, nccl-error or "
                                 "kill-workers."),
    node: str = typer.Argument(..., help="The node: node-0, node-1, ..."),
    gpu: int | None = typer.Option(None, "--gpu", help="gpu-lost: the GPU's index in the node."),
    rank: int | None = typer.Option(None, "--rank", help="nccl-hang, nccl-error: the job's global rank on the node."),
    lasts: str | None = typer.Option(None, "--for", help="nccl-hang, nccl-error: how long the link stays bad (30s, "
                                     "2m); the operations that start within it meet it. Default: until the run ends."),
    at: str = typer.Option("0", "--at", help="Delay from now (30, 30s, 2m); the command waits it out."),
    as_json: bool = typer.Option(False, "--json", help="Print the versioned JSON envelope."),
) -> None:
    """Fail or recover a node: docker kill, pause/resume, partition/heal (network disconnect/reconnect), Xid 79
    on one of its GPUs, a rank's NCCL operations hanging or failing, or SIGKILL to its torchrun agent's workers (the
    agent lives on to restart them). Recorded in the cluster's fault timeline (`cluster report`)."""
    from fakegpu.cli.faults import container_layout
    from fakegpu.cluster import faults
    from fakegpu.faults.plan import parse_duration

    try:
        delay = parse_duration(at, "--at")
        lasts_s = parse_duration(lasts, "--for") if lasts is not None else 0.0
        controller = _controller()
        target = faults.check(controller, name, action, node, gpu, rank, lasts_s)
        if delay and not as_json:
            print(f"[{name}] {action} {target.node.hostname} in {delay:g} s", file=sys.stderr)
        event = faults.apply(controller, target, delay, layout=container_layout)
    except FakeGPUError as exc:
        raise fail("cluster fault", exc, as_json) from exc
    if as_json:
        from dataclasses import asdict

        emit_json("cluster fault", asdict(event))
    else:
        typer.echo(f"cluster {name}: {action} {event.node}: {event.detail}")
