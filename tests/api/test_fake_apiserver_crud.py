"""CRUD, errors, resourceVersions, selectors and the simple kinds, through the official client.

These run unchanged on the fake and on a real cluster (KUBELET_SIM_TEST_KUBECONFIG).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes.client import ApiException

from kubelet_sim.kube.rest import ApiError, request_json
from tests.cluster import NO_SCHEDULER, ApiUnderTest, pod_body, wait_for


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _raw_get(cluster: ApiUnderTest, path: str, **query: str) -> dict[str, Any]:
    response = cluster.api.call_api(
        *cluster.api.param_serialize(
            "GET", path, query_params=list(query.items()), auth_settings=["BearerToken"]
        )
    )
    response.read()
    return json.loads(response.data)


def test_create_get_update_delete_configmap(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    created = cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    meta = created.metadata
    assert created.kind == "ConfigMap"
    assert created.api_version == "v1"
    assert re.fullmatch(r"[0-9a-f-]{36}", meta.uid)
    assert meta.creation_timestamp is not None
    assert meta.namespace == ns
    assert meta.generation is None
    got = cluster.core.read_namespaced_config_map("cm", ns)
    assert got.data == {"a": "1"}
    assert got.metadata.resource_version == meta.resource_version
    got.data["b"] = "2"
    updated = cluster.core.replace_namespaced_config_map("cm", ns, got)
    assert int(updated.metadata.resource_version) > int(meta.resource_version)
    status = cluster.core.delete_namespaced_config_map("cm", ns)
    assert status["status"] == "Success"
    assert status["details"]["name"] == "cm"
    with pytest.raises(ApiException) as err:
        cluster.core.read_namespaced_config_map("cm", ns)
    assert err.value.status == 404


def test_not_found_status_body(cluster: ApiUnderTest) -> None:
    with pytest.raises(ApiException) as err:
        cluster.core.read_namespaced_pod("missing", cluster.namespace)
    body = _status(err.value)
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["reason"] == "NotFound"
    assert body["code"] == 404
    assert body["message"] == 'pods "missing" not found'
    assert body["details"] == {"name": "missing", "kind": "pods"}


def test_already_exists(cluster: ApiUnderTest) -> None:
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "dup"}})
    body = _status(err.value)
    assert err.value.status == 409
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "dup" already exists'


def test_stale_update_conflicts_and_unconditional_update_wins(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cm = cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm"}, "data": {"v": "1"}}
    )
    cluster.core.patch_namespaced_config_map("cm", ns, {"data": {"v": "2"}})
    cm.data = {"v": "3"}
    with pytest.raises(ApiException) as err:
        cluster.core.replace_namespaced_config_map("cm", ns, cm)
    body = _status(err.value)
    assert err.value.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "cm": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    cm.metadata.resource_version = None
    assert cluster.core.replace_namespaced_config_map("cm", ns, cm).data == {"v": "3"}


def test_generate_name(cluster: ApiUnderTest) -> None:
    cm = cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"generateName": "gen-"}}
    )
    assert re.fullmatch(r"gen-[a-z0-9]{5}", cm.metadata.name)
    assert cm.metadata.generate_name == "gen-"


def test_create_in_missing_namespace(cluster: ApiUnderTest) -> None:
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map("ks-absent-ns", {"metadata": {"name": "x"}})
    body = _status(err.value)
    assert err.value.status == 404
    assert body["message"] == 'namespaces "ks-absent-ns" not found'


def test_invalid_name_is_422(cluster: ApiUnderTest) -> None:
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map(
            cluster.namespace, {"metadata": {"name": "Bad_Name"}}
        )
    body = _status(err.value)
    assert err.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value'
    )
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_resource_versions_increase_globally_and_list_carries_current(
    cluster: ApiUnderTest,
) -> None:
    ns = cluster.namespace
    a = cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    b = cluster.core.create_namespaced_secret(
        ns, {"metadata": {"name": "b"}, "string_data": {"k": "v"}}
    )
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    listing = cluster.core.list_namespaced_config_map(ns)
    assert int(listing.metadata.resource_version) >= int(b.metadata.resource_version)
    raw = _raw_get(cluster, f"/api/v1/namespaces/{ns}/configmaps")
    assert raw["kind"] == "ConfigMapList"
    assert all("kind" not in item and "apiVersion" not in item for item in raw["items"])


def test_list_exact_resource_version_sees_the_past(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    rv = cluster.core.list_namespaced_config_map(ns).metadata.resource_version
    cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    past = cluster.core.list_namespaced_config_map(
        ns, resource_version=rv, resource_version_match="Exact"
    )
    assert [i.metadata.name for i in past.items if i.metadata.name in "ab"] == ["a"]
    assert past.metadata.resource_version == rv
    now = cluster.core.list_namespaced_config_map(ns, resource_version="0")
    assert {"a", "b"} <= {i.metadata.name for i in now.items}


def test_list_exact_too_old_is_410(cluster: ApiUnderTest) -> None:
    fake = cluster.require_fake("compact() forgets history on demand")
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "a"}})
    rv = fake.current_rv()
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "b"}})
    fake.compact()
    with pytest.raises(ApiException) as err:
        cluster.core.list_namespaced_config_map(
            cluster.namespace, resource_version=str(rv), resource_version_match="Exact"
        )
    assert err.value.status == 410
    assert _status(err.value)["reason"] == "Expired"


def test_label_selectors(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    for name, labels in (("a", {"app": "web", "tier": "fe"}), ("b", {"app": "db"}), ("c", {})):
        cluster.core.create_namespaced_config_map(
            ns, {"metadata": {"name": name, "labels": labels}}
        )

    def names(selector: str) -> list[str]:
        return [
            i.metadata.name
            for i in cluster.core.list_namespaced_config_map(ns, label_selector=selector).items
        ]

    assert names("app=web") == ["a"]
    assert names("app==web") == ["a"]
    assert "a" not in names("app!=web")
    assert "c" in names("app!=web")
    assert names("app in (web,db)") == ["a", "b"]
    assert "a" not in names("app notin (web)")
    assert "b" in names("app notin (web)")
    assert names("tier") == ["a"]
    assert "a" not in names("!tier")
    assert "b" in names("!tier")
    assert names("app=web,tier=fe") == ["a"]
    assert names("app=web,tier=be") == []


def test_field_selectors(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    unbound = pod_body("p1", restart_policy="Never", schedulerName=NO_SCHEDULER)
    cluster.core.create_namespaced_pod(ns, unbound)  # stays so: no scheduler binds it
    cluster.core.create_namespaced_pod(
        ns, pod_body("p2", restartPolicy="Never", nodeName=cluster.node_name)
    )

    def names(selector: str) -> list[str]:
        return [
            i.metadata.name
            for i in cluster.core.list_namespaced_pod(ns, field_selector=selector).items
        ]

    assert names("metadata.name=p1") == ["p1"]
    assert names(f"spec.nodeName={cluster.node_name}") == ["p2"]
    assert names("spec.nodeName=") == ["p1"]
    assert names("spec.nodeName!=,status.phase=Pending") == ["p2"]
    assert names("metadata.name==p2") == ["p2"]
    all_ns = cluster.core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert sorted(i.metadata.name for i in all_ns.items) == ["p1", "p2"]


def test_unsupported_field_selector_is_400(cluster: ApiUnderTest) -> None:
    with pytest.raises(ApiException) as err:
        cluster.core.list_namespaced_pod(cluster.namespace, field_selector="spec.foo=bar")
    body = _status(err.value)
    assert err.value.status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == "field label not supported: spec.foo"


def test_secret_defaults(cluster: ApiUnderTest) -> None:
    secret = cluster.core.create_namespaced_secret(
        cluster.namespace, {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert secret.type == "Opaque"
    assert secret.data == {"k": "dg=="}
    listed = cluster.core.list_namespaced_secret(cluster.namespace, field_selector="type=Opaque")
    assert "s" in [i.metadata.name for i in listed.items]


def test_namespaces(cluster: ApiUnderTest) -> None:
    ns = cluster.core.read_namespace(cluster.namespace)
    assert ns.status.phase == "Active"
    assert ns.spec.finalizers == ["kubernetes"]
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == cluster.namespace
    names = {n.metadata.name for n in cluster.core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease", cluster.namespace} <= names
    active = cluster.core.list_namespace(field_selector="status.phase=Active")
    assert cluster.namespace in {n.metadata.name for n in active.items}


def _namespace_gone(cluster: ApiUnderTest, name: str) -> bool:
    try:
        cluster.core.read_namespace(name)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_a_namespace_removes_its_contents(cluster: ApiUnderTest) -> None:
    extra = f"{cluster.namespace}-x"

    cluster.core.create_namespace({"metadata": {"name": extra}})
    try:
        cluster.core.create_namespaced_config_map(extra, {"metadata": {"name": "cm"}})
        cluster.core.delete_namespace(extra, _preload_content=False)
        wait_for(lambda: _namespace_gone(cluster, extra), 60, f"namespace {extra} to go away")
        assert cluster.core.list_namespaced_config_map(extra).items == []
    finally:
        if not _namespace_gone(cluster, extra):
            cluster.core.delete_namespace(extra, _preload_content=False)


def test_nodes_and_status_subresource(cluster: ApiUnderTest) -> None:
    node = cluster.core.create_node({"metadata": {"name": cluster.node_name, "labels": {"k": "v"}}})
    assert node.kind == "Node"
    assert node.metadata.namespace is None
    status = {
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    }
    patched = cluster.core.patch_node_status(cluster.node_name, status)
    assert [c.type for c in patched.status.conditions] == ["Ready"]
    ignored = cluster.core.patch_node(
        cluster.node_name, {"status": {"conditions": []}, "spec": {"unschedulable": True}}
    )
    assert [c.type for c in ignored.status.conditions] == ["Ready"]
    assert ignored.spec.unschedulable
    found = cluster.core.list_node(
        field_selector=f"metadata.name={cluster.node_name},spec.unschedulable=true"
    )
    assert [n.metadata.name for n in found.items] == [cluster.node_name]


def test_leases(cluster: ApiUnderTest) -> None:
    ns, co = cluster.namespace, cluster.coordination
    body = {
        "metadata": {"name": cluster.node_name},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 40},
    }
    lease = co.create_namespaced_lease(ns, body)
    assert lease.kind == "Lease"
    assert lease.api_version == "coordination.k8s.io/v1"
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{cluster.node_name}"
    raw = cluster.api.sanitize_for_serialization(lease)
    raw["spec"]["renewTime"] = "2026-01-01T00:00:00+00:00"  # what the client's models send
    with pytest.raises(ApiError) as bad:
        request_json(cluster.api, "PUT", path, raw)
    assert (bad.value.status, bad.value.reason) == (400, "BadRequest")
    assert bad.value.message.startswith(
        'Lease in version "v1" cannot be handled as a Lease: parsing time '
        '"2026-01-01T00:00:00+00:00" as "2006-01-02T15:04:05.000000Z07:00"'
    )
    raw["spec"]["renewTime"] = "2026-01-01T00:00:00.000000Z"  # MicroTime: exactly 6 digits
    renewed = request_json(cluster.api, "PUT", path, raw)
    assert renewed["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"
    assert int(renewed["metadata"]["resourceVersion"]) > int(lease.metadata.resource_version)
    with pytest.raises(ApiError) as err:
        request_json(cluster.api, "PUT", path, raw)
    assert err.value.status == 409
    assert err.value.message.startswith(
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{cluster.node_name}"'
    )
    patched = co.patch_namespaced_lease(cluster.node_name, ns, {"spec": {"holderIdentity": "you"}})
    assert patched.spec.holder_identity == "you"
    assert patched.spec.lease_duration_seconds == 40
    listed = co.list_namespaced_lease(ns, field_selector=f"metadata.name={cluster.node_name}")
    assert len(listed.items) == 1
    co.delete_namespaced_lease(cluster.node_name, ns)
    with pytest.raises(ApiException) as err:
        co.read_namespaced_lease(cluster.node_name, ns)
    assert (
        _status(err.value)["message"]
        == f'leases.coordination.k8s.io "{cluster.node_name}" not found'
    )


def test_events(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    event = {
        "metadata": {"name": "ev1"},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"},
        "reason": "Started",
        "message": "Started container",
        "type": "Normal",
        "source": {"component": "kubelet-sim", "host": cluster.node_name},
        "count": 1,
    }
    created = cluster.core.create_namespaced_event(ns, event)
    assert created.reason == "Started"
    cluster.core.patch_namespaced_event("ev1", ns, {"count": 2})
    found = cluster.core.list_namespaced_event(
        ns,
        field_selector="involvedObject.name=p,involvedObject.kind=Pod,reason=Started,source=kubelet-sim,type=Normal",
    )
    assert [(e.metadata.name, e.count) for e in found.items] == [("ev1", 2)]


def test_discovery_and_version(cluster: ApiUnderTest) -> None:
    from kubernetes.client import VersionApi

    version = VersionApi(cluster.api).get_code()
    assert version.git_version.startswith("v")  # `major` is "" on a build stamped with no version
    assert "v1" in _raw_get(cluster, "/api")["versions"]
    groups = {g["name"] for g in _raw_get(cluster, "/apis")["groups"]}
    assert "coordination.k8s.io" in groups


def test_deleting_a_namespace_waits_for_the_nodes_final_delete_of_bound_pods(
    cluster: ApiUnderTest,
) -> None:
    """The namespace controller deletes pods gracefully: a pod bound to a node stays
    Terminating (and its namespace with it) until the node's kubelet deletes it for good."""
    from kubernetes.client import V1DeleteOptions

    extra = f"{cluster.namespace}-y"
    cluster.core.create_namespace({"metadata": {"name": extra}})
    wait_for(lambda: cluster.core.list_namespaced_service_account(extra).items, 30, "default SA")
    cluster.core.create_namespaced_pod(extra, pod_body("p", nodeName=cluster.node_name))
    cluster.core.delete_namespace(extra, _preload_content=False)

    def terminating() -> Any:
        pod = cluster.core.read_namespaced_pod("p", extra)
        return pod if pod.metadata.deletion_timestamp else None

    pod = wait_for(terminating, 30, "the pod to be deleted gracefully")
    assert pod.metadata.deletion_grace_period_seconds == 30
    assert cluster.core.read_namespace(extra).status.phase == "Terminating"
    final = V1DeleteOptions(grace_period_seconds=0, preconditions={"uid": pod.metadata.uid})
    cluster.core.delete_namespaced_pod("p", extra, body=final)

    wait_for(
        lambda: _namespace_gone(cluster, extra), 60, f"namespace {extra} to go once its pod is gone"
    )
