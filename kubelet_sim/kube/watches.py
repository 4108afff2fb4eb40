"""The list-watch sources a node agent needs: its pods and its own Node."""

from __future__ import annotations

from kubernetes import client

from kubelet_sim.kube import paths
from kubelet_sim.kube.informer import ListWatchSource
from kubelet_sim.kube.paths import Collection


def pods_on_node(api: client.ApiClient, node_name: str) -> ListWatchSource:
    """All namespaces, server-side filtered to pods bound to this node (node credentials)."""
    return ListWatchSource(
        description=f"pods on {node_name}",
        list_method=Collection(api, paths.PODS),
        kwargs={"field_selector": f"spec.nodeName={node_name}"},
    )


def own_node(api: client.ApiClient, node_name: str) -> ListWatchSource:
    return ListWatchSource(
        description=f"node {node_name}",
        list_method=Collection(api, paths.NODES),
        kwargs={"field_selector": f"metadata.name={node_name}"},
    )


def all_services(api: client.ApiClient) -> ListWatchSource:
    """Every Service (the kubelet's service informer, for service-link variables); the Node
    authorizer lets a node list and watch them."""
    return ListWatchSource(
        description="services",
        list_method=Collection(api, paths.SERVICES),
        kwargs={},
    )


def pods_in_namespace(api: client.ApiClient, namespace: str | None) -> ListWatchSource:
    """Every pod of one namespace, or of all (`None`): a viewer's watch, not a node's."""
    if namespace is None:
        return ListWatchSource("pods", Collection(api, paths.PODS))
    return ListWatchSource(f"pods in {namespace}", Collection(api, paths.PODS_IN), (namespace,))


def events_with_reason(
    api: client.ApiClient, reason: str, namespace: str | None
) -> ListWatchSource:
    """Events of one reason (e.g. the scheduler's `Scheduled`), filtered by the server."""
    selector = {"field_selector": f"reason={reason}"}
    if namespace is None:
        return ListWatchSource(f"{reason} events", Collection(api, paths.EVENTS), kwargs=selector)
    return ListWatchSource(
        f"{reason} events in {namespace}", Collection(api, paths.EVENTS_IN), (namespace,), selector
    )


def events_in_namespace(api: client.ApiClient, namespace: str) -> ListWatchSource:
    """Every Event of one namespace (`kubelet-sim compare` counts each pod's reasons)."""
    return ListWatchSource(f"events in {namespace}", Collection(api, paths.EVENTS_IN), (namespace,))


def all_endpoint_slices(api: client.ApiClient) -> ListWatchSource:
    """Every EndpointSlice, for the service proxy (kube-proxy's rights: system:node-proxier;
    node credentials alone may not list them)."""
    return ListWatchSource(
        description="endpointslices",
        list_method=Collection(api, paths.ENDPOINT_SLICES),
        kwargs={},
    )


def all_nodes(api: client.ApiClient) -> ListWatchSource:
    """Every Node, for the other nodes' pod ranges (the Node authorizer lets a node read them)."""
    return ListWatchSource(description="nodes", list_method=Collection(api, paths.NODES), kwargs={})
