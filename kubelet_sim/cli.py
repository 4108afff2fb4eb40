"""The `kubelet-sim` command: parse options, then hand over to the Agent until a signal."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn

import typer

from kubelet_sim import __version__
from kubelet_sim.agent import Agent, PodSettings, node_dns
from kubelet_sim.config import ConfigError
from kubelet_sim.kube.client import KubeConfigError, KubeConnection, connect
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.logs import configure_logging, get_logger
from kubelet_sim.node.settings import (
    NodeSettings,
    default_taints,
    parse_labels,
    parse_reserved,
    parse_taints,
)
from kubelet_sim.runtime.docker_runtime import DockerRuntime, RuntimeUnavailable
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.server.http import ServerError
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.supervise import LoopFailed
from kubelet_sim.tools import trace as pod_trace
from kubelet_sim.tools import watch as watch_stream


class LogFormatChoice(StrEnum):
    auto = "auto"
    console = "console"
    json = "json"


class LogLevelChoice(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def _typer_app() -> typer.Typer:
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


app = _typer_app()


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kubelet-sim {__version__}")
        raise typer.Exit()


@app.command(help="Run a virtual node whose pods are real Docker containers.")
def run(
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
    log_format: Annotated[
        LogFormatChoice,
        typer.Option(
            envvar="KUBELET_SIM_LOG_FORMAT", help="console on a tty, json otherwise (auto)."
        ),
    ] = LogFormatChoice.auto,
    log_level: Annotated[
        LogLevelChoice, typer.Option(envvar="KUBELET_SIM_LOG_LEVEL", help="Log level.")
    ] = LogLevelChoice.info,
    node_labels: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_NODE_LABELS",
            help="Extra labels at registration: key=value,... (kubernetes.io/ only the kubelet's).",
        ),
    ] = "",
    system_reserved: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_SYSTEM_RESERVED",
            help="Resources kept for the OS, e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi:"
            " taken from allocatable, as the kubelet does.",
        ),
    ] = "",
    kube_reserved: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_KUBE_RESERVED",
            help="Resources kept for Kubernetes' own daemons (same form): taken from allocatable.",
        ),
    ] = "",
    register_with_taints: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_REGISTER_WITH_TAINTS",
            help="Taints at registration: key[=value]:Effect,... Default:"
            " kubelet-sim.io/virtual=true:NoSchedule, so only pods that tolerate it are"
            ' scheduled here; "" registers none.',
        ),
    ] = None,
    cpu: Annotated[
        str | None,
        typer.Option(envvar="KUBELET_SIM_CPU", help="CPU capacity (default: the host's CPUs)."),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_MEMORY", help="Memory capacity, e.g. 8Gi (default: the host's)."
        ),
    ] = None,
    pods: Annotated[
        int, typer.Option(envvar="KUBELET_SIM_PODS", help="Pod capacity.", min=1)
    ] = 110,
    node_ip: Annotated[
        str | None,
        typer.Option(
            envvar="KUBELET_SIM_NODE_IP", help="InternalIP (default: the default route's)."
        ),
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
    delete_node_on_exit: Annotated[
        bool,
        typer.Option(
            envvar="KUBELET_SIM_DELETE_NODE_ON_EXIT",
            help="Delete the Node on exit (demos; node credentials may not).",
        ),
    ] = False,
    pod_infra_image: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_POD_INFRA_IMAGE",
            help="Sandbox image that holds each pod's network namespace.",
        ),
    ] = "registry.k8s.io/pause:3.10",
    cluster_dns: Annotated[
        list[str] | None,
        typer.Option(
            envvar="KUBELET_SIM_CLUSTER_DNS",
            help="IP of the cluster DNS service (repeat or comma-separate for more): the only"
            " nameserver of ClusterFirst pods (kind's: 10.96.0.10). Without it they fall back to"
            " the node's resolver, with a MissingClusterDNS event, as the kubelet does.",
        ),
    ] = None,
    cluster_domain: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_CLUSTER_DOMAIN",
            help="The cluster's DNS domain (kind's: cluster.local): ClusterFirst pods search"
            " <ns>.svc.<domain>, svc.<domain> and <domain>; pods with a subdomain get their FQDN.",
        ),
    ] = "",
    resolv_conf: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_RESOLV_CONF",
            help="The node's resolver file, the base of Default pods (and ClusterFirst without"
            ' --cluster-dns); "" gives them 127.0.0.1, as the kubelet does.',
        ),
    ] = "/etc/resolv.conf",
    allowed_unsafe_sysctls: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_ALLOWED_UNSAFE_SYSCTLS",
            help="Sysctls (or prefixes ending in *) admitted beyond the safe set, comma-separated;"
            " others are refused with SysctlForbidden, as by the kubelet.",
        ),
    ] = "",
    allow_privileged: Annotated[
        bool,
        typer.Option(
            envvar="KUBELET_SIM_ALLOW_PRIVILEGED",
            help="Admit pods that reach the host: privileged containers, hostNetwork, hostPID,"
            " hostIPC, hostPath volumes, added capabilities and hostPorts below 1024. Without"
            " it they are refused (Forbidden).",
        ),
    ] = False,
    root_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBELET_SIM_ROOT_DIR",
            help="Where pod files live (volumes, termination logs); Docker must see it."
            " Default: /var/lib/kubelet-sim as root, else ~/.local/share/kubelet-sim.",
        ),
    ] = None,
    docker_network: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_DOCKER_NETWORK",
            help="Docker network for pod sandboxes (kind's is `kind`); unless --node-ip is"
            " given, the Node's InternalIP becomes this host's address on it.",
        ),
    ] = "bridge",
    image_pull_progress_deadline: Annotated[
        float,
        typer.Option(
            envvar="KUBELET_SIM_IMAGE_PULL_PROGRESS_DEADLINE",
            help="Seconds a pull may go without progress before it is cancelled (ErrImagePull).",
            min=1,
        ),
    ] = 60.0,
    container_log_max_size: Annotated[
        str,
        typer.Option(
            envvar="KUBELET_SIM_CONTAINER_LOG_MAX_SIZE",
            help="Largest size of a container's log file before it is rotated (the kubelet's).",
        ),
    ] = "10Mi",
    container_log_max_files: Annotated[
        int,
        typer.Option(
            envvar="KUBELET_SIM_CONTAINER_LOG_MAX_FILES",
            help="Log files kept per container, the current one included (at least 2).",
        ),
    ] = 5,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    configure_logging(log_format.value, log_level.value)
    if bool(node_name) == bool(nodes):
        _fail("give --node-name (once or more) or --nodes, not both and not neither")
    names = list(node_name or [f"{node_name_prefix}{i}" for i in range(1, nodes + 1)])
    try:
        settings = [
            NodeSettings(
                node_name=name,
                node_labels=parse_labels(node_labels),
                register_with_taints=default_taints()
                if register_with_taints is None
                else parse_taints(register_with_taints),
                cpu=cpu,
                memory=memory,
                pods=pods,
                node_ip=node_ip,
                kubelet_port=kubelet_port,
                delete_node_on_exit=delete_node_on_exit,
                system_reserved=parse_reserved(system_reserved),
                kube_reserved=parse_reserved(kube_reserved),
            )
            for name in names
        ]
        if len(set(names)) != len(names):
            raise ConfigError(f"node names repeat: {', '.join(names)}")
        # Each node holds about 4 connections at once (2 watches, its writes, its lease).
        kube = connect(kubeconfig, context, pool_size=4 * len(names) + 4)
        root = usable_root_dir(root_dir)
        rotation = LogRotation.parse(container_log_max_size, container_log_max_files)
        engine = DockerRuntime.connect(network=docker_network)
        engine.pull_progress_deadline = image_pull_progress_deadline
        if docker_network != "bridge":
            gateway = engine.network_gateway()  # also: the network exists, or one line
            settings = [
                s if s.node_ip is not None else dataclasses.replace(s, node_ip=gateway)
                for s in settings
            ]
    except (ConfigError, KubeConfigError, RuntimeUnavailable) as exc:
        _fail(str(exc))
    stop = _stop_on_signals()
    try:
        dns = node_dns(cluster_dns or [], cluster_domain, resolv_conf)
    except ConfigError as exc:
        _fail(str(exc))
    pod_settings = PodSettings(
        pause_image=pod_infra_image,
        allow_privileged=allow_privileged,
        dns=dns,
        allowed_unsafe_sysctls=tuple(
            s.strip() for s in allowed_unsafe_sysctls.split(",") if s.strip()
        ),
    )
    if (tls_cert_file is None) != (tls_private_key_file is None):
        _fail("give --tls-cert-file and --tls-private-key-file together, or neither")
    server = ServerSettings(
        address=address,
        port=kubelet_port,
        tls_cert_file=tls_cert_file,
        tls_private_key_file=tls_private_key_file,
        client_ca_file=client_ca_file,
        anonymous_auth=anonymous_auth,
    )
    try:
        failures = _run_nodes(kube, engine, root, settings, pod_settings, stop, rotation, server)
    except ServerError as exc:
        _fail(str(exc))
    finally:
        engine.close()
    if failures:
        message = "; ".join(f"node {name}: {why}" for name, why in failures)
        typer.echo(f"kubelet-sim: error: {message}", err=True)
    _exit_past_calls_in_flight(1 if failures else 0)
    if failures:
        raise SystemExit(1)


def _run_nodes(
    kube: KubeConnection,
    engine: DockerRuntime,
    root: Path,
    settings: list[NodeSettings],
    pod_settings: PodSettings,
    stop: threading.Event,
    rotation: LogRotation,
    server: ServerSettings,
) -> list[tuple[str, str]]:
    """One Agent per node, each on its own thread, sharing the API pool and the Docker client;
    each node's containers carry its name, which keeps them apart (also across restarts).

    A node whose loop failed for good stops the whole process: the answer lists the failures
    (node, why), and the command exits 1.
    """
    threads = []
    failures: list[tuple[str, str]] = []

    def run_agent(agent: Agent) -> None:
        try:
            agent.run(stop)
        except LoopFailed as exc:
            failures.append((agent.node_name, str(exc)))
            stop.set()

    schema = ServerSchema()  # read once for all the nodes: it is the same server
    for i, node in enumerate(settings):
        runtime = DockerRuntime(
            client=engine.client,
            node_name=node.node_name,
            root_dir=root / node.node_name,
            network=engine.network,
            pull_progress_deadline=engine.pull_progress_deadline,
            log_rotation=rotation,
        )
        port = server.port + i if server.port else 0
        agent = Agent(
            node, kube, runtime, pod_settings, schema, dataclasses.replace(server, port=port)
        )
        thread = threading.Thread(
            target=run_agent, args=(agent,), name=f"node {node.node_name}", daemon=True
        )
        thread.start()
        threads.append((node.node_name, thread))
    # Never block without a timeout here: the kernel may hand SIGTERM to any thread, and the
    # main thread runs the Python handler only when it wakes up.
    while not stop.wait(0.5):
        pass
    for name, thread in threads:
        while thread.is_alive():
            thread.join(0.5)
        get_logger("kubelet_sim.cli", node=name).info("stopped")
    return failures


def _exit_past_calls_in_flight(code: int) -> None:
    """Exit now if a thread is still inside a Docker or API call (a pod worker, an image pull).

    The agent has stopped in order; waiting for such a call could take a pull's whole deadline,
    and a daemon thread that logs during interpreter shutdown aborts the process. The kubelet
    exits the same way: what Docker has is adopted by the next start.
    """
    busy = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if busy:
        get_logger("kubelet_sim.cli").info("exiting with calls in flight", threads=sorted(busy))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def usable_root_dir(explicit: Path | None) -> Path:
    """The pod files directory, created now so that a read-only place fails in one line."""
    if explicit is not None:
        root = explicit
    elif os.geteuid() == 0:
        root = Path("/var/lib/kubelet-sim")
    else:
        root = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share") / "kubelet-sim"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)  # pods' secrets live below: no other user may look in
    except OSError as exc:
        raise ConfigError(f"cannot use --root-dir {root}: {exc.strerror}") from exc
    if not os.access(root, os.W_OK):
        raise ConfigError(f"cannot use --root-dir {root}: not writable")
    return root


def _stop_on_signals() -> threading.Event:
    """SIGTERM and SIGINT set an event every loop waits on; a second signal exits at once."""
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            sys.exit(128 + signum)
        get_logger("kubelet_sim.cli").info("signal received", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"kubelet-sim: error: {message}", err=True)
    raise SystemExit(code)


class OutputChoice(StrEnum):
    text = "text"
    json = "json"


# Options the tools (watch, trace) share.
ToolKubeconfig = Annotated[
    str | None, typer.Option(envvar="KUBELET_SIM_KUBECONFIG", help="Kubeconfig file.")
]
ToolContext = Annotated[
    str | None, typer.Option(envvar="KUBELET_SIM_CONTEXT", help="Kubeconfig context.")
]

watch_app = _typer_app()


@watch_app.command(
    help="Print the raw stream a node consumes (its pods and its Node), step by step: lists,"
    " watches, events, bookmarks, 410 and relists, reconnects. Uses the agent's own informer."
)
def watch(
    node_name: Annotated[
        str, typer.Option(envvar="KUBELET_SIM_NODE_NAME", help="Whose pods and Node to watch.")
    ],
    kubeconfig: ToolKubeconfig = None,
    context: ToolContext = None,
    output: Annotated[
        OutputChoice, typer.Option(help="`text` for people, `json` for a JSON object a line.")
    ] = OutputChoice.text,
) -> None:
    configure_logging("json" if output is OutputChoice.json else "auto", "warning")
    try:
        kube = connect(kubeconfig, context)
    except KubeConfigError as exc:
        _fail(str(exc))

    stop = _stop_on_signals()

    def write(line: str) -> None:
        try:
            print(line, flush=True)
        except BrokenPipeError:  # `kubelet-sim watch | head`: the reader is gone, so are we
            stop.set()

    watch_stream.stream(kube, node_name, write, stop, output=output.value)
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()


trace_app = _typer_app()


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
    kubeconfig: ToolKubeconfig = None,
    context: ToolContext = None,
    root_dir: Annotated[
        Path | None,
        typer.Option(envvar="KUBELET_SIM_ROOT_DIR", help="The agent's --root-dir (its journal)."),
    ] = None,
    output: Annotated[
        OutputChoice, typer.Option(help="`text` (a table) or `json`.")
    ] = OutputChoice.text,
) -> None:
    configure_logging("json" if output is OutputChoice.json else "auto", "warning")
    if (pod is None) == (not follow):
        _fail("give a POD, or --follow with --node-name", code=2)
    if follow and not node_name:
        _fail("--follow needs --node-name", code=2)
    try:
        kube = connect(kubeconfig, context)
        if pod is not None:
            found = request_json(kube.api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
            node_name = str((found.get("spec") or {}).get("nodeName") or "")
        node = node_name or ""
        runtime = DockerRuntime.connect(
            node_name=node, root_dir=usable_root_dir(root_dir) / (node or "unscheduled")
        )
    except ApiError as exc:
        _fail(f"pod {namespace}/{pod}: {exc}")
    except (ConfigError, KubeConfigError, RuntimeUnavailable) as exc:
        _fail(str(exc))
    try:
        if follow:
            pod_trace.follow(kube, runtime, node, typer.echo, _stop_on_signals(), output=output)
        else:
            assert pod is not None
            found, steps = pod_trace.collect(kube, runtime, namespace, pod)
            render = pod_trace.as_json if output is OutputChoice.json else pod_trace.render
            typer.echo(render(found, steps))
    finally:
        runtime.close()


SUBCOMMANDS = {"watch": watch_app, "trace": trace_app}


def main() -> None:
    """`kubelet-sim watch|trace …` run those tools; anything else runs the node."""
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        SUBCOMMANDS[sys.argv[1]](args=sys.argv[2:], prog_name=f"kubelet-sim {sys.argv[1]}")
    else:
        app()


if __name__ == "__main__":
    main()
