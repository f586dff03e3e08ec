"""Assembles the `fakegpu` command from the command-group modules; holds no command logic itself."""

from __future__ import annotations

import typer

from fakegpu import __version__
from fakegpu.cli import (
    analyze,
    bandwidth,
    capabilities,
    cluster,
    container,
    devices,
    doctor,
    estimate,
    fakecuda,
    faults,
    k8s,
    metrics,
    perf,
    profiles,
    run,
    topology,
    trace,
    validate,
    workspace_profiles,
)

app = typer.Typer(
    name="fakegpu",
    help="Configurable fake NVIDIA GPUs for containers, CI and capacity planning on machines without one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(profiles.app, name="profiles")
app.add_typer(cluster.app, name="cluster")
app.add_typer(container.runtime_app, name="runtime")
app.add_typer(container.cdi_app, name="cdi")
app.add_typer(container.hook_app, name="hook")
app.command("devices")(devices.devices)
app.command("doctor")(doctor.doctor)
app.command("metrics")(metrics.metrics)
app.command("device-plugin")(k8s.device_plugin)
app.add_typer(k8s.app, name="k8s")
app.add_typer(faults.app, name="fault")
app.command("demo")(fakecuda.demo)
app.command("preflight", context_settings={"allow_interspersed_args": False})(fakecuda.preflight)
app.command("estimate-llm")(estimate.estimate_llm)
app.command("plan-training")(estimate.plan_training)
app.command("plan-serving")(estimate.plan_serving)
app.command("estimate-roofline")(perf.estimate_roofline)
app.command("simulate-topology")(topology.simulate_topology)
app.command("replay-trace")(trace.replay_trace)
app.command("analyze-repo")(analyze.analyze_repo)
app.command("capabilities")(capabilities.capabilities)
app.command("analyze-kernel")(analyze.analyze_kernel)
app.command("bandwidth")(bandwidth.bandwidth)
app.add_typer(estimate.calibrate_app, name="calibrate")
app.add_typer(workspace_profiles.app, name="workspace-profiles")
app.command("validate")(validate.validate)
app.command("run", context_settings={"allow_interspersed_args": False})(run.run)
app.command("nvidia-smi", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                            "help_option_names": []})(run.nvidia_smi)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fakegpu {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """FakeGPU command line."""


def main() -> None:
    app()
