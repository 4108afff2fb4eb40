"""`kubelet-sim watch` and `kubelet-sim trace`: what a node sees, shown to people."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer

from kubelet_sim.assembly.build import reading_runtime
from kubelet_sim.assembly.nodeset import usable_root_dir
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.cli.common import (
    ContextOption,
    JournalRootDirOption,
    KubeconfigOption,
    OutputChoice,
    OutputOption,
    fail,
    log_as_tool,
    stop_on_signals,
    typer_app,
)
from kubelet_sim.kube.client import KubeConfigError, connect
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.runtime.engine import RuntimeUnavailable
from kubelet_sim.tools import trace as pod_trace
from kubelet_sim.tools import watch as watch_stream
from kubelet_sim.validation import ConfigError

watch_app = typer_app()


@watch_app.command(
    help="Print the raw stream a node consumes (its pods and its Node), step by step: lists,"
    " watches, events, bookmarks, 410 and relists, reconnects. Uses the agent's own informer."
)
def watch(
    node_name: Annotated[
        str, typer.Option(envvar="KUBELET_SIM_NODE_NAME", help="Whose pods and Node to watch.")
    ],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    output: OutputOption = OutputChoice.text,
) -> None:
    log_as_tool(output)
    try:
        kube = connect(kubeconfig, context)
    except KubeConfigError as exc:
        fail(str(exc))

    stop = stop_on_signals()

    def write(line: str) -> None:
        try:
            print(line, flush=True)
        except BrokenPipeError:  # `kubelet-sim watch | head`: the reader is gone, so are we
            stop.set()

    watch_stream.stream(kube, node_name, write, stop, output=output.value)
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()


trace_app = typer_app()


@trace_app.command(
    help="The handoff timeline of one pod: created, scheduled, bound, seen by the node's watch,"
    " admitted, sandbox and containers created and started, status written, Ready; with the"
    " time of each step and the latency between them. Run it on the node's machine."
)
def trace(
    pod: Annotated[str | None, typer.Argument(help="The pod's name.")] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Its namespace.")] = "default",
    follow: Annotated[
        bool, typer.Option(help="Print the timeline of each new pod on --node-name once Ready.")
    ] = False,
    node_name: Annotated[
        str | None, typer.Option(envvar="KUBELET_SIM_NODE_NAME", help="The node, for --follow.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    root_dir: JournalRootDirOption = None,
    output: OutputOption = OutputChoice.text,
) -> None:
    log_as_tool(output)
    if (pod is None) == (not follow):
        fail("give a POD, or --follow with --node-name", code=2)
    if follow and not node_name:
        fail("--follow needs --node-name", code=2)
    try:
        kube = connect(kubeconfig, context)
        if pod is not None:
            found = request_json(kube.api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
            node_name = str((found.get("spec") or {}).get("nodeName") or "")
        node = node_name or ""
        root = usable_root_dir(root_dir) / (node or "unscheduled")
        engine = engine_for()
        runtime = reading_runtime(engine, node, root)
    except ApiError as exc:
        fail(f"pod {namespace}/{pod}: {exc}")
    except (ConfigError, KubeConfigError, RuntimeUnavailable) as exc:
        fail(str(exc))
    try:
        if follow:
            pod_trace.follow(kube, runtime, node, typer.echo, stop_on_signals(), output=output)
        else:
            assert pod is not None
            found, steps = pod_trace.collect(kube, runtime, namespace, pod)
            render = pod_trace.as_json if output is OutputChoice.json else pod_trace.render
            typer.echo(render(found, steps))
    finally:
        engine.close()
