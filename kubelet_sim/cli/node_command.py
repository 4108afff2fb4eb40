"""`kubelet-sim --node-name n1`: parse options, build the nodes, run them until a signal."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kubelet_sim import __version__
from kubelet_sim.assembly.nodeset import NodeSet, exit_past_calls_in_flight, usable_root_dir
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.cli.common import fail, stop_on_signals, typer_app
from kubelet_sim.cli.node_options import NodeOptions, duration_option, with_node_options
from kubelet_sim.cli.ui import UiOptions, with_ui_options
from kubelet_sim.kube.client import KubeConfigError
from kubelet_sim.logs import configure_logging
from kubelet_sim.runtime.engine import RuntimeUnavailable
from kubelet_sim.server.healthz import HealthzServer
from kubelet_sim.server.http import ServerError
from kubelet_sim.server.settings import ConnectionLimits, ServerSettings
from kubelet_sim.validation import ConfigError

if TYPE_CHECKING:
    from kubelet_sim.kube.tls_bootstrap import Bootstrapped, CertificateRotation

app = typer_app()


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kubelet-sim {__version__}")
        raise typer.Exit()


@app.command(help="Run a virtual node whose pods are real Docker containers.")
@with_node_options
@with_ui_options
def run(
    node: NodeOptions,
    ui: UiOptions,
    node_name: Annotated[
        list[str] | None,
        typer.Option(
            envvar="KUBELET_SIM_NODE_NAME",
            help="Name of the Node to register; repeat it for several nodes in one process.",
        ),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option(
            envvar="KUBELET_SIM_NODES", help="Run this many nodes (see --node-name-prefix).", min=0
        ),
    ] = 0,
    node_name_prefix: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_NODE_NAME_PREFIX",
            help="With --nodes: names are PREFIX1, PREFIX2, ...",
        ),
    ] = "kubelet-sim-",
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_KUBECONFIG",
            help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster).",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(envvar="KUBELET_SIM_CONTEXT", help="Kubeconfig context to use."),
    ] = None,
    kubelet_port: Annotated[
        int,
        typer.Option(
            "--port",
            "--kubelet-port",
            envvar=["KUBELET_SIM_PORT", "KUBELET_SIM_KUBELET_PORT"],
            help="HTTPS port of the kubelet API (logs, metrics), advertised in daemonEndpoints;"
            " 0 picks a free one. With several nodes, node i listens on PORT+i.",
            min=0,
            max=65535,
        ),
    ] = 10250,
    address: Annotated[
        str,
        typer.Option(envvar="KUBELET_SIM_ADDRESS", help="Address the kubelet API listens on."),
    ] = "0.0.0.0",
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBELET_SIM_TLS_CERT_FILE",
            help="Serving certificate of the kubelet API (default: self-signed, made at start).",
        ),
    ] = None,
    tls_private_key_file: Annotated[
        Path | None,
        typer.Option(envvar="KUBELET_SIM_TLS_PRIVATE_KEY_FILE", help="Its private key."),
    ] = None,
    client_ca_file: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_CLIENT_CA_FILE",
            help="CA of accepted client certificates (default: the kubeconfig's cluster CA).",
        ),
    ] = None,
    anonymous_auth: Annotated[
        bool,
        typer.Option(
            envvar="KUBELET_SIM_ANONYMOUS_AUTH",
            help="Let requests without credentials in as system:anonymous (then authorized).",
        ),
    ] = False,
    streaming_connection_idle_timeout: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_STREAMING_CONNECTION_IDLE_TIMEOUT",
            help="An exec, attach or port-forward stream with no traffic this long is closed"
            " (a Go duration, the kubelet's flag and default).",
        ),
    ] = "4h0m0s",
    bootstrap_kubeconfig: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_BOOTSTRAP_KUBECONFIG",
            help="TLS bootstrap as the kubelet's: a kubeconfig with a bootstrap token; each node"
            " without a valid client certificate asks for one (a CSR the controller-manager"
            " approves) and writes its kubeconfig in --cert-dir (or at --kubeconfig, one node).",
        ),
    ] = None,
    cert_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBELET_SIM_CERT_DIR",
            help="Where bootstrapped nodes keep their client certificates, a folder per node"
            " (default: ROOT_DIR/pki).",
        ),
    ] = None,
    rotate_certificates: Annotated[
        bool,
        typer.Option(
            envvar="KUBELET_SIM_ROTATE_CERTIFICATES",
            help="Bootstrapped nodes ask for their next client certificate before the current"
            " one expires (kubeadm's and kind's kubelet setting).",
        ),
    ] = True,
    proxy_kubeconfig: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_PROXY_KUBECONFIG",
            help="Kubeconfig of the service proxy (kube-proxy's rights, system:node-proxier);"
            " default: the node's own, which needs that role bound (see docs/networking.md).",
        ),
    ] = None,
    delete_node_on_exit: Annotated[
        bool,
        typer.Option(
            envvar="KUBELET_SIM_DELETE_NODE_ON_EXIT",
            help="Delete the Node on exit (demos; node credentials may not).",
        ),
    ] = False,
    healthz_port: Annotated[
        int,
        typer.Option(
            envvar="KUBELET_SIM_HEALTHZ_PORT",
            help="Port of the process's plain-HTTP /healthz, for a liveness probe (the kubelet's"
            " --healthz-port, 10248 there); 0, the default here: none.",
            min=0,
            max=65535,
        ),
    ] = 0,
    healthz_bind_address: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_HEALTHZ_BIND_ADDRESS",
            help="Address of the /healthz (the kubelet's default: 127.0.0.1).",
        ),
    ] = "127.0.0.1",
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    configure_logging(node.log_format.value, node.log_level.value)
    if bool(node_name) == bool(nodes):
        fail("give --node-name (once or more) or --nodes, not both and not neither")
    if (tls_cert_file is None) != (tls_private_key_file is None):
        fail("give --tls-cert-file and --tls-private-key-file together, or neither")
    names = list(node_name or [f"{node_name_prefix}{i}" for i in range(1, nodes + 1)])
    stop = stop_on_signals()
    root_dir = usable_root_dir(node.root_dir)
    bootstrapped: list[Bootstrapped] = []
    if bootstrap_kubeconfig is not None:
        # Here, not above: cryptography (8 MiB) stays out of a node that does not bootstrap.
        from kubelet_sim.kube.tls_bootstrap import BootstrapError, bootstrap_nodes  # noqa: PLC0415

        written = Path(kubeconfig) if kubeconfig is not None else None
        try:
            bootstrapped = bootstrap_nodes(
                names, bootstrap_kubeconfig, cert_dir or root_dir / "pki", kubeconfig=written,
                stop=stop,
            )  # fmt: skip
        except BootstrapError as exc:
            fail(str(exc))
        kubeconfig = str(bootstrapped[0].kubeconfig)  # the web view's, if it runs
    server = ServerSettings(
        address=address,
        port=kubelet_port,
        tls_cert_file=tls_cert_file,
        tls_private_key_file=tls_private_key_file,
        client_ca_file=client_ca_file,
        anonymous_auth=anonymous_auth,
        limits=ConnectionLimits(
            streaming_idle_timeout=_idle_timeout(streaming_connection_idle_timeout)
        ),
    )
    try:
        settings = node.node_set_settings(
            names,
            root_dir=root_dir,
            server=server,
            delete_node_on_exit=delete_node_on_exit,
            kubeconfig=kubeconfig,
            context=context,
            proxy_kubeconfig=proxy_kubeconfig,
            node_kubeconfigs={b.node_name: str(b.kubeconfig) for b in bootstrapped},
        )
        engine = engine_for(
            settings.docker_network, pull_progress_deadline=settings.image_pull_progress_deadline
        )
    except (ConfigError, RuntimeUnavailable) as exc:
        fail(str(exc))
    try:
        node_set = NodeSet(settings, engine)
    except (ConfigError, KubeConfigError, RuntimeUnavailable, ServerError) as exc:
        engine.close()
        fail(str(exc))
    with contextlib.ExitStack() as running:  # undone in reverse: the engine closes last
        running.callback(engine.close)
        running.callback(node_set.close)
        if bootstrapped and rotate_certificates:
            running.callback(_rotate(bootstrapped, node_set).stop)
        if healthz_port:
            running.callback(_serve_healthz(healthz_bind_address, healthz_port, node_set).stop)
        web = ui.start(kubeconfig, context, node_set.runtimes, typer.echo)
        if web is not None:
            running.callback(web.stop)
        failures = node_set.run(stop)
    if failures:
        message = "; ".join(f"node {name}: {why}" for name, why in failures)
        typer.echo(f"kubelet-sim: error: {message}", err=True)
    exit_past_calls_in_flight(1 if failures else 0)
    if failures:
        raise SystemExit(1)


def _rotate(bootstrapped: list[Bootstrapped], node_set: NodeSet) -> CertificateRotation:
    from kubelet_sim.kube.tls_bootstrap import CertificateRotation  # noqa: PLC0415

    return CertificateRotation(
        bootstrapped, node_set.drop_connections, supervisor=node_set.process.supervisor
    ).start()


def _serve_healthz(address: str, port: int, node_set: NodeSet) -> HealthzServer:
    try:
        return HealthzServer(address, port, node_set.health, node_set.process.supervisor).start()
    except OSError as exc:  # the caller closes the node set
        fail(f"--healthz-port: cannot listen on {address}:{port}: {exc.strerror or exc}")


def _idle_timeout(text: str) -> float:
    try:
        return duration_option("--streaming-connection-idle-timeout", text)
    except ConfigError as exc:
        fail(str(exc))
