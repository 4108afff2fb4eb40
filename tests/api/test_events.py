"""Events about pods: the kubelet's fields, and repeats counted on one object."""

from __future__ import annotations

from structlog.testing import capture_logs

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.events import NORMAL, WARNING, EventRecorder, EventRef
from kubelet_sim.loops.supervise import Supervisor
from tests.cluster import ApiUnderTest, wait_for


def test_repeats_are_counted_not_created_again(cluster: ApiUnderTest) -> None:
    pod = cluster.core.create_namespaced_pod(
        cluster.namespace,
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
    )
    ref = EventRef(cluster.namespace, "p", pod.metadata.uid, pod.metadata.resource_version)
    container_ref = EventRef(
        cluster.namespace, "p", pod.metadata.uid, field_path="spec.containers{c}"
    )
    recorder = EventRecorder(
        connect(cluster.kubeconfig).api, cluster.node_name, supervisor=Supervisor()
    ).start()
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


def test_a_full_queue_drops_its_oldest_events_counted_and_warned_once(
    cluster: ApiUnderTest,
) -> None:
    """While nothing can be written (the API server down; here: the writer not yet started) the
    queue keeps the newest `queue_size` events, counts the dropped ones and warns once."""
    pod = cluster.core.create_namespaced_pod(
        cluster.namespace,
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
    )
    ref = EventRef(cluster.namespace, "p", pod.metadata.uid)
    # Connected first: what reading a kubeconfig warns of (TLS verification off) is not the
    # recorder's.
    api = connect(cluster.kubeconfig).api
    with capture_logs() as logs:
        recorder = EventRecorder(api, cluster.node_name, queue_size=5, supervisor=Supervisor())
        for i in range(8):
            recorder.event(ref, NORMAL, "Pulling", f"event {i}")
        assert (recorder.queued(), recorder.dropped) == (5, 3)
        recorder.start()
        try:
            recorder.flush()
            for i in range(8, 10):  # after the burst: room again, nothing more dropped
                recorder.event(ref, NORMAL, "Pulling", f"event {i}")
            recorder.flush()
        finally:
            recorder.stop()
    assert (recorder.dropped, recorder.sent) == (3, 7)
    warnings = [r for r in logs if r["log_level"] == "warning"]
    assert [w["event"] for w in warnings] == [
        "event queue full; dropping the oldest events until it drains"
    ]
    messages = {
        e.message
        for e in cluster.core.list_namespaced_event(cluster.namespace).items
        if e.source and e.source.component == "kubelet"
    }
    assert messages == {f"event {i}" for i in range(3, 10)}
