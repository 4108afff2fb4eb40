"""`kubelet-sim compare`: the same pod scenarios on our node and a reference node, compared."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
import urllib3

from kubelet_sim.cli.common import (
    ContextOption,
    KubeconfigOption,
    OutputChoice,
    OutputOption,
    fail,
    log_as_tool,
    stop_on_signals,
    typer_app,
)
from kubelet_sim.kube.client import KubeConfigError, connect
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE

if TYPE_CHECKING:
    from kubelet_sim.compare import Comparison

compare_app = typer_app()

INTERRUPTED = 130


@compare_app.command(
    help="Run pod scenarios at once on our node (--node) and on a reference node (a real"
    " kubelet's, e.g. kind-worker) of one cluster, record each pod's statuses and events from"
    " the watch, and print scenario by scenario what agrees and what differs. A state of ours is"
    " foreign when no reference run showed it; ours agrees with no foreign state, a settled"
    " (last) state among the reference runs' and the same event reasons as one reference run."
    " Runs in a fresh namespace, removed at the end (also on Ctrl-C). The image must be on both"
    " nodes. Exit code: 0 when the comparison ran, whatever it found; 1 when it could not run"
    " (a node missing, a pod refused, no rights); 2 for wrong options or a comparison that"
    " cannot be fair (a node not Ready, an image missing on either node, a reference kubelet"
    " outside the version skew policy), said before anything runs; 130 when interrupted."
)
def compare(
    node: Annotated[str | None, typer.Option(help="Our node (a kubelet-sim node).")] = None,
    reference_node: Annotated[
        str | None, typer.Option(help="The reference node (an upstream kubelet).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    runs: Annotated[
        int, typer.Option(min=1, max=50, help="How many times to run every scenario on each node.")
    ] = 1,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="A shipped scenario's name or a pod manifest file (YAML or JSON; annotations"
            " compare.kubelet-sim.io/observe-seconds and /delete-after, `{image}` in an image)."
            " Repeat it; none: every shipped scenario."
        ),
    ] = None,
    observe: Annotated[
        float | None,
        typer.Option(min=1, max=3600, help="Observe every pod this many seconds (overrides)."),
    ] = None,
    image: Annotated[
        str, typer.Option(help="The busybox-like image put in place of `{image}`.")
    ] = BUSYBOX_IMAGE,
    output: OutputOption = OutputChoice.text,
    list_scenarios: Annotated[
        bool, typer.Option("--list-scenarios", help="List the shipped scenarios and exit.")
    ] = False,
) -> None:
    # The compare package (and PyYAML with it) only when this command runs, not in a node.
    from kubelet_sim.compare import (  # noqa: PLC0415
        CompareError,
        ScenarioError,
        builtin_scenarios,
        resolve,
        run_compare,
    )

    log_as_tool(output)
    if list_scenarios:
        for shipped in builtin_scenarios():
            typer.echo(f"{shipped.name:<24} {shipped.observe:>4.0f} s  {shipped.description}")
        return
    if not node or not reference_node:
        fail("give --node and --reference-node", code=2)
    try:
        chosen = resolve(scenario or [])
    except ScenarioError as exc:
        fail(str(exc), code=2)
    try:
        kube = connect(kubeconfig, context)
    except KubeConfigError as exc:
        fail(str(exc))
    from kubelet_sim.compare.fairness import why_unfair  # noqa: PLC0415

    try:
        unfair = why_unfair(kube, node, reference_node, chosen, image=image)
    except (ApiError, urllib3.exceptions.HTTPError, OSError) as exc:
        fail(f"the comparison failed: {exc}")
    if unfair:
        fail(f"not a fair comparison: {unfair}", code=2)
    stop = stop_on_signals()

    def progress(line: str) -> None:
        typer.echo(f"compare: {line}", err=True)

    try:
        result = run_compare(
            kube, node, reference_node, chosen,
            image=image, runs=runs, observe=observe, stop=stop, progress=progress,
        )  # fmt: skip
    except CompareError as exc:
        fail(str(exc))
    except (ApiError, urllib3.exceptions.HTTPError, OSError) as exc:  # the API server failed us
        fail(f"the comparison failed: {exc}")
    if result.interrupted:
        progress("interrupted: nothing compared")
        raise SystemExit(INTERRUPTED)
    _show(result, output)


def _show(result: Comparison, output: OutputChoice) -> None:
    """The verdicts, the Node objects and the scenarios skipped, as a table or one object."""
    from kubelet_sim.compare import as_json, node_lines, table  # noqa: PLC0415

    verdicts = result.verdicts()
    if output is OutputChoice.json:
        about = {"node": result.node, "reference_node": result.reference_node, "runs": result.runs}
        node_object = result.node_objects.as_dict()
        skipped = [{"name": name, "why": why} for name, why in result.skipped]
        about |= {"node_object": node_object, "skipped": skipped}
        typer.echo(json.dumps(as_json(verdicts, **about), indent=None))
        return
    typer.echo(table(verdicts, runs=result.runs))
    typer.echo(node_lines(result.node_objects))
    for name, why in result.skipped:
        typer.echo(f"skipped {name}: {why}")
        typer.echo(node_lines(result.node_objects))
