"""`kubelet-sim ui`: a live web view of the nodes, their pods and each pod's handoff.

`UiState` (what is shown, bounded) is fed by `Sources` (the package's own informers, the
`kubelet-sim watch` stream, `kubelet-sim trace`'s timeline) and served by `UiServer`
(server-sent events, static files shipped here). `start_ui` wires the three.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import WatchTimeouts
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.ui.page_state import Limits, UiState
from kubelet_sim.ui.server import DEFAULT_ADDRESS, DEFAULT_PORT, UiError, UiServer
from kubelet_sim.ui.sources import Sources


def connections(nodes: int) -> int:
    """API connections the view holds at once: 4 watches (nodes, pods, two event reasons),
    2 per node of this process (`kubelet-sim watch`'s), the leases, timelines being shown."""
    return 8 + 2 * nodes


@dataclass
class RunningUi:
    state: UiState
    sources: Sources
    server: UiServer

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()
        self.sources.stop()


def start_ui(
    kube: KubeConnection,
    runtimes: Mapping[str, NodeRuntime],
    *,
    nodes: Iterable[str] | None = None,
    address: str = DEFAULT_ADDRESS,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    limits: Limits | None = None,
    timeouts: WatchTimeouts | None = None,
) -> RunningUi:
    """Serve the web view of `runtimes`' nodes (and the cluster's others) until `stop()`.
    `nodes`: the nodes of this process, if not (all) in `runtimes`.

    Raises UiError (in one line) when the address cannot be bound; nothing runs then."""
    state = UiState(sorted(set(nodes or ()) | set(runtimes)), limits)
    sources = Sources(state, kube, runtimes, timeouts=timeouts)
    server = UiServer(state, sources.timeline, address=address, port=port, token=token)
    sources.start()
    server.start()
    return RunningUi(state, sources, server)


__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "Limits",
    "RunningUi",
    "UiError",
    "connections",
    "start_ui",
]
