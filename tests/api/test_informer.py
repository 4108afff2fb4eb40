"""The informer against the API: the cache ends equal to the server's truth whatever happens."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.informer import DELETED, Informer, WatchTimeouts
from kubelet_sim.kube.watches import pods_on_node
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from tests.cluster import ApiUnderTest, wait_for
from tests.manifests import pod_manifest

FAST_TIMEOUTS = WatchTimeouts(server_min=20, server_max=30, read=1.5, connect=1.0)


def fast_backoff() -> Backoff:
    return Backoff(initial=0.05, cap=0.4)


def pod_body(name: str, node: str) -> dict[str, Any]:
    c = {"name": "c", "image": "kubelet-sim.local/busybox:test"}
    return pod_manifest(name, [c], nodeName=node, automountServiceAccountToken=False)


class Recorder:
    """Collects (type, key) deliveries from the informer thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self.lock:
            self.events.append((kind, f"{meta['namespace']}/{meta['name']}"))

    def saw(self, kind: str, key: str) -> bool:
        with self.lock:
            return (kind, key) in self.events


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def agent_api(cluster: ApiUnderTest) -> client.ApiClient:
    """A client configured as the agent's own (no hidden urllib3 retries)."""
    return connect(cluster.kubeconfig).api


@pytest.fixture
def informer(
    agent_api: client.ApiClient, cluster: ApiUnderTest, recorder: Recorder
) -> Iterator[Informer]:
    inf = Informer(
        pods_on_node(agent_api, cluster.node_name),
        recorder,
        timeouts=FAST_TIMEOUTS,
        backoff=fast_backoff(),
        supervisor=Supervisor(),
    ).start()
    wait_for(inf.synced.is_set, 5, "informer did not list")
    yield inf
    inf.stop()


def server_truth(cluster: ApiUnderTest) -> set[str]:
    pods = cluster.core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={cluster.node_name}"
    ).items
    return {f"{p.metadata.namespace}/{p.metadata.name}" for p in pods}


def create_pod(cluster: ApiUnderTest, name: str, node: str | None = None) -> str:
    cluster.core.create_namespaced_pod(cluster.namespace, pod_body(name, node or cluster.node_name))
    return f"{cluster.namespace}/{name}"


def delete_now(cluster: ApiUnderTest, name: str) -> None:
    cluster.core.delete_namespaced_pod(
        name, cluster.namespace, body=client.V1DeleteOptions(grace_period_seconds=0)
    )


def test_pod_bound_to_node_is_seen_within_a_second(
    cluster: ApiUnderTest, informer: Informer, recorder: Recorder
) -> None:
    other_node = f"{cluster.node_name}-other"
    create_pod(cluster, "elsewhere", node=other_node)
    key = create_pod(cluster, "mine")
    wait_for(lambda: informer.get(key) is not None, 1.0, "pod not seen within a second")
    assert recorder.saw("ADDED", key)
    assert informer.keys() == {key}, "a pod bound to another node must not be delivered"
    assert informer.stats.lists == 1


def test_delete_is_delivered_with_last_state(
    cluster: ApiUnderTest, informer: Informer, recorder: Recorder
) -> None:
    key = create_pod(cluster, "short-lived")
    wait_for(lambda: informer.get(key) is not None, 5, "pod not seen")
    delete_now(cluster, "short-lived")
    wait_for(lambda: recorder.saw(DELETED, key), 5, "delete not delivered")
    assert informer.get(key) is None


def test_dropped_watches_resume_from_resource_version_without_relisting(
    cluster: ApiUnderTest, informer: Informer
) -> None:
    fake = cluster.require_fake("drops every open watch")
    first = create_pod(cluster, "before")
    wait_for(lambda: informer.get(first) is not None, 5, "pod not seen")
    watches = informer.stats.watches
    fake.drop_watches()
    second = create_pod(cluster, "after")
    wait_for(lambda: informer.get(second) is not None, 5, "pod created after the drop not seen")
    assert informer.stats.watches > watches
    assert informer.stats.lists == 1, "a plain reconnect must not relist"
    assert informer.keys() == server_truth(cluster)


def test_compaction_while_away_relists_and_delivers_the_missed_delete(
    cluster: ApiUnderTest, informer: Informer, recorder: Recorder
) -> None:
    fake = cluster.require_fake("compacts history and fails watches")
    keep, gone = create_pod(cluster, "keep"), create_pod(cluster, "gone")
    wait_for(lambda: informer.keys() == {keep, gone}, 5, "pods not seen")
    fake.fail_next(1_000_000, 500, verb="watch")
    fake.drop_watches()
    wait_for(lambda: informer.stats.reconnects >= 1, 5, "informer did not try to reconnect")
    delete_now(cluster, "gone")
    fake.compact()
    fake.reset_faults()
    wait_for(lambda: recorder.saw(DELETED, gone), 10, "delete missed while away not delivered")
    assert informer.keys() == server_truth(cluster) == {keep}
    assert informer.stats.expired >= 1
    assert informer.stats.relists >= 1


def test_server_errors_back_off_then_watch_again_from_the_same_version(
    cluster: ApiUnderTest, informer: Informer
) -> None:
    fake = cluster.require_fake("fails requests with 500 and 429")
    fake.fail_next(3, 500, verb="watch")
    fake.fail_next(2, 429, verb="watch")
    fake.drop_watches()
    key = create_pod(cluster, "during-errors")
    wait_for(lambda: informer.get(key) is not None, 10, "pod not seen after the errors")
    assert informer.stats.reconnects >= 5
    assert informer.stats.lists == 1, "errors on watch are retried without relisting"
    assert informer.keys() == server_truth(cluster)


def test_frozen_server_is_noticed_by_the_read_timeout(
    cluster: ApiUnderTest, informer: Informer
) -> None:
    fake = cluster.require_fake("freezes like a half-open link")
    reconnects = informer.stats.reconnects
    fake.freeze()
    try:
        wait_for(
            lambda: informer.stats.reconnects > reconnects,
            FAST_TIMEOUTS.read * 4,
            "a silent watch was not given up after the read timeout",
        )
    finally:
        fake.unfreeze()
    key = create_pod(cluster, "after-freeze")
    wait_for(lambda: informer.get(key) is not None, 10, "pod not seen after the freeze")
    assert informer.keys() == server_truth(cluster)


def test_a_silent_watch_is_watched_again_at_once_however_often(
    agent_api: client.ApiClient, cluster: ApiUnderTest, recorder: Recorder
) -> None:
    """Silence is not a failure (an idle resource gets no bookmark from kube-apiserver before
    its cache has seen an event): the backoff for errors (here 2 s, doubling) never grows, so
    the next pod is seen at once."""
    fake = cluster.require_fake("freezes like a half-open link")
    informer = Informer(
        pods_on_node(agent_api, cluster.node_name),
        recorder,
        timeouts=FAST_TIMEOUTS,
        backoff=Backoff(initial=2.0, cap=30.0),
        supervisor=Supervisor(),
    ).start()
    try:
        wait_for(informer.synced.is_set, 5, "informer did not list")
        fake.freeze()
        try:
            wait_for(
                lambda: informer.stats.reconnects >= 4,
                FAST_TIMEOUTS.read * 4 + 2.5,
                "four silent watches in a row, each watched again at once",
            )
        finally:
            fake.unfreeze()
        key = create_pod(cluster, "after-silence")
        wait_for(lambda: informer.get(key) is not None, FAST_TIMEOUTS.read + 1.5, "seen at once")
    finally:
        informer.stop()


def test_stop_returns_promptly_while_a_watch_is_open(
    cluster: ApiUnderTest, agent_api: client.ApiClient
) -> None:
    inf = Informer(
        pods_on_node(agent_api, cluster.node_name),
        timeouts=WatchTimeouts(),
        supervisor=Supervisor(),
    ).start()
    wait_for(inf.synced.is_set, 5, "informer did not list")
    wait_for(lambda: inf.stats.watches >= 1, 5, "no watch opened")
    stopping = threading.Thread(target=inf.stop, kwargs={"timeout": 10})
    stopping.start()
    stopping.join(3)
    assert not stopping.is_alive(), "stop() hung on an open watch"


def test_a_list_the_server_refuses_is_said_so_and_never_synced(cluster: ApiUnderTest) -> None:
    """Node credentials may not list EndpointSlices: whoever waits for that first list (a new
    pod's service-proxy set-up) learns it was refused rather than wait out a grace period."""
    from kubelet_sim.kube.watches import all_endpoint_slices

    api = connect(cluster.require_node_credentials()).api  # skips where the cluster gives none
    refused = Informer(
        all_endpoint_slices(api),
        backoff=fast_backoff(),
        node=cluster.node_name,
        supervisor=Supervisor(),
    )
    refused.start()
    try:
        wait_for(refused.refused.is_set, 10, "the refusal noticed")
        assert not refused.synced.is_set()
        assert refused.answered.is_set()  # what a waiter waits on
    finally:
        refused.stop()
