"""ConfigMap and Secret watches live exactly as long as some pod on the node uses them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.informer import WatchTimeouts
from kubelet_sim.kube.object_watches import Ref, ReferencedObjectWatches
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from tests.cluster import ApiUnderTest, wait_for


@pytest.fixture
def changes() -> list[Ref]:
    return []


@pytest.fixture
def watches(cluster: ApiUnderTest, changes: list[Ref]) -> Iterator[ReferencedObjectWatches]:
    lock = threading.Lock()

    def on_change(ref: Ref) -> None:
        with lock:
            changes.append(ref)

    manager = ReferencedObjectWatches(
        connect(cluster.kubeconfig).api,
        on_change,
        timeouts=WatchTimeouts(server_min=20, server_max=30, read=5),
        backoff=lambda: Backoff(initial=0.05, cap=0.4),
        supervisor=Supervisor(),
    )
    yield manager
    manager.stop()


def test_watches_start_with_first_user_and_stop_with_last(
    cluster: ApiUnderTest, watches: ReferencedObjectWatches, changes: list[Ref]
) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="conf"), data={"k": "v1"})
    )
    cluster.core.create_namespaced_secret(
        ns, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"p": "x"})
    )
    conf, creds, absent = ("ConfigMap", ns, "conf"), ("Secret", ns, "creds"), ("Secret", ns, "no")

    watches.set_pod_references("pod-1", {conf, creds, absent})
    watches.set_pod_references("pod-2", {conf})
    assert watches.watched() == {conf, creds, absent}
    wait_for(lambda: all(watches.is_synced(r) for r in (conf, creds, absent)), 5, "not listed")
    assert watches.get(conf)["data"] == {"k": "v1"}  # type: ignore[index]
    assert watches.get(creds) is not None
    assert watches.get(absent) is None, "a missing object is known to be missing, not an error"

    cluster.core.patch_namespaced_config_map("conf", ns, {"data": {"k": "v2"}})
    wait_for(lambda: (watches.get(conf) or {}).get("data") == {"k": "v2"}, 5, "update not seen")
    assert conf in changes

    watches.forget_pod("pod-1")
    assert watches.watched() == {conf}, "still used by pod-2"
    watches.forget_pod("pod-2")
    assert watches.watched() == set()


def test_each_object_is_watched_by_name(
    cluster: ApiUnderTest, watches: ReferencedObjectWatches
) -> None:
    fake = cluster.require_fake("reads the request log")
    ns = cluster.namespace
    since = fake.requests()[-1].time if fake.requests() else 0.0
    watches.set_pod_references("pod-1", {("ConfigMap", ns, "one"), ("Secret", ns, "two")})
    wait_for(lambda: len(fake.requests(verb="watch", since=since)) >= 2, 5, "no watches opened")
    ours = [r for r in fake.requests(since=since) if r.user_agent.startswith("kubelet-sim/")]
    assert {(r.verb, r.resource) for r in ours} == {
        ("list", "configmaps"), ("watch", "configmaps"), ("list", "secrets"), ("watch", "secrets"),
    }  # fmt: skip
    for record in ours:
        assert record.namespace == ns, "one namespace, never all namespaces"
        assert "fieldSelector=metadata.name" in record.path, record.path


def test_idle_and_immutable_objects_are_not_watched_and_a_read_watches_again(
    cluster: ApiUnderTest,
) -> None:
    """The kubelet's limits on per-object watches: one nobody read for a while stops (its
    object is still known), the next read lists and watches again; an immutable one stops
    once read, for good."""
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="env"), data={"k": "v1"})
    )
    cluster.core.create_namespaced_config_map(
        ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="frozen"), data={"k": "v"}, immutable=True
        ),
    )
    env, frozen = ("ConfigMap", ns, "env"), ("ConfigMap", ns, "frozen")
    manager = ReferencedObjectWatches(
        connect(cluster.kubeconfig).api,
        lambda _ref: None,
        timeouts=WatchTimeouts(server_min=20, server_max=30, read=5),
        max_idle=1.0,
        recycle_period=0.2,
        supervisor=Supervisor(),
    )
    try:
        manager.set_pod_references("pod-1", {env, frozen})
        assert manager.wait_synced({env, frozen}, 5)
        assert manager.get(frozen) is not None
        wait_for(lambda: manager.active() == 1, 5, "the immutable object's watch to stop")
        wait_for(lambda: manager.active() == 0, 5, "the idle watch to stop")
        assert manager.watched() == {env, frozen}, "still used: known, just not watched"
        assert manager.wait_synced({env, frozen}, 0), "a stopped watch's object is known"

        cluster.core.patch_namespaced_config_map("env", ns, {"data": {"k": "v2"}})
        wait_for(
            lambda: (manager.get(env) or {}).get("data") == {"k": "v2"}, 10, "a read to list again"
        )
        assert manager.active() == 1
        assert manager.get(frozen) is not None
        assert manager.active() == 1, "an immutable object is never watched again"
    finally:
        manager.stop()


@pytest.mark.parametrize(("pool_size", "discards"), [(2, True), (32, False)])
def test_a_pool_sized_for_the_watches_keeps_their_connections(
    cluster: ApiUnderTest, caplog: pytest.LogCaptureFixture, pool_size: int, discards: bool
) -> None:
    """Watches that end (here every second) hand their connection back; a pool smaller than
    the watches throws it away with urllib3's "Connection pool is full" warning."""
    refs = {("ConfigMap", cluster.namespace, f"cm-{i}") for i in range(12)}
    manager = ReferencedObjectWatches(
        connect(cluster.kubeconfig).api,
        lambda _ref: None,
        timeouts=WatchTimeouts(server_min=1, server_max=1, read=5),
        pool_size=pool_size,
        supervisor=Supervisor(),
    )
    caplog.set_level("WARNING", logger="urllib3.connectionpool")
    try:
        for i, ref in enumerate(sorted(refs)):  # a pod each: every object gets a watch
            manager.set_pod_references(f"pod-{i}", [ref])
        assert manager.wait_synced(refs, 10)
        informers = [manager.informer(ref) for ref in refs]
        wait_for(
            lambda: all(i is not None and i.stats.watches >= 3 for i in informers),
            20,
            "every watch to end and start again twice",
        )
    finally:
        manager.stop()
    full = [r for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert bool(full) == discards, [r.getMessage() for r in full[:3]]


def test_past_a_pods_own_watches_its_objects_are_polled_on_one_thread(
    cluster: ApiUnderTest, changes: list[Ref]
) -> None:
    """Issue 26: a pod with many references costs a bounded number of threads and
    connections; what is past its watches is read by GET each poll period."""
    ns = cluster.namespace
    for i in range(37, 40):  # past the 4 watched ones (the first, in name order)
        cluster.core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i:02}"), data={"k": "1"})
        )
    refs = [("ConfigMap", ns, f"cm-{i:02}") for i in range(40)]
    before = _our_threads()
    manager = ReferencedObjectWatches(
        connect(cluster.kubeconfig).api,
        changes.append,
        timeouts=WatchTimeouts(server_min=20, server_max=30, read=5),
        watches_per_pod=4,
        poll_period=0.2,
        supervisor=Supervisor(),
    )
    try:
        manager.set_pod_references("pod-1", refs)
        assert len(manager.watched()) == 4
        assert len(manager.polled()) == 36
        assert manager.wait_synced(refs, 10), "every object answered once"
        assert len(_our_threads() - before) <= 4 + 2, "4 watches, a recycler, a poller"
        polled = sorted(manager.polled())
        existing = next(r for r in polled if r[2] == "cm-38")
        assert manager.get(existing)["data"] == {"k": "1"}  # type: ignore[index]
        assert manager.get(polled[0]) is None, "a missing object is known to be missing"
        changes.clear()
        cluster.core.patch_namespaced_config_map(existing[2], ns, {"data": {"k": "2"}})
        wait_for(lambda: existing in changes, 5, "the polled object's change")
        assert manager.get(existing)["data"] == {"k": "2"}  # type: ignore[index]
        manager.forget_pod("pod-1")
        assert manager.polled() == set()
        assert manager.watched() == set()
    finally:
        manager.stop()


def _our_threads() -> set[str]:
    """Threads of this process but the in-process fake API server's request handlers."""
    return {f"{t.name}/{t.ident}" for t in threading.enumerate() if "process_request" not in t.name}
