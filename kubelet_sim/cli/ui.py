"""`kubelet-sim ui`, and `--ui` on `kubelet-sim` and `kubelet-sim demo`: the live web view.

`with_ui_options` adds `--ui`, `--ui-address` and `--ui-port` to a command and hands it one
`UiOptions` (parameter `ui`); `UiOptions.start` serves the view and prints its URL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

import typer

from kubelet_sim.assembly.build import reading_runtime
from kubelet_sim.assembly.nodeset import usable_root_dir
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.cli.common import (
    ContextOption,
    JournalRootDirOption,
    KubeconfigOption,
    fail,
    log_as_tool,
    stop_on_signals,
    typer_app,
    with_options_of,
)
from kubelet_sim.kube.client import KubeConfigError, connect
from kubelet_sim.runtime.engine import DockerEngine, RuntimeUnavailable
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.ui import (
    DEFAULT_ADDRESS,
    DEFAULT_PORT,
    RunningUi,
    UiError,
    connections,
    start_ui,
)
from kubelet_sim.validation import ConfigError

TOKEN_ENV = "KUBELET_SIM_UI_TOKEN"

UiAddress = Annotated[
    str,
    typer.Option(
        envvar="KUBELET_SIM_UI_ADDRESS",
        help="Address of the web view. Loopback by default; anywhere else it asks for a random"
        f" token printed with the URL (or ${TOKEN_ENV}).",
    ),
]
UiPort = Annotated[
    int,
    typer.Option(
        envvar="KUBELET_SIM_UI_PORT", help="Port of the web view (0: a free one).", min=0, max=65535
    ),
]


def _token() -> str | None:
    return os.environ.get(TOKEN_ENV) or None


@dataclass(frozen=True)
class UiOptions:
    ui: Annotated[
        bool,
        typer.Option(
            "--ui",
            envvar="KUBELET_SIM_UI",
            help="Serve a live web view of the nodes, their pods and each pod's handoff"
            " (see `kubelet-sim ui`); prints its URL.",
        ),
    ] = False
    ui_address: UiAddress = DEFAULT_ADDRESS
    ui_port: UiPort = DEFAULT_PORT

    def start(
        self,
        kubeconfig: str | None,
        context: str | None,
        runtimes: Mapping[str, NodeRuntime],
        say: Callable[[str], None],
    ) -> RunningUi | None:
        """Serve the view if asked (`--ui`), with a connection of its own; the URL goes to
        `say`. Fails in one line."""
        if not self.ui:
            return None
        try:
            kube = connect(kubeconfig, context, pool_size=connections(len(runtimes)))
            running = start_ui(
                kube, runtimes, address=self.ui_address, port=self.ui_port, token=_token()
            )
        except (KubeConfigError, UiError) as exc:
            fail(str(exc))
        say(f"web view: {running.url}")
        return running

    def serve_until(
        self,
        stop: threading.Event,
        kubeconfig: str,
        runtimes: Mapping[str, NodeRuntime],
        say: Callable[[str], None],
    ) -> None:
        """`start`, and stop the view on its own thread once `stop` is set."""
        running = self.start(kubeconfig, None, runtimes, say)
        if running is None:
            return

        def stop_when_told() -> None:
            stop.wait()
            running.stop()

        threading.Thread(target=stop_when_told, name="ui stop", daemon=True).start()


with_ui_options = with_options_of(UiOptions, "ui")


ui_app = typer_app()


@ui_app.command(
    help="Serve a live web view (read-only) of the cluster's nodes and pods, each pod's handoff"
    " timeline (as `kubelet-sim trace`), the watch stream of the nodes named (as `kubelet-sim"
    " watch`) and the scheduler's decisions. Run it on the nodes' machine for their journal"
    " and containers."
)
def ui(
    node_name: Annotated[
        list[str] | None,
        typer.Option(
            envvar="KUBELET_SIM_NODE_NAME",
            help="A node on this machine (repeat for several): its watch stream, its journal"
            " and containers in the timelines.",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    root_dir: JournalRootDirOption = None,
    address: UiAddress = DEFAULT_ADDRESS,
    port: UiPort = DEFAULT_PORT,
) -> None:
    log_as_tool()
    names = list(dict.fromkeys(node_name or []))
    engine: DockerEngine | None = None
    try:
        kube = connect(kubeconfig, context, pool_size=connections(len(names)))
        runtimes: dict[str, NodeRuntime] = {}
        if names:
            root = usable_root_dir(root_dir)
            engine = engine_for()
            for name in names:
                runtimes[name] = reading_runtime(engine, name, root / name)
        running = start_ui(kube, runtimes, address=address, port=port, token=_token())
    except (ConfigError, KubeConfigError, RuntimeUnavailable, UiError) as exc:
        fail(str(exc))
    typer.echo(f"web view: {running.url}  (Ctrl-C stops it)")
    stop = stop_on_signals()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        running.stop()
        if engine is not None:
            engine.close()
