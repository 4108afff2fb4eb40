"""`kubelet-sim image`: the image that runs kubelet-sim as a workload (deploy/workload/), built
from this host's Python and installation, for a cluster that cannot pull one."""

from __future__ import annotations

import typer

from kubelet_sim.assembly.process import engine_for
from kubelet_sim.cli.common import fail, typer_app
from kubelet_sim.runtime.engine import RuntimeUnavailable

image_app = typer_app()


@image_app.command(
    help="Build the image kubelet-sim runs from as a workload (deploy/workload/) in the local"
    " Docker engine, unless it is up to date, and print its name: this host's Python,"
    " kubelet-sim with its dependencies and the tools of the service proxy (no base image)."
)
def image() -> None:
    from kubelet_sim.runtime.agent_image import ensure_agent_image  # noqa: PLC0415

    try:
        engine = engine_for()
    except RuntimeUnavailable as exc:
        fail(str(exc))
    try:
        name, built = ensure_agent_image(engine.client)
    except OSError as exc:
        fail(f"cannot build the image: {exc}")
    finally:
        engine.close()
    typer.echo(f"{name} ({'built' if built else 'up to date'})")
