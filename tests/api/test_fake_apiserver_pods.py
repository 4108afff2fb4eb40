"""Pod semantics: defaulting, validation, status isolation, patches, binding, deletion.

These run unchanged on the fake and on a real cluster (KUBELET_SIM_TEST_KUBECONFIG).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes.client import ApiException, V1DeleteOptions, V1Preconditions

from tests.cluster import NO_SCHEDULER, ApiUnderTest, pod_body

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
T0 = "2026-01-01T00:00:00Z"


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _bind(cluster: ApiUnderTest, name: str, node: str | None = None) -> Any:
    """POST a Binding; the server answers a Status, which the client can't parse as V1Binding."""
    body = {
        "metadata": {"name": name},
        "target": {"kind": "Node", "apiVersion": "v1", "name": node or cluster.node_name},
    }
    response = cluster.core.create_namespaced_binding(
        cluster.namespace, body, _preload_content=False
    )
    return json.loads(response.data)


def _bound_pod(cluster: ApiUnderTest, name: str, **spec: Any) -> Any:
    return cluster.core.create_namespaced_pod(
        cluster.namespace, pod_body(name, nodeName=cluster.node_name, **spec)
    )


def test_pod_defaults(cluster: ApiUnderTest) -> None:
    pod = cluster.core.create_namespaced_pod(
        cluster.namespace,
        pod_body("p", image="busybox:1.36", containers=[
            {"name": "main", "image": "busybox:1.36", "ports": [{"containerPort": 80}]},
            {"name": "latest", "image": "busybox:latest"},
            {"name": "untagged", "image": "registry.local:5000/team/busybox"},
            {"name": "digest", "image": "busybox@sha256:" + "a" * 64},
        ]),
    )  # fmt: skip
    spec, meta = pod.spec, pod.metadata
    assert meta.generation in (None, 1)  # pods have a generation from v1.33 on
    assert (spec.restart_policy, spec.termination_grace_period_seconds, spec.dns_policy) == (
        "Always",
        30,
        "ClusterFirst",
    )
    assert (spec.scheduler_name, spec.enable_service_links, spec.priority) == (
        "default-scheduler",
        True,
        0,
    )
    assert spec.preemption_policy == "PreemptLowerPriority"
    if cluster.service_account_admission() is None:  # the admission plugin's, not defaults'
        assert (spec.service_account_name, spec.service_account) == ("default", "default")
    assert spec.security_context is not None
    tolerations = {(t.key, t.operator, t.effect, t.toleration_seconds) for t in spec.tolerations}
    assert tolerations == {
        ("node.kubernetes.io/not-ready", "Exists", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "Exists", "NoExecute", 300),
    }
    policies = {c.name: c.image_pull_policy for c in spec.containers}
    assert policies == {
        "main": "IfNotPresent",
        "latest": "Always",
        "untagged": "Always",
        "digest": "IfNotPresent",
    }
    main = spec.containers[0]
    assert (main.termination_message_path, main.termination_message_policy) == (
        "/dev/termination-log",
        "File",
    )
    assert main.ports[0].protocol == "TCP"
    assert pod.status.phase == "Pending"
    assert pod.status.qos_class == "BestEffort"
    assert not pod.status.conditions


def test_service_account_volume(cluster: ApiUnderTest) -> None:
    cluster.require_service_account_admission()
    pod = cluster.core.create_namespaced_pod(cluster.namespace, pod_body("p"))
    [volume] = pod.spec.volumes
    assert re.fullmatch(r"kube-api-access-[a-z0-9]{5}", volume.name)
    sources = volume.projected.sources
    assert sources[0].service_account_token.expiration_seconds == 3607
    assert sources[0].service_account_token.path == "token"
    assert sources[1].config_map.name == "kube-root-ca.crt"
    assert [(i.key, i.path) for i in sources[1].config_map.items] == [("ca.crt", "ca.crt")]
    assert sources[2].downward_api.items[0].field_ref.field_path == "metadata.namespace"
    [mount] = pod.spec.containers[0].volume_mounts
    assert (mount.name, mount.mount_path, mount.read_only) == (volume.name, SA_PATH, True)
    no_token = cluster.core.create_namespaced_pod(
        cluster.namespace, pod_body("q", automountServiceAccountToken=False)
    )
    assert not no_token.spec.volumes
    assert not no_token.spec.containers[0].volume_mounts


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({}, "BestEffort"),
        ({"requests": {"cpu": "100m"}}, "Burstable"),
        ({"limits": {"cpu": "500m", "memory": "64Mi"}}, "Guaranteed"),
        (
            {
                "requests": {"cpu": "0.5", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "67108864"},
            },
            "Guaranteed",
        ),
        (
            {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "Burstable",
        ),
    ],
)
def test_qos_class(cluster: ApiUnderTest, resources: dict[str, Any], qos: str) -> None:
    body = pod_body("p")
    body["spec"]["containers"][0]["resources"] = resources
    pod = cluster.core.create_namespaced_pod(cluster.namespace, body)
    assert pod.status.qos_class == qos
    if "limits" in resources and "requests" not in resources:
        assert pod.spec.containers[0].resources.requests == resources["limits"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": []}, 'Pod "p" is invalid: spec.containers: Required value'),
        (
            {"containers": [{"name": "a", "image": ""}]},
            'Pod "p" is invalid: spec.containers[0].image: Required value',
        ),
        (
            {"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]},
            'Pod "p" is invalid: spec.containers[1].name: Duplicate value: "a"',
        ),
    ],
)
def test_pod_validation(cluster: ApiUnderTest, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_pod(
            cluster.namespace, {"metadata": {"name": "p"}, "spec": spec}
        )
    body = _status(err.value)
    assert err.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"] == message
    assert body["details"]["kind"] == "Pod"
    assert body["details"]["causes"]


def test_pod_spec_update_is_mostly_forbidden(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_pod(ns, pod_body("p"))
    image = cluster.core.patch_namespaced_pod(
        "p", ns, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    assert image.spec.containers[0].image == "busybox:1.37"
    assert image.metadata.generation in (None, 2)  # pods have a generation from v1.33 on
    deadline = cluster.core.patch_namespaced_pod("p", ns, {"spec": {"activeDeadlineSeconds": 60}})
    assert deadline.spec.active_deadline_seconds == 60
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_pod("p", ns, {"spec": {"restartPolicy": "Never"}})
    body = _status(err.value)
    assert err.value.status == 422
    fields = (
        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`"
    )
    if image.metadata.generation is None:  # v1.24 (pods have a generation from v1.33 on)
        fields = fields.replace(",", ", ")
    assert body["message"].startswith(
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
        + fields
    )


def test_status_subresource_and_main_resource_are_isolated(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_pod(ns, pod_body("p", nodeName=cluster.node_name))
    main = cluster.core.patch_namespaced_pod(
        "p", ns, {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Running"}}
    )
    assert main.status.phase == "Pending"
    assert main.metadata.labels == {"a": "b"}
    status = cluster.core.patch_namespaced_pod_status(
        "p",
        ns,
        {
            "metadata": {"labels": {"c": "d"}},
            "spec": {"nodeName": "elsewhere"},
            "status": {"phase": "Running"},
        },
    )
    assert status.status.phase == "Running"
    assert status.spec.node_name == cluster.node_name
    # Labels written through pods/status: v1.24 keeps them, newer servers ignore them.
    pod = cluster.core.read_namespaced_pod_status("p", ns)
    pod.status.message = "hello"
    replaced = cluster.core.replace_namespaced_pod_status("p", ns, pod)
    assert replaced.status.message == "hello"
    assert replaced.status.qos_class == "BestEffort"


def test_noop_patch_keeps_resource_version(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    pod = cluster.core.create_namespaced_pod(ns, pod_body("p", nodeName=cluster.node_name))
    same = cluster.core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Pending"}})
    assert same.metadata.resource_version == pod.metadata.resource_version


def test_strategic_merge_of_conditions_and_container_statuses(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    _bound_pod(cluster, "p")
    first = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": T0},
                {"type": "Initialized", "status": "True", "lastTransitionTime": T0},
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": False,
                    "restartCount": 0,
                    "image": "busybox:1.36",
                    "imageID": "",
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        }
    }  # fmt: skip
    cluster.core.patch_namespaced_pod_status("p", ns, first, _content_type=STRATEGIC)
    second = {
        "status": {
            "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "main", "ready": True, "state": {"running": {}}}],
        }
    }  # fmt: skip
    pod = cluster.core.patch_namespaced_pod_status("p", ns, second, _content_type=STRATEGIC)
    assert [(c.type, c.status) for c in pod.status.conditions] == [
        ("Initialized", "True"),
        ("Ready", "True"),
    ]
    [cs] = pod.status.container_statuses  # no patch strategy: replaced whole, not merged by name
    assert cs.ready
    assert cs.image == ""
    assert cs.state.waiting is None
    assert cs.state.running
    raw = json.loads(cluster.core.read_namespaced_pod_status("p", ns, _preload_content=False).data)
    assert not any(k.startswith("$") for k in raw["status"])
    dropped = {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}
    pod = cluster.core.patch_namespaced_pod_status("p", ns, dropped, _content_type=STRATEGIC)
    assert [c.type for c in pod.status.conditions] == ["Initialized"]


def test_strategic_merge_lists_without_key_are_replaced(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_pod(ns, pod_body("p"))
    pod = cluster.core.patch_namespaced_pod(
        "p", ns, {"metadata": {"finalizers": ["example.com/a"]}}, _content_type=STRATEGIC
    )
    pod = cluster.core.patch_namespaced_pod(
        "p", ns, {"metadata": {"finalizers": ["example.com/b"]}}, _content_type=STRATEGIC
    )
    assert pod.metadata.finalizers == ["example.com/b", "example.com/a"]  # the patch's first
    pod = cluster.core.patch_namespaced_pod(
        "p",
        ns,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/b"]}},
        _content_type=STRATEGIC,
    )
    assert not pod.metadata.finalizers
    cluster.core.create_node({"metadata": {"name": cluster.node_name}})
    taint = {"key": "a", "value": "1", "effect": "NoSchedule"}
    cluster.core.patch_node(
        cluster.node_name, {"spec": {"taints": [taint]}}, _content_type=STRATEGIC
    )
    other = {"key": "b", "value": "2", "effect": "NoSchedule"}
    node = cluster.core.patch_node(
        cluster.node_name, {"spec": {"taints": [other]}}, _content_type=STRATEGIC
    )
    assert [t.key for t in node.spec.taints] == ["b"]


def test_merge_and_json_patch(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}}
    )
    cm = cluster.core.patch_namespaced_config_map(
        "cm", ns, {"metadata": {"labels": {"a": None, "c": "3"}}}, _content_type=MERGE
    )
    assert cm.metadata.labels == {"b": "2", "c": "3"}
    ops = [
        {"op": "test", "path": "/data/x", "value": "1"},
        {"op": "add", "path": "/data/y", "value": "2"},
        {"op": "replace", "path": "/data/x", "value": "9"},
        {"op": "copy", "from": "/data/y", "path": "/data/z"},
        {"op": "move", "from": "/data/z", "path": "/data/w"},
        {"op": "remove", "path": "/metadata/labels/b"},
        {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "n"},
    ]
    cm = cluster.core.patch_namespaced_config_map("cm", ns, ops, _content_type=JSON_PATCH)
    assert cm.data == {"x": "9", "y": "2", "w": "2"}
    assert cm.metadata.labels == {"c": "3", "app.kubernetes.io/name": "n"}
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map(
            "cm", ns, [{"op": "test", "path": "/data/x", "value": "0"}], _content_type=JSON_PATCH
        )
    assert err.value.status == 422


def test_patch_preconditions_and_missing_object(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cm = cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map(
            "cm",
            ns,
            {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}, "data": {"a": "1"}},
        )
    body = _status(err.value)
    assert err.value.status == 422, "a uid in a patch is validated as an immutable field"
    assert body["message"] == (
        'ConfigMap "cm" is invalid: metadata.uid: Invalid value: '
        '"00000000-0000-0000-0000-000000000000": field is immutable'
    )
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map(
            "cm", ns, {"metadata": {"resourceVersion": "1"}, "data": {"a": "1"}}
        )
    assert err.value.status == 409
    ok = cluster.core.patch_namespaced_config_map(
        "cm",
        ns,
        {
            "metadata": {"uid": cm.metadata.uid, "resourceVersion": cm.metadata.resource_version},
            "data": {"a": "1"},
        },
    )
    assert ok.data == {"a": "1"}
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map("nope", ns, {"data": {"a": "1"}})
    assert err.value.status == 404


def test_unsupported_patch_type_is_415(cluster: ApiUnderTest) -> None:
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map(
            "cm", cluster.namespace, {"data": {}}, _content_type="application/xml+json"
        )
    assert err.value.status == 415


def test_binding(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    # A scheduler of our own, so that a real cluster's default-scheduler leaves the pod to us.
    cluster.core.create_namespaced_pod(ns, pod_body("p", schedulerName=NO_SCHEDULER))
    assert _bind(cluster, "p")["status"] == "Success"
    pod = cluster.core.read_namespaced_pod("p", ns)
    assert pod.spec.node_name == cluster.node_name
    [cond] = pod.status.conditions
    assert (cond.type, cond.status, cond.last_probe_time) == ("PodScheduled", "True", None)
    assert cond.last_transition_time is not None
    with pytest.raises(ApiException) as err:
        _bind(cluster, "p", "other-node")
    assert err.value.status == 409
    assert (
        f'pod p is already assigned to node "{cluster.node_name}"' in _status(err.value)["message"]
    )


def test_pod_created_with_node_name_has_no_scheduled_condition(cluster: ApiUnderTest) -> None:
    pod = _bound_pod(cluster, "p")
    assert pod.spec.node_name == cluster.node_name
    assert not pod.status.conditions


def test_graceful_deletion_of_bound_pod(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    pod = _bound_pod(cluster, "p", terminationGracePeriodSeconds=20)
    deleted = cluster.core.delete_namespaced_pod("p", ns)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 20
    assert int(deleted.metadata.resource_version) > int(pod.metadata.resource_version)
    still = cluster.core.read_namespaced_pod("p", ns)
    assert still.metadata.deletion_grace_period_seconds == 20
    longer = cluster.core.delete_namespaced_pod(
        "p", ns, body=V1DeleteOptions(grace_period_seconds=60)
    )
    assert longer.metadata.deletion_grace_period_seconds == 20
    shorter = cluster.core.delete_namespaced_pod(
        "p", ns, body=V1DeleteOptions(grace_period_seconds=5)
    )
    assert shorter.metadata.deletion_grace_period_seconds == 5
    cluster.core.delete_namespaced_pod("p", ns, body=V1DeleteOptions(grace_period_seconds=0))
    with pytest.raises(ApiException) as err:
        cluster.core.read_namespaced_pod("p", ns)
    assert err.value.status == 404


@pytest.mark.parametrize("case", ["unbound", "terminal", "grace0"])
def test_immediate_pod_deletion(cluster: ApiUnderTest, case: str) -> None:
    ns = cluster.namespace
    if case == "unbound":  # and left so: no scheduler binds it to a node of the cluster's
        cluster.core.create_namespaced_pod(ns, pod_body("p", schedulerName=NO_SCHEDULER))
        options = None
    else:
        _bound_pod(cluster, "p")
        options = V1DeleteOptions(grace_period_seconds=0) if case == "grace0" else None
        if case == "terminal":
            cluster.core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Succeeded"}})
    deleted = cluster.core.delete_namespaced_pod("p", ns, body=options)
    assert deleted.metadata.name == "p"
    with pytest.raises(ApiException) as err:
        cluster.core.read_namespaced_pod("p", ns)
    assert err.value.status == 404


def test_delete_preconditions(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    pod = cluster.core.create_namespaced_pod(ns, pod_body("p"))
    wrong = V1DeleteOptions(
        preconditions=V1Preconditions(uid="00000000-0000-0000-0000-000000000000")
    )
    with pytest.raises(ApiException) as err:
        cluster.core.delete_namespaced_pod("p", ns, body=wrong)
    assert err.value.status == 409
    assert _status(err.value)["message"] == (
        'Operation cannot be fulfilled on Pod "p": the UID in the precondition '
        "(00000000-0000-0000-0000-000000000000) does not match the UID in record "
        f"({pod.metadata.uid}). The object might have been deleted and then recreated"
    )
    right = V1DeleteOptions(
        preconditions=V1Preconditions(uid=pod.metadata.uid), propagation_policy="Background"
    )
    cluster.core.delete_namespaced_pod("p", ns, body=right)


def test_finalizers_hold_deletion(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}}
    )
    cluster.core.delete_namespaced_config_map("cm", ns)
    held = cluster.core.read_namespaced_config_map("cm", ns)
    assert held.metadata.deletion_timestamp is not None
    cluster.core.patch_namespaced_config_map(
        "cm", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as err:
        cluster.core.read_namespaced_config_map("cm", ns)
    assert err.value.status == 404


def test_order_directive_on_a_list_without_merge_key_is_never_a_silent_success(
    cluster: ApiUnderTest,
) -> None:
    """The patch the agent once sent: a real server fails on it (v1.24 panics and drops the
    connection), so the fake must fail too."""
    from urllib3.exceptions import HTTPError

    _bound_pod(cluster, "p")
    body = {
        "status": {
            "$setElementOrder/containerStatuses": [{"name": "main"}],
            "containerStatuses": [{"name": "main", "ready": True}],
        }
    }
    with pytest.raises((ApiException, HTTPError)) as err:
        cluster.core.patch_namespaced_pod_status(
            "p", cluster.namespace, body, _content_type=STRATEGIC
        )
    if isinstance(err.value, ApiException):
        assert err.value.status >= 500


def test_unknown_status_fields_are_dropped_but_their_order_directive_fails(
    cluster: ApiUnderTest,
) -> None:
    """What an older server does with a newer kubelet's field (v1.24 and `hostIPs`)."""
    ns = cluster.namespace
    _bound_pod(cluster, "p")
    unknown = {"status": {"phase": "Running", "notAField": [{"ip": "10.0.0.1"}]}}
    pod = cluster.core.patch_namespaced_pod_status("p", ns, unknown, _content_type=STRATEGIC)
    assert pod.status.phase == "Running"
    raw = json.loads(cluster.core.read_namespaced_pod_status("p", ns, _preload_content=False).data)
    assert "notAField" not in raw["status"]
    ordered = {"status": {**unknown["status"], "$setElementOrder/notAField": [{"ip": "10.0.0.1"}]}}
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_pod_status("p", ns, ordered, _content_type=STRATEGIC)
    assert err.value.status == 500
    assert _status(err.value)["message"] == (
        'unable to find api field in struct PodStatus for the json field "notAField"'
    )


def test_pod_ips_are_validated_and_pod_ip_is_authoritative(cluster: ApiUnderTest) -> None:
    ns = cluster.namespace
    _bound_pod(cluster, "p")
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_pod_status("p", ns, {"status": {"podIP": "not-an-ip"}})
    assert err.value.status == 422
    assert _status(err.value)["message"] == (
        'Pod "p" is invalid: status.podIPs[0]: Invalid value: "not-an-ip": must be a valid IP '
        "address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    )
    body = {"status": {"podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.1"}]}}
    pod = cluster.core.patch_namespaced_pod_status("p", ns, body, _content_type=STRATEGIC)
    assert (pod.status.pod_ip, [i.ip for i in pod.status.pod_ips]) == ("10.0.0.2", ["10.0.0.2"])
