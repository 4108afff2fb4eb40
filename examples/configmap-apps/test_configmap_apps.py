"""configmap-apps on a kubelet-sim cluster: a ConfigMap's pods run and answer over the pod
network; the controller does the same from a pod, with in-cluster config; and when a node
stops, its pods come back on the other node."""

from __future__ import annotations

from collections.abc import Callable

from kubelet_sim.testing import Cluster
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller import APP_LABEL
from support import CONTROLLER_SELECTOR, http_get, running_pod, wait_until

PORT = 8080
# Each pod serves its own name (its hostname) on PORT; TERM ends it at once (httpd alone, as
# the container's first process, would ignore TERM and wait out the grace period).
SERVE_OWN_NAME = (
    """sh -c 'mkdir -p /www; echo "hello from $(hostname)" > /www/index.html;"""
    f""" trap "exit 0" TERM; httpd -f -p {PORT} -h /www & wait'"""
)


def app_configmap(name: str, image: str, replicas: int) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels={APP_LABEL: "true"}),
        data={
            "image": image,
            "replicas": str(replicas),
            "port": str(PORT),
            "command": SERVE_OWN_NAME,
        },
    )


def answering(api: client.ApiClient, namespace: str, service: str) -> dict[str, str]:
    """Pod name -> node name, for each ready address of the Service whose pod answers, from
    this host to the pod's IP on the pod network, with its own name."""
    try:
        endpoints = client.CoreV1Api(api).read_namespaced_endpoints(service, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    found = {}
    for subset in endpoints.subsets or []:
        for address in subset.addresses or []:
            pod = address.target_ref.name
            if http_get(address.ip, PORT) == f"hello from {pod}":
                found[pod] = address.node_name
    return found


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_a_configmaps_pods_answer_over_the_pod_network(
    kubelet_sim_cluster: Cluster,
    api: client.ApiClient,
    kubelet_sim_namespace: str,
    controller_in_process: None,
) -> None:
    ns = kubelet_sim_namespace
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    configmap = core.create_namespaced_config_map(
        ns, app_configmap("web", kubelet_sim_cluster.image, replicas=2)
    )
    wait_until(
        lambda: answering(api, ns, "web"), 120, "2 pods answering", done=lambda f: len(f) == 2
    )
    deployment = apps.read_namespaced_deployment("web", ns)
    owners = deployment.metadata.owner_references or []
    assert [ref.uid for ref in owners] == [configmap.metadata.uid], "owned by the ConfigMap"

    core.patch_namespaced_config_map("web", ns, {"data": {"replicas": "3"}})
    wait_until(
        lambda: answering(api, ns, "web"), 120, "3 pods answering", done=lambda f: len(f) == 3
    )

    # What the ConfigMap owned goes with it (the API server's garbage collector).
    core.delete_namespaced_config_map("web", ns)
    wait_until(
        lambda: (
            gone(lambda: apps.read_namespaced_deployment("web", ns))
            and gone(lambda: core.read_namespaced_service("web", ns))
        ),
        60,
        "Deployment and Service deleted",
    )


def test_the_controller_works_from_a_pod_with_in_cluster_config(
    kubelet_sim_cluster: Cluster,
    api: client.ApiClient,
    kubelet_sim_namespace: str,
    controller_pod: client.V1Pod,
) -> None:
    ns, core = kubelet_sim_namespace, client.CoreV1Api(api)
    configmap = core.create_namespaced_config_map(
        ns, app_configmap("web", kubelet_sim_cluster.image, replicas=1)
    )
    wait_until(
        lambda: answering(api, ns, "web"), 120, "the pod answering", done=lambda f: len(f) == 1
    )
    logs = core.read_namespaced_pod_log(controller_pod.metadata.name, ns)
    assert "with in-cluster config" in logs, logs
    assert f"reconciled {ns}/web (resourceVersion {configmap.metadata.resource_version})" in logs


def test_a_stopped_nodes_pods_come_back_on_the_other_node(
    kubelet_sim_cluster: Cluster,
    api: client.ApiClient,
    kubelet_sim_namespace: str,
    controller_pod: client.V1Pod,
) -> None:
    cluster, ns, core = kubelet_sim_cluster, kubelet_sim_namespace, client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, app_configmap("web", cluster.image, replicas=2))
    wait_until(
        lambda: answering(api, ns, "web"), 120, "2 pods answering", done=lambda f: len(f) == 2
    )
    stopped = controller_pod.spec.node_name
    (other,) = [node for node in cluster.nodes if node != stopped]
    cluster.stop_node(stopped)  # its containers keep running, unseen: as a node cut off
    try:
        # The node goes NotReady (20 s without its Lease renewed), its pods are evicted (10 s
        # later) and replaced on the other node: the controller's and the app's.
        moved = wait_until(
            lambda: running_pod(api, ns, CONTROLLER_SELECTOR),
            180,
            f"controller pod Running on {other}",
            done=lambda pod: pod is not None and pod.spec.node_name == other,
        )
        wait_until(
            lambda: answering(api, ns, "web"),
            180,
            f"2 pods answering on {other}",
            done=lambda f: len(f) == 2 and set(f.values()) == {other},
        )
        # The moved controller still does its job.
        configmap = core.patch_namespaced_config_map("web", ns, {"data": {"replicas": "3"}})
        wait_until(
            lambda: answering(api, ns, "web"),
            120,
            f"3 pods answering on {other}",
            done=lambda f: len(f) == 3 and set(f.values()) == {other},
        )
        assert moved is not None
        reconciled = f"reconciled {ns}/web (resourceVersion {configmap.metadata.resource_version})"
        wait_until(
            lambda: core.read_namespaced_pod_log(moved.metadata.name, ns),
            30,
            "the moved controller's log of the change",
            done=lambda logs: reconciled in logs,
        )
    finally:
        cluster.start_node(stopped)
