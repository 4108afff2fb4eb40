"""Fault hooks, the request log and direct access of the fake API server (fake only)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.cluster import ApiUnderTest, open_watch, pod_body, wait_for
from tests.fakeapi import FakeApiServer

pytestmark = pytest.mark.fake_only


def _raw_get(fake: FakeApiServer, path: str, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_drop_watches_cuts_open_streams(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("drop_watches")
    stream = open_watch(cluster.core.list_namespaced_pod, cluster.namespace)
    wait_for(
        lambda: fake.requests(verb="watch", namespace=cluster.namespace), 5, "the watch request"
    )
    fake.drop_watches()
    stream.assert_ends(5)
    assert cluster.core.list_namespaced_pod(cluster.namespace).items == []


def test_fail_next_with_status_bodies(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("fail_next")
    ns = cluster.namespace
    fake.fail_next(1, 500)
    with pytest.raises(ApiException) as err:
        cluster.core.list_namespaced_pod(ns)
    body = json.loads(err.value.body)
    assert err.value.status == 500
    assert (body["kind"], body["reason"]) == ("Status", "InternalError")
    fake.fail_next(1, 429)
    status, raw = _raw_get(fake, f"/api/v1/namespaces/{ns}/pods", timeout=5)
    assert status == 429
    assert json.loads(raw)["details"] == {"retryAfterSeconds": 1}
    since = time.time()
    fake.fail_next(1, 429)
    cluster.core.list_namespaced_pod(ns)  # urllib3 honours Retry-After on 429 and retries
    assert [r.code for r in fake.requests(verb="list", namespace=ns, since=since)] == [429, 200]
    fake.fail_next(2, 503, verb="create", resource="configmaps")
    cluster.core.list_namespaced_pod(ns)  # not matched by the filter
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
        assert err.value.status == 503
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    fake.fail_next(1, 500, predicate=lambda r: r.name == "special")
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
    with pytest.raises(ApiException):
        cluster.core.read_namespaced_config_map("special", ns)


def test_latency(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("set_latency")
    fake.set_latency(0.2)
    started = time.monotonic()
    cluster.core.list_namespaced_pod(cluster.namespace)
    assert time.monotonic() - started >= 0.2
    fake.set_latency(0)


def test_freeze_holds_requests_and_silences_watches(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("freeze")
    ns = cluster.namespace
    # kube-root-ca.crt is in every namespace (as on a real cluster); watch only what we make.
    stream = open_watch(
        cluster.core.list_namespaced_config_map,
        ns,
        allow_watch_bookmarks=True,
        label_selector="made-by=test",
    )
    wait_for(lambda: fake.requests(verb="watch", namespace=ns), 5, "the watch request")
    fake.freeze()
    fake.registry.create(
        fake.registry_resource("configmaps"),
        ns,
        {"metadata": {"name": "during", "labels": {"made-by": "test"}}},
    )
    result: dict[str, Any] = {}

    def held_request() -> None:
        try:
            result["answer"] = _raw_get(fake, f"/api/v1/namespaces/{ns}/configmaps", timeout=10)
        except (http.client.HTTPException, OSError) as exc:
            result["error"] = exc

    thread = threading.Thread(target=held_request)
    thread.start()
    time.sleep(0.3)  # a frozen server must stay silent; nothing to poll for
    assert thread.is_alive()
    assert stream.events.empty()
    fake.unfreeze()
    thread.join(5)
    assert "answer" not in result
    assert isinstance(result["error"], http.client.RemoteDisconnected | ConnectionError)
    stream.assert_ends(5)
    assert not any(e["object"]["metadata"].get("name") == "during" for e in stream.seen)
    names = [c.metadata.name for c in cluster.core.list_namespaced_config_map(ns).items]
    assert "during" in names


def test_compact_then_resume(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("compact")
    rv = fake.current_rv()
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "a"}})
    fake.compact()
    stream = open_watch(
        cluster.core.list_namespaced_config_map, cluster.namespace, resource_version=str(rv)
    )
    assert stream.next()["object"]["code"] == 410
    fresh = open_watch(
        cluster.core.list_namespaced_config_map,
        cluster.namespace,
        resource_version=str(fake.current_rv()),
    )
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "b"}})
    assert fresh.next()["object"]["metadata"]["name"] == "b"
    fresh.close()


def test_request_log(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("request log")
    ns = cluster.namespace
    since = time.time()
    cluster.core.create_namespaced_pod(ns, pod_body("p"))
    cluster.core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Pending"}})
    with pytest.raises(ApiException):
        cluster.core.read_namespaced_pod("absent", ns)
    records = fake.requests(resource="pods", namespace=ns, since=since)
    assert [(r.verb, r.subresource, r.code) for r in records] == [
        ("create", "", 201),
        ("patch", "status", 200),
        ("get", "", 404),
    ]
    assert records[0].user == "admin"
    assert records[0].user_agent
    assert fake.count("patch", "pods", "status") >= 1
    assert fake.requests(verb="get", name="absent")[-1].code == 404


def test_direct_access(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("in-process access")
    pod = cluster.core.create_namespaced_pod(cluster.namespace, pod_body("p"))
    stored = fake.get_object("pods", cluster.namespace, "p")
    assert stored is not None
    assert stored["metadata"]["uid"] == pod.metadata.uid
    stored["metadata"]["name"] = "mutated"
    assert fake.get_object("pods", cluster.namespace, "p") is not None
    assert fake.current_rv() >= int(pod.metadata.resource_version)
    assert fake.get_object("pods", cluster.namespace, "nope") is None


def test_stop_is_fast_and_cuts_watches(tmp_path: Path) -> None:
    from kubernetes import client, config

    server = FakeApiServer().start()
    api = config.new_client_from_config(
        config_file=str(server.write_kubeconfig(tmp_path / "kc", user="bob", token="t0k"))
    )
    core = client.CoreV1Api(api)
    stream = open_watch(core.list_namespaced_pod, "default")
    wait_for(lambda: server.requests(verb="watch"), 5, "the watch request")
    assert server.requests(verb="watch")[0].user == "bob"
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2
    stream.assert_ends(5)
    api.close()
    kubeconfig = json.loads((tmp_path / "kc").read_text())
    assert kubeconfig["users"][0]["user"]["token"] == "t0k"
