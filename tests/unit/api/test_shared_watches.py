"""The fan-out of a process's shared watches, without an API server: each pod to its node,
and a Node's change to the service proxies only when it changes what they route."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kubelet_sim.kube.shared_watches import NodeHandlers, SharedWatches
from kubelet_sim.loops.supervise import Supervisor


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
    handler("ADDED", _node("n1", "10.244.1.0/24", "172.18.0.2"))
    assert len(seen["network"]) == 2  # both nodes' proxies
    handler("MODIFIED", _node("n1", "10.244.1.0/24", "172.18.0.2", ready="False"))
    assert len(seen["network"]) == 2, "a heartbeat-like change routes nothing new"
    assert seen["n1 node"] == ["ADDED", "MODIFIED"], "the node itself hears every change"
    handler("MODIFIED", _node("n1", "10.244.1.0/24", "172.18.0.9"))
    assert len(seen["network"]) == 4
    handler("DELETED", _node("n1", "10.244.1.0/24", "172.18.0.9"))
    assert len(seen["network"]) == 6
