"""`kubelet-sim demo`: options and messages; the work is in kubelet_sim.demo."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kubelet_sim.assembly.nodeset import exit_past_calls_in_flight
from kubelet_sim.cli.common import fail, stop_on_signals, typer_app
from kubelet_sim.cli.node_options import DEFAULT_PAUSE_IMAGE, NodeOptions, with_node_options
from kubelet_sim.cli.ui import UiOptions, with_ui_options
from kubelet_sim.controlplane import binaries as kube_bin
from kubelet_sim.demo.state_dir import DemoRunning, DemoState, default_state_dir
from kubelet_sim.kube.client import KubeConfigError
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.localcluster.images import DEFAULT_SAMPLE_IMAGE
from kubelet_sim.logs import configure_logging
from kubelet_sim.runtime.engine import RuntimeUnavailable
from kubelet_sim.server.http import ServerError
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.validation import ConfigError

demo_app = typer_app()


def _say(line: str) -> None:
    print(line, flush=True)


@demo_app.command(
    help="Start a whole cluster on this machine (etcd, kube-apiserver, kube-controller-manager,"
    " kube-scheduler as child processes on loopback, and virtual nodes in this process), apply"
    " a sample Deployment and show each pod's handoff live. Ctrl-C removes it all."
)
@with_node_options
@with_ui_options
def demo(
    node: NodeOptions,
    ui: UiOptions,
    nodes: Annotated[int, typer.Option(help="How many virtual nodes (n1, n2, ...).", min=1)] = 3,
    image: Annotated[
        str, typer.Option(help="The sample Deployment's image.")
    ] = DEFAULT_SAMPLE_IMAGE,
    replicas: Annotated[int, typer.Option(help="The sample Deployment's replicas.", min=0)] = 3,
    no_sample: Annotated[
        bool, typer.Option("--no-sample", help="Apply no sample; just the cluster.")
    ] = False,
    reference_node: Annotated[
        bool,
        typer.Option(
            "--reference-node",
            help="Also run node kubelet-ref: the upstream kubelet (binary in the download cache"
            " or KUBELET_SIM_KUBELET) on a containerd of its own, beside the virtual nodes."
            " Needs root, containerd and the CNI plugins.",
        ),
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the control plane's data and logs on exit.")
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBELET_SIM_DEMO_STATE_DIR",
            help="Where the demo keeps its kubeconfig, data and logs"
            " (default: ~/.local/state/kubelet-sim/demo).",
        ),
    ] = None,
    kube_bin_dir: Annotated[
        Path | None,
        typer.Option(
            "--kube-bin",
            envvar="KUBELET_SIM_KUBE_BIN_DIR",
            help="A directory with kube-apiserver, kube-controller-manager, kube-scheduler"
            " (and etcd, kubectl); also searched: $KUBEBUILDER_ASSETS, the download cache, PATH.",
        ),
    ] = None,
    download: Annotated[
        bool,
        typer.Option(
            "--download",
            help="Fetch the control plane's binaries and kubectl from the Kubernetes project's"
            " release downloads (and etcd from its releases), checksums verified, into the cache.",
        ),
    ] = False,
    kube_version: Annotated[
        str,
        typer.Option(
            help="The Kubernetes version the control plane runs: taken from the download cache,"
            " fetched there by --download (a --kube-bin directory is taken as it is)."
        ),
    ] = kube_bin.DEFAULT_KUBE_VERSION,
) -> None:
    # The control plane's certificates need `cryptography`: imported by the demo alone, so
    # that a node (`kubelet-sim --node-name`) does not hold it until its first client comes.
    from kubelet_sim.controlplane.cluster import ControlPlaneError  # noqa: PLC0415
    from kubelet_sim.controlplane.reference_node import ReferenceNodeError  # noqa: PLC0415
    from kubelet_sim.demo.session import Demo, DemoSettings  # noqa: PLC0415
    from kubelet_sim.localcluster.local_cluster import (  # noqa: PLC0415
        NODE_IP,
        LocalClusterError,
    )

    state = DemoState(state_dir or default_state_dir())
    try:
        log_file = state.open_log()
    except DemoRunning as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot use the state directory {state.directory}: {exc.strerror or exc}")
    configure_logging("json", node.log_level.value, stream=log_file)
    if download:
        try:
            where = kube_bin.download(kube_version, progress=kube_bin.progress_bar())
        except kube_bin.DownloadError as exc:
            fail(str(exc))
        _say(f"downloaded Kubernetes {kube_version} into {where}")
        if kube_bin_dir is None:
            kube_bin_dir = where
    try:
        found = kube_bin.find_binaries(kube_bin_dir, version=kube_version)
    except kube_bin.BinariesMissing as exc:
        fail(str(exc), code=2)
    try:
        settings = DemoSettings(
            state=state,
            binaries=found,
            nodes=node.node_set_settings(  # every option checked before anything starts
                [f"n{i}" for i in range(1, nodes + 1)],
                root_dir=state.data / "nodes",
                server=ServerSettings(address=NODE_IP, port=0),
                taints_by_default=False,
                node_ip=NODE_IP,
                owner_labels=state.owner_labels,
            ),
            default_images=(DEFAULT_SAMPLE_IMAGE, DEFAULT_PAUSE_IMAGE),
            image=image,
            replicas=replicas,
            sample=not no_sample,
            keep=keep,
            reference_node=reference_node,
            on_nodes_ready=lambda kubeconfig, runtimes: ui.serve_until(
                stop, str(kubeconfig), runtimes, _say
            ),
        )
    except ConfigError as exc:
        fail(str(exc))
    stop = stop_on_signals()
    failures: list[tuple[str, str]] = []
    try:
        failures = Demo(settings, _say).run(stop)
    except (
        DemoRunning,
        LocalClusterError,  # the demo's own (DemoError) too
        ControlPlaneError,
        ConfigError,
        KubeConfigError,
        RuntimeUnavailable,
        ServerError,
        ApiError,
        ReferenceNodeError,
    ) as exc:
        typer.echo(f"kubelet-sim: error: {exc}", err=True)
        exit_past_calls_in_flight(1)
        raise SystemExit(1) from None
    if failures:
        message = "; ".join(f"node {name}: {why}" for name, why in failures)
        typer.echo(f"kubelet-sim: error: {message}", err=True)
    sys.stdout.flush()
    exit_past_calls_in_flight(1 if failures else 0)
    if failures:
        raise SystemExit(1)
