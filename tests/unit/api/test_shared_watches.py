"""The fan-out of a process's shared watches, without an API server: each pod to its node,
and a Node's change to the service proxies only when it changes what they route."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kubelet_sim.kube.shared_watches import NodeHandlers, SharedWatches
from kubelet_sim.loops.supervise import Supervisor
from tests.cluster import wait_for


def _node(name: str, cidr: str, ip: str, ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def _watches() -> tuple[SharedWatches, dict[str, list[Any]]]:
    seen: dict[str, list[Any]] = {"n1 pods": [], "n2 pods": [], "n1 node": [], "network": []}
    watches = SharedWatches(
        client.ApiClient(), proxy_api=client.ApiClient(), supervisor=Supervisor()
    )
    for name in ("n1", "n2"):
        watches.register(
            name,
            NodeHandlers(
                lambda kind, pod, n=name: seen[f"{n} pods"].append((kind, pod["metadata"]["name"])),
                lambda kind, node, n=name: seen.setdefault(f"{n} node", []).append(kind),
                lambda: seen["network"].append(1),
            ),
        )
    return watches, seen


def test_each_pod_goes_to_exactly_its_node_and_a_strangers_to_none() -> None:
    watches, seen = _watches()
    assert watches.pods.handler is not None
    for name, node in (("a", "n1"), ("b", "n2"), ("c", "elsewhere")):
        watches.pods.handler("ADDED", {"metadata": {"name": name}, "spec": {"nodeName": node}})
    assert seen["n1 pods"] == [("ADDED", "a")]
    assert seen["n2 pods"] == [("ADDED", "b")]
    assert watches.dropped == 1


def test_a_nodes_status_write_wakes_no_proxy_unless_its_routing_changed() -> None:
    watches, seen = _watches()
    handler = watches.nodes.handler
    assert handler is not None

    def change(kind: str, node: dict[str, Any]) -> int:
        """The change, then what the fan-out's thread would tell (it runs only once started)."""
        handler(kind, node)
        watches._tell_network_change()
        return len(seen["network"])

    assert change("ADDED", _node("n1", "10.244.1.0/24", "172.18.0.2")) == 2  # both proxies
    assert change("MODIFIED", _node("n1", "10.244.1.0/24", "172.18.0.2", ready="False")) == 2, (
        "a heartbeat-like change routes nothing new"
    )
    assert seen["n1 node"] == ["ADDED", "MODIFIED"], "the node itself hears every change"
    assert change("MODIFIED", _node("n1", "10.244.1.0/24", "172.18.0.9")) == 4
    assert change("DELETED", _node("n1", "10.244.1.0/24", "172.18.0.9")) == 6


def test_changes_that_come_together_reach_each_node_once() -> None:
    watches, seen = _watches()
    handler = watches.nodes.handler
    assert handler is not None
    for i in range(100):  # a hundred nodes registering
        handler("ADDED", _node(f"m{i}", f"10.244.{i}.0/24", f"172.18.1.{i}"))
    assert seen["network"] == []  # told on the fan-out's thread, not the watch's
    watches._tell_network_change()
    assert len(seen["network"]) == 2  # each of the two nodes once


def test_the_fan_out_thread_tells_the_nodes_once_started() -> None:
    watches, seen = _watches()
    assert watches.services.handler is not None
    watches._fan_out.start()  # the watches themselves stay off: no API server here
    try:
        watches.services.handler("ADDED", {"metadata": {"name": "web", "namespace": "d"}})
        wait_for(lambda: len(seen["network"]) == 2, 10, "both nodes told")
    finally:
        watches.stop(5)
