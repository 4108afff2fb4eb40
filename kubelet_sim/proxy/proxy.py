"""The node's kube-proxy: Services and other nodes' pod ranges, inside each pod's namespace.

A kubelet's node has kube-proxy (and the cluster's network plugin) in its own network
namespace; a virtual node must not touch its host's, so the same rules go into each pod's
namespace instead: programmed as the sandbox starts (before any container can connect, as a
CNI ADD), and again within a debounce of any change to Services, EndpointSlices or Nodes.
They leave with the pod. A hostNetwork pod shares the host's namespace and is never touched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import EventRecorder, EventRef
from kubelet_sim.kube.informer import Informer
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.timers import Periodic, Timers
from kubelet_sim.proxy import netns, rules

DEBOUNCE = 0.05  # changes that come together (a rollout) are programmed together
RESYNC = 30.0  # a namespace whose programming failed is retried at least this often
FIRST_LIST_GRACE = 5.0  # a new pod waits this long at most for the first EndpointSlice list
WARNING = "Warning"


@dataclass
class ProxySettings:
    node_name: str
    subnet: str | None  # the pods' Docker network (other nodes' ranges are routed only when on it)
    gateway: str | None = None  # the pods' default route (a range behind it needs no route)
    debounce: float = DEBOUNCE
    runner: netns.Runner = field(default=netns.run_command)


class ServiceProxy:
    """Reads Services, EndpointSlices and Nodes from the node's shared watches.

    `sandboxes()` lists the node's running sandboxes. Disabled (one warning) where namespaces
    cannot be entered (not root, no iptables): pods then run without Services, as on a node
    without kube-proxy."""

    def __init__(
        self,
        settings: ProxySettings,
        services: Callable[[], list[Json] | None],
        sandboxes: Callable[[], list[cri.ObservedContainer]],
        events: EventRecorder | None,
        *,
        watches: tuple[Informer, Informer],
        timers: Timers,
    ) -> None:
        """`watches`: the EndpointSlice and Node watches of the node's shared watches (which
        call `changed`); `timers`: the process's, for the passes."""
        self.settings = settings
        self._services = services
        self._sandboxes = sandboxes
        self._events = events
        self.log = get_logger("kubelet_sim.proxy", node=settings.node_name)
        self.disabled = netns.unavailable() if settings.runner is netns.run_command else None
        # A change no pass has programmed yet: a plain flag, not an Event (nobody waits on it,
        # and a process of thousands of nodes sets it on every node at each change).
        self._dirty = False
        self._lock = threading.Lock()  # the namespaces by pid; each has its own lock to apply
        self._namespaces: dict[int, netns.Namespace] = {}
        self._warned: set[tuple[str, str, str, str]] = set()
        self.slices, self.nodes = watches
        self._timers = timers
        self._timer: Periodic | None = None

    def start(self) -> None:
        if self.disabled:
            self.log.warning("Services are not programmed into pods", reason=self.disabled)
            return
        node = self.settings.node_name
        self._timer = self._timers.every("service-proxy", node, RESYNC, self._pass)

    def stop(self, timeout: float = 5.0) -> None:
        if self._timer is not None:
            self._timer.cancel(wait=timeout)

    def changed(self) -> None:
        self._dirty = True
        # A node without pods has nothing to program (a new pod's sandbox is set up whole):
        # a Service change in a process of a thousand nodes wakes only those with pods.
        if self._timer is not None and self._sandboxes():
            self._timer.wake(self.settings.debounce)

    def setup(self, sandbox: cri.ObservedContainer) -> None:
        """Program a new sandbox's namespace now, before its containers start."""
        if self.disabled or not sandbox.pid:
            return
        # The first EndpointSlice list, unless the server refused it (node credentials may
        # not list them: --proxy-kubeconfig): a pod never waits for a list that will not come.
        self.slices.answered.wait(FIRST_LIST_GRACE)
        self._program([sandbox], full=False)
        if self._dirty and self._timer is not None:  # changed while it had no pods
            self._timer.wake(self.settings.debounce)

    # ---------------------------------------------------------------------------------------

    def _pass(self) -> None:
        """Every namespace, after a change or at the resync."""
        self._dirty = False
        sandboxes = self._sandboxes()
        if sandboxes:
            self._program(sandboxes, full=True)
        else:  # nothing to compute for a node without pods (a thousand of them share a core)
            with self._lock:
                self._namespaces.clear()

    def _desired(self) -> tuple[rules.RuleSet, list[rules.Route]]:
        ports, skipped = rules.service_ports(self._services() or [], self.slices.items())
        for item in skipped:
            self._warn(item)
        routes = rules.pod_routes(
            self.nodes.items(), self.settings.node_name, self.settings.subnet, self.settings.gateway
        )
        return rules.render(ports), routes

    def _program(self, sandboxes: list[cri.ObservedContainer], *, full: bool) -> None:
        """Each namespace under its own lock: a new pod's set-up (on its pod worker) never
        waits behind a full pass over every other pod's namespace. A pass that applies rules
        older than a set-up's is followed by another: the change that made them set `_dirty`."""
        if not self.slices.synced.is_set():
            return  # without the endpoints every Service would look empty and refuse
        ruleset, routes = self._desired()
        for sandbox in sandboxes:
            if not sandbox.pid or netns.is_host_namespace(sandbox.pid):
                continue
            with self._lock:
                space = self._namespaces.setdefault(
                    sandbox.pid, netns.Namespace(sandbox.pid, run=self.settings.runner)
                )
            with space.lock:
                try:
                    if space.apply(ruleset, routes):
                        self.log.debug(
                            "programmed", pod=f"{sandbox.pod.namespace}/{sandbox.pod.name}"
                        )
                except (netns.NetnsError, OSError) as exc:
                    # The pod may be going away under us; the next change or resync retries.
                    space.programmed = None
                    self.log.warning(
                        "programming a pod's Services failed",
                        pod=f"{sandbox.pod.namespace}/{sandbox.pod.name}",
                        error=str(exc)[:300],
                    )
        if full:  # forget namespaces now gone
            live = {s.pid for s in sandboxes if s.pid}
            with self._lock:
                for pid in set(self._namespaces) - live:
                    del self._namespaces[pid]

    def _warn(self, item: rules.Skipped) -> None:
        key = (item.kind, item.namespace, item.name, item.reason)
        if key in self._warned:
            return
        self._warned.add(key)
        self.log.warning(
            "skipped", kind=item.kind, object=f"{item.namespace}/{item.name}", why=item.reason
        )
        if self._events is not None:
            api_version = "discovery.k8s.io/v1" if item.kind == "EndpointSlice" else "v1"
            ref = EventRef(item.namespace, item.name, "", kind=item.kind, api_version=api_version)
            self._events.event(ref, WARNING, "NotProgrammed", item.reason)
