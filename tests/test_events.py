"""Events about pods: the kubelet's fields, and repeats counted on one object."""

from __future__ import annotations

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.events import NORMAL, WARNING, EventRecorder, EventRef
from tests.cluster import Cluster, wait_for


def test_repeats_are_counted_not_created_again(cluster: Cluster) -> None:
    pod = cluster.core.create_namespaced_pod(
        cluster.namespace,
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
    )
    ref = EventRef(cluster.namespace, "p", pod.metadata.uid, pod.metadata.resource_version)
    container_ref = EventRef(
        cluster.namespace, "p", pod.metadata.uid, field_path="spec.containers{c}"
    )
    recorder = EventRecorder(connect(cluster.kubeconfig).api, cluster.node_name).start()
    try:
        recorder.event(container_ref, WARNING, "BackOff", "Back-off restarting failed container")
        recorder.event(container_ref, WARNING, "BackOff", "Back-off restarting failed container")
        recorder.event(container_ref, WARNING, "BackOff", "Back-off restarting failed container")
        recorder.event(ref, NORMAL, "Killing", "Stopping container c")
        recorder.flush()
    finally:
        recorder.stop()

    def kubelet_events() -> list:  # type: ignore[type-arg]
        items = cluster.core.list_namespaced_event(cluster.namespace).items
        return [e for e in items if e.source and e.source.component == "kubelet"]

    events = wait_for(lambda: len(kubelet_events()) == 2 and kubelet_events(), 5, "two events")
    by_reason = {e.reason: e for e in events}
    backoff = by_reason["BackOff"]
    assert backoff.count == 3
    assert backoff.type == "Warning"
    assert backoff.source.host == cluster.node_name
    assert backoff.involved_object.kind == "Pod"
    assert backoff.involved_object.uid == pod.metadata.uid
    assert backoff.involved_object.field_path == "spec.containers{c}"
    assert backoff.metadata.name.startswith("p.")
    killing = by_reason["Killing"]
    assert (killing.count, killing.message, killing.type) == (1, "Stopping container c", "Normal")
