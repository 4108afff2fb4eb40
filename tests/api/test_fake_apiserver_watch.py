"""Watch semantics: initial state, resume from an RV, selector transitions, bookmarks, timeouts.

These run unchanged on the fake and on a real cluster, except the ones calling `require_fake`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.cluster import NO_SCHEDULER, ApiUnderTest, open_watch, pod_body

# Every namespace of a real cluster holds kube-root-ca.crt; watches select only ours.
OURS = "made-by=test"


def _cm(cluster: ApiUnderTest, name: str, **labels: str) -> Any:
    body = {"metadata": {"name": name, "labels": {"made-by": "test", **labels}}, "data": {"v": "1"}}
    return cluster.core.create_namespaced_config_map(cluster.namespace, body)


def _name(event: dict[str, Any]) -> str:
    name: str = event["object"]["metadata"].get("name", "")
    return name


def test_watch_from_empty_and_zero_rv_lists_current_objects_first(cluster: ApiUnderTest) -> None:
    _cm(cluster, "a")
    _cm(cluster, "b")
    for rv in ("", "0"):
        stream = open_watch(
            cluster.core.list_namespaced_config_map,
            cluster.namespace,
            resource_version=rv or None,
            label_selector=OURS,
        )
        try:
            first = stream.take(2)
            assert {(e["type"], _name(e)) for e in first} == {("ADDED", "a"), ("ADDED", "b")}
            assert first[0]["object"]["kind"] == "ConfigMap"
            assert first[0]["object"]["apiVersion"] == "v1"
            cluster.core.patch_namespaced_config_map(
                "a", cluster.namespace, {"data": {"v": rv or "x"}}
            )
            modified = stream.next()
            assert (modified["type"], _name(modified)) == ("MODIFIED", "a")
        finally:
            stream.close()


def test_watch_from_resource_version_replays_later_events(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    rv = _cm(cluster, "a").metadata.resource_version
    _cm(cluster, "b")
    cluster.core.patch_namespaced_config_map("a", ns, {"data": {"v": "2"}})
    cluster.core.delete_namespaced_config_map("b", ns)
    stream = open_watch(cluster.core.list_namespaced_config_map, ns, resource_version=rv)
    try:
        events = stream.take(3)
        assert [(e["type"], _name(e)) for e in events] == [
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "b"),
        ]
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert rvs == sorted(rvs)
        assert rvs[0] > int(rv)
        _cm(cluster, "c")
        assert (stream.next()["type"], _name(stream.seen[-1])) == ("ADDED", "c")
    finally:
        stream.close()


def test_selector_transitions_become_added_and_deleted(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    stream = open_watch(cluster.core.list_namespaced_config_map, ns, label_selector="app=web")
    try:
        cm = _cm(cluster, "a", app="db")
        cluster.core.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"app": "web"}}})
        added = stream.next()
        assert (added["type"], _name(added)) == ("ADDED", "a")
        cluster.core.patch_namespaced_config_map("a", ns, {"data": {"v": "2"}})
        assert stream.next()["type"] == "MODIFIED"
        moved = cluster.core.patch_namespaced_config_map(
            "a", ns, {"metadata": {"labels": {"app": "db"}}}
        )
        deleted = stream.next()
        assert (deleted["type"], _name(deleted)) == ("DELETED", "a")
        assert deleted["object"]["metadata"]["resourceVersion"] == moved.metadata.resource_version
        assert deleted["object"]["metadata"]["labels"] == {"made-by": "test", "app": "web"}
        assert int(moved.metadata.resource_version) > int(cm.metadata.resource_version)
    finally:
        stream.close()


def test_pod_watch_by_node_name_sees_binding_as_added(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    selector = f"spec.nodeName={cluster.node_name}"
    # Bound by the test alone: no scheduler of a real cluster takes it first.
    pod = cluster.core.create_namespaced_pod(ns, pod_body("p", schedulerName=NO_SCHEDULER))
    # From the pod's resourceVersion, as an informer watches from its list's: a watch from "now"
    # makes a v1.34 server wait for its watch cache, which with an etcd that cannot report
    # progress (Debian's 3.4.23) only an event moves, and answer 504 "Too large resource
    # version" after 3 s.
    stream = open_watch(
        cluster.core.list_pod_for_all_namespaces,
        field_selector=selector,
        resource_version=pod.metadata.resource_version,
    )
    try:
        body = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": cluster.node_name}}
        cluster.core.create_namespaced_binding(ns, body, _preload_content=False)
        added = stream.next()
        assert (added["type"], _name(added)) == ("ADDED", "p")
        assert added["object"]["spec"]["nodeName"] == cluster.node_name
    finally:
        stream.close()


def test_deleted_event_carries_last_state_with_new_rv(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    pod = cluster.core.create_namespaced_pod(ns, pod_body("p", nodeName=cluster.node_name))
    stream = open_watch(
        cluster.core.list_namespaced_pod, ns, resource_version=pod.metadata.resource_version
    )
    try:
        graceful = cluster.core.delete_namespaced_pod("p", ns)
        modified = stream.next()
        assert modified["type"] == "MODIFIED"
        assert modified["object"]["metadata"]["deletionTimestamp"]
        from kubernetes.client import V1DeleteOptions

        cluster.core.delete_namespaced_pod("p", ns, body=V1DeleteOptions(grace_period_seconds=0))
        shortened = stream.next()  # pod deletion is an update first, even with grace 0
        assert shortened["type"] == "MODIFIED"
        assert shortened["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
        deleted = stream.next()
        assert deleted["type"] == "DELETED"
        assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(
            graceful.metadata.resource_version
        )
        assert deleted["object"]["spec"]["nodeName"] == cluster.node_name
    finally:
        stream.close()


def test_bookmarks_only_when_asked(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("bookmark interval is 1 min on a real server")
    ns = cluster.namespace
    fake.bookmark_interval, old = 0.1, fake.bookmark_interval
    try:
        asked = open_watch(
            cluster.core.list_namespaced_pod, ns, allow_watch_bookmarks=True, timeout_seconds=2
        )
        silent = open_watch(cluster.core.list_namespaced_pod, ns, timeout_seconds=1)
        mark = asked.wait(lambda e: e["type"] == "BOOKMARK")
        obj = mark["object"]
        assert (obj["kind"], obj["apiVersion"], list(obj["metadata"])) == (
            "Pod",
            "v1",
            ["resourceVersion"],
        )
        assert int(obj["metadata"]["resourceVersion"]) <= fake.current_rv()
        assert silent.assert_ends(5) == []
        assert not any(e["type"] == "BOOKMARK" for e in silent.seen)
        asked.close()
    finally:
        fake.bookmark_interval = old


def test_timeout_seconds_closes_the_stream(cluster: ApiUnderTest) -> None:
    started = time.monotonic()
    stream = open_watch(
        cluster.core.list_namespaced_config_map, cluster.namespace, timeout_seconds=1
    )
    stream.assert_ends(10)
    assert stream.error is None
    assert time.monotonic() - started < 10


def test_resume_after_compaction_gets_410_error_event(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("compact() forgets history on demand")
    ns = cluster.namespace
    rv = _cm(cluster, "a").metadata.resource_version
    _cm(cluster, "b")
    fake.compact()
    stream = open_watch(cluster.core.list_namespaced_config_map, ns, resource_version=rv)
    error = stream.next()
    assert error["type"] == "ERROR"
    status = error["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"] == f"too old resource version: {rv} ({fake.current_rv()})"
    assert stream.assert_ends() == []


def test_history_window_is_bounded(cluster: ApiUnderTest, tmp_path: Path) -> None:
    cluster.require_fake("needs a server with a tiny history window")
    from kubernetes import client, config

    from tests.fakeapi import FakeApiServer

    with FakeApiServer(history_size=3) as small:
        api = config.new_client_from_config(
            config_file=str(small.write_kubeconfig(tmp_path / "kc"))
        )
        core = client.CoreV1Api(api)
        rvs = [
            core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"c{i}"}}
            ).metadata.resource_version
            for i in range(5)
        ]
        old = open_watch(core.list_namespaced_config_map, "default", resource_version=rvs[0])
        assert old.next()["type"] == "ERROR"
        recent = open_watch(core.list_namespaced_config_map, "default", resource_version=rvs[2])
        assert [_name(e) for e in recent.take(2)] == ["c3", "c4"]
        recent.close()
        api.close()
