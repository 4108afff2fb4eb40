"""The list-watch sources a node agent needs: its pods and its own Node."""

from __future__ import annotations

from kubernetes import client

from kubelet_sim.kube.informer import ListWatchSource


def pods_on_node(api: client.ApiClient, node_name: str) -> ListWatchSource:
    """All namespaces, server-side filtered to pods bound to this node (node credentials)."""
    return ListWatchSource(
        description=f"pods on {node_name}",
        list_method=client.CoreV1Api(api).list_pod_for_all_namespaces,
        kwargs={"field_selector": f"spec.nodeName={node_name}"},
    )


def own_node(api: client.ApiClient, node_name: str) -> ListWatchSource:
    return ListWatchSource(
        description=f"node {node_name}",
        list_method=client.CoreV1Api(api).list_node,
        kwargs={"field_selector": f"metadata.name={node_name}"},
    )
