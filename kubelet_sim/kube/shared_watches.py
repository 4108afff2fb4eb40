"""One watch per resource for the nodes on one set of credentials, fanned out by node name.

A process of a thousand nodes with a pod, a Node, a Service, an EndpointSlice and a Nodes
watch each would hold five thousand watches and as many threads and caches. With credentials
that may list every pod and Node (admin, a ServiceAccount), the set holds one of each: pods
bound to any node (`spec.nodeName!=`), every Node, every Service, every EndpointSlice; each
event goes to the node it names (kwok's way). Node credentials may not (the Node authorizer
lets a node watch only its own pods and Node), and a process of one node needs no more: such
watches serve one node, with the kubelet's own field selectors. Either way a node reads its
watches the same way (`register`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube import paths
from kubelet_sim.kube.informer import DELETED, Handler, Informer, ListWatchSource
from kubelet_sim.kube.paths import Collection
from kubelet_sim.kube.watches import (
    all_endpoint_slices,
    all_nodes,
    all_services,
    own_node,
    pods_on_node,
)
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import Supervisor

FAN_OUT_GAP = 0.05  # the least time between two passes telling every node (a proxy's debounce)
FAN_OUT_SHARE = 0.2  # of a core, at most, spent telling nodes in a storm of changes


def pods_on_any_node(api: client.ApiClient) -> ListWatchSource:
    """Every pod bound to a node; each node of the set takes those naming it."""
    return ListWatchSource(
        description="pods on any node",
        list_method=Collection(api, paths.PODS),
        kwargs={"field_selector": "spec.nodeName!="},
    )


def _node_name_of_pod(pod: Json) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _routing(node: Json) -> tuple[object, ...]:
    """What a service proxy reads of a Node (`proxy.rules.pod_routes`)."""
    spec = node.get("spec") or {}
    addresses = (node.get("status") or {}).get("addresses") or []
    return (
        spec.get("podCIDR"),
        tuple(spec.get("podCIDRs") or ()),
        tuple((a.get("type"), a.get("address")) for a in addresses),
    )


def _name(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class NodeHandlers:
    """What one node of the set is told: its pods' and its Node's events, and that something
    a service proxy reads (Services, EndpointSlices, Nodes) changed."""

    def __init__(
        self,
        on_pod: Handler,
        on_node: Handler,
        on_network_change: Callable[[], None] | None = None,
    ) -> None:
        self.on_pod = on_pod
        self.on_node = on_node
        self.on_network_change = on_network_change


class SharedWatches:
    """The watches of the nodes on one set of credentials; `register` each node before
    `start`, or later (it then sees the pods and Node already in the caches at once)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        node: str | None = None,
        proxy_api: client.ApiClient | None = None,
        supervisor: Supervisor,
    ) -> None:
        """`node`: the one node these watches serve (its pods and its Node by field selector,
        as the kubelet watches them); None: every node's. `proxy_api`: the service proxy's
        connection (kube-proxy's rights), None: no EndpointSlice watch (no proxy runs)."""
        self.log = get_logger("kubelet_sim.shared_watches")
        self.node = node
        self._nodes_by_name: dict[str, NodeHandlers] = {}
        self._lock = threading.Lock()
        self._started = False
        self.route_nodes: Informer | None = None  # the Nodes a service proxy reads
        ctx: dict[str, Any] = {"node": node} if node is not None else {}
        if node is None:
            self.pods = Informer(pods_on_any_node(api), self._on_pod, supervisor=supervisor)
            self.nodes = Informer(all_nodes(api), self._on_every_node, supervisor=supervisor)
            if proxy_api is not None:
                self.route_nodes = self.nodes
        else:
            self.pods = Informer(
                pods_on_node(api, node), self._on_pod, supervisor=supervisor, **ctx
            )
            self.nodes = Informer(own_node(api, node), self._on_node, supervisor=supervisor, **ctx)
            if proxy_api is not None:
                self.route_nodes = Informer(
                    all_nodes(proxy_api), self._on_route, supervisor=supervisor, **ctx
                )
        self.services = Informer(all_services(api), self._on_network, supervisor=supervisor, **ctx)
        self.slices: Informer | None = None
        if proxy_api is not None:
            self.slices = Informer(
                all_endpoint_slices(proxy_api), self._on_network, supervisor=supervisor, **ctx
            )
        self.dropped = 0  # pod events for a node of no one here (on another kubelet)
        self._routing: dict[str, tuple[object, ...]] = {}  # what a proxy reads of each Node
        # Network changes reach the nodes from a thread of their own, merged: five thousand
        # nodes registering are fifteen thousand Node changes, and telling every node of each
        # one on the watch's thread was quadratic (most of the process's CPU while they joined).
        self._network_changed = False
        self._fan_out_stop = threading.Event()
        self._fan_out = supervisor.on_demand(
            "network fan-out", self._tell_network_change, self._fan_out_stop
        )

    @property
    def informers(self) -> list[Informer]:
        extra = [i for i in (self.slices, self.route_nodes) if i is not None]
        extra = [i for i in extra if i is not self.nodes]
        return [self.pods, self.nodes, self.services, *extra]

    @property
    def proxy_watches(self) -> tuple[Informer, Informer] | None:
        """The EndpointSlice and Node watches a service proxy reads (None: no proxy runs)."""
        if self.slices is None or self.route_nodes is None:
            return None
        return self.slices, self.route_nodes

    def register(self, node_name: str, handlers: NodeHandlers) -> None:
        with self._lock:
            self._nodes_by_name[node_name] = handlers
        for node in self.nodes.items():  # a node registered after the first list
            if _name(node) == node_name:
                handlers.on_node("ADDED", node)
        for pod in self.pods.items():
            if _node_name_of_pod(pod) == node_name:
                handlers.on_pod("ADDED", pod)

    def unregister(self, node_name: str) -> None:
        with self._lock:
            self._nodes_by_name.pop(node_name, None)

    def start(self) -> None:
        """Once (later calls do nothing): the set starts watches of every node after checking
        the credentials' rights, a node its own after its Node is registered."""
        with self._lock:
            started, self._started = self._started, True
        if not started:
            self._fan_out.start()
            for informer in self.informers:
                informer.start()

    def stop(self, timeout: float = 5.0) -> None:
        for informer in self.informers:
            informer.stop(0)
        self._fan_out.stop()
        for informer in self.informers:
            informer.stop(timeout)
        self._fan_out.stop(timeout)

    # -- fan-out (on the informers' threads: quick, the handlers only enqueue) ---------------

    def _handlers(self, node_name: str) -> NodeHandlers | None:
        with self._lock:
            return self._nodes_by_name.get(node_name)

    def _on_pod(self, kind: str, pod: Json) -> None:
        handlers = self._handlers(_node_name_of_pod(pod))
        if handlers is None:
            self.dropped += 1
            return
        handlers.on_pod(kind, pod)

    def _on_every_node(self, kind: str, node: Json) -> None:
        self._on_node(kind, node)
        self._on_route(kind, node)

    def _on_node(self, kind: str, node: Json) -> None:
        handlers = self._handlers(_name(node))
        if handlers is not None:
            handlers.on_node(kind, node)

    def _on_route(self, kind: str, node: Json) -> None:
        name = _name(node)
        # A proxy reads a Node's pod ranges and addresses only: a thousand nodes' status
        # writes must not wake a thousand proxies each.
        routing = None if kind == DELETED else _routing(node)
        with self._lock:
            before = self._routing.pop(name, None) if routing is None else self._routing.get(name)
            if routing is not None:
                self._routing[name] = routing
        if before != routing or kind == DELETED:
            self._on_network(kind, node)

    def _on_network(self, _kind: str, _obj: Json) -> None:
        with self._lock:
            self._network_changed = True
        self._fan_out.wake()

    def _tell_network_change(self) -> None:
        """Tell every node once for all the changes since the last time. A change that comes
        alone is told at once; one during or just after a pass waits for the next, at least
        FAN_OUT_GAP later and late enough that passes take at most FAN_OUT_SHARE of a core
        (5,000 nodes take about 25 ms a pass, while they register)."""
        while True:
            with self._lock:
                if not self._network_changed:
                    return
                self._network_changed = False
                listeners = [
                    h.on_network_change for h in self._nodes_by_name.values() if h.on_network_change
                ]
            started = time.monotonic()
            for changed in listeners:
                changed()
            took = time.monotonic() - started
            self._fan_out_stop.wait(max(FAN_OUT_GAP, took * (1 / FAN_OUT_SHARE - 1)))


def may_watch_every_node(api: client.ApiClient) -> str | None:
    """None when these credentials may list every pod bound to a node and every Node (what the
    shared watches do); else why not, in one line. Raises on anything but a refusal."""
    checks = (
        ("pods", lambda: Collection(api, paths.PODS)(
            field_selector="spec.nodeName!=", limit=1, _request_timeout=(5, 30),
            _preload_content=True)),
        ("nodes", lambda: Collection(api, paths.NODES)(
            limit=1, _request_timeout=(5, 30), _preload_content=True)),
    )  # fmt: skip
    for resource, call in checks:
        try:
            call()
        except ApiException as exc:
            if exc.status in (401, 403):
                return (
                    f"these credentials may not list {resource} on every node ({exc.status}):"
                    " several nodes in one process share one pod and one Node watch; run them"
                    " with credentials that may (admin, or the ServiceAccount of"
                    " deploy/rbac.yaml), or one node per process with node credentials"
                )
            raise
    return None
