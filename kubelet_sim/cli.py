"""The `kubelet-sim` command: parse options, then hand over to the Agent until a signal."""

from __future__ import annotations

import signal
import sys
import threading
from enum import StrEnum
from types import FrameType
from typing import Annotated, NoReturn

import typer

from kubelet_sim import __version__
from kubelet_sim.agent import Agent
from kubelet_sim.config import AgentConfig, ConfigError
from kubelet_sim.kube.client import KubeConfigError, connect
from kubelet_sim.logs import configure_logging, get_logger
from kubelet_sim.runtime.docker_runtime import DockerRuntime, RuntimeUnavailable


class LogFormatChoice(StrEnum):
    auto = "auto"
    console = "console"
    json = "json"


class LogLevelChoice(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kubelet-sim {__version__}")
        raise typer.Exit()


@app.command(help="Run a virtual node whose pods are real Docker containers.")
def run(
    node_name: Annotated[
        str,
        typer.Option(envvar="KUBELET_SIM_NODE_NAME", help="Name of the Node to register."),
    ],
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
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    configure_logging(log_format.value, log_level.value)
    try:
        config = AgentConfig(node_name=node_name, kubeconfig=kubeconfig, context=context)
        kube = connect(kubeconfig, context)
        runtime = DockerRuntime.connect()
    except (ConfigError, KubeConfigError, RuntimeUnavailable) as exc:
        _fail(str(exc))
    stop = _stop_on_signals()
    try:
        Agent(config, kube, runtime).run(stop)
    finally:
        runtime.close()
    get_logger("kubelet_sim.cli", node=node_name).info("stopped")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
