"""The contract between the fake API server and a real one: same requests, same answers.

Runs in the real-API pass: each scenario sends the same requests (every shape of request the
agent sends: status patches, list and watch with the parameters it uses, deletes with
preconditions, leases, events, node status) to the real server of the session and to a fresh
in-process fake, and compares the answers after removing what is allowed to differ (uids,
resourceVersions, timestamps, generated names). A difference fails the test unless KNOWN_GAPS
names it with a reason.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.rest import ApiError, request_json
from tests.cluster import ApiUnderTest, api_mode, server_has_field
from tests.fakeapi import FakeApiServer, openapi
from tests.manifests import pod_manifest

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
T0 = "2026-01-01T00:00:00Z"

# Values that differ between any two servers (or runs) by nature.
VOLATILE = {
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
    "firstTimestamp",
    "lastTimestamp",
    "startTime",
}

# Known gap: the fake keeps no managedFields (server-side apply bookkeeping nothing here reads).
IGNORED = {"managedFields"}

# Known, reasoned differences: (scenario, path in the answer) → why it is acceptable.
KNOWN_GAPS: dict[tuple[str, str], str] = {
    (
        "order directive on a list without merge key",
        "transport",
    ): "v1.24 panics and drops the connection; the fake answers 500 (both fail, never succeed)",
}


@dataclass
class Answer:
    code: int
    body: Any


def _call(
    api: Any, method: str, path: str, body: Any = None, ct: str = "application/json"
) -> Answer:
    try:
        return Answer(200, request_json(api, method, path, body, content_type=ct))
    except ApiError as exc:
        return Answer(exc.status, {"reason": exc.reason, "message": exc.message})
    except Exception as exc:  # a dropped connection: the server failed on the request
        return Answer(599, {"transport": type(exc).__name__})


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_IN_RECORD = re.compile(r"in record \(\d+\)")
# The v1.34.9 server here is OpenShift's fork (../shared/kube-bin/README.md): its ServiceAccount
# admission adds this ConfigMap to every kube-api-access volume (its controller-manager
# publishes it in each namespace). Upstream v1.34 does neither, so the fake does not.
SERVICE_CA = "openshift-service-ca.crt"
# Written by controllers of the real cluster at their own pace (the TTL controller, the node
# lifecycle controller's taints); the fake's stand-ins act at once.
CONTROLLER_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl"}
CONTROLLER_TAINTS = "node.kubernetes.io/"


def _normalize(value: Any) -> Any:
    """Null and absent are the same to a client; volatile values become placeholders."""
    if isinstance(value, dict):
        kept = {
            k: ("<volatile>" if k in VOLATILE else _normalize(v))
            for k, v in value.items()
            if k in VOLATILE or (v is not None and k not in CONTROLLER_ANNOTATIONS)
            if k not in IGNORED
        }
        return {k: v for k, v in kept.items() if v not in ({}, [])}  # omitempty
    if isinstance(value, list):
        return [
            _normalize(v)
            for v in value
            if not (isinstance(v, dict) and str(v.get("key", "")).startswith(CONTROLLER_TAINTS))
            if not (isinstance(v, dict) and (v.get("configMap") or {}).get("name") == SERVICE_CA)
        ]
    if isinstance(value, str):
        if value.startswith("kube-api-access-"):
            return "kube-api-access-<random>"
        return _IN_RECORD.sub("in record (<rv>)", _UUID.sub("<uuid>", value))
    return value


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: real={a.get(key)!r} fake={b.get(key)!r}")
            else:
                out += _diff(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _diff(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path or '.'}: real={a!r} fake={b!r}"]


class Side:
    """One server, addressed with admin credentials, in a namespace of the same name."""

    def __init__(
        self,
        name: str,
        kubeconfig: str,
        namespace: str,
        node_kubeconfig: Callable[[str], str],
    ) -> None:
        self.name = name
        self.api = connect(kubeconfig).api
        self.ns = namespace
        self._node_kubeconfig = node_kubeconfig

    def as_node(self, node: str) -> Side:
        """The same server, with a kubelet's credentials for `node` (the factory skips where
        the server gives none)."""
        return Side(self.name, self._node_kubeconfig(node), self.ns, self._node_kubeconfig)

    def __call__(
        self, method: str, path: str, body: Any = None, ct: str = "application/json"
    ) -> Answer:
        return _call(self.api, method, path.format(ns=self.ns), body, ct)

    def watch(
        self,
        path: str,
        rv: str,
        until: Callable[[list[dict[str, Any]]], bool],
        selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Events of a watch from `rv`, read until `until(events)` or 10 s."""
        from kubernetes.client import ApiClient

        assert isinstance(self.api, ApiClient)
        request = self.api.param_serialize(
            method="GET",
            resource_path=path.format(ns=self.ns),
            query_params=[
                ("watch", "true"),
                ("resourceVersion", rv),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", "10"),
                *([("fieldSelector", selector)] if selector else []),
            ],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request, _request_timeout=(5, 12))
        if response.status != 200:  # refused before any event: an error Status
            return [{"type": "NOT-A-WATCH", "object": json.loads(response.read())}]
        events: list[dict[str, Any]] = []
        buffer = b""
        deadline = time.monotonic() + 10
        try:
            for chunk in response.response.stream(1024, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        if "type" not in event:  # not a watch stream: an error Status
                            return [{"type": "NOT-A-WATCH", "object": event}]
                        if event["type"] != "BOOKMARK":
                            events.append(event)
                if until(events) or time.monotonic() > deadline:
                    break
        finally:
            response.response.close()
        return events


@pytest.fixture(scope="module")
def fake_server(
    tmp_path_factory: pytest.TempPathFactory, cluster_session: Any
) -> Iterator[tuple[FakeApiServer, Path]]:
    """A fake with the types of the real server it is compared with: v1.24's against a server
    without sidecars, else v1.34's (the default)."""
    fake = FakeApiServer(schema=_fake_schema_for(connect(cluster_session.kubeconfig).api)).start()
    path = fake.write_kubeconfig(tmp_path_factory.mktemp("contract") / "kubeconfig")
    try:
        yield fake, path
    finally:
        fake.stop()


def _fake_schema_for(api: Any) -> str:
    """The fake's schema nearest the server: v1.24's if it lacks sidecars (the v1.24 binary
    reports no version), else v1.34's."""
    newer = server_has_field(api, "io.k8s.api.core.v1.Container", "restartPolicy")
    return "v1.34" if newer else "v1.24"


def test_the_fakes_schema_is_the_real_servers(cluster: ApiUnderTest) -> None:
    """The fake's copy of the schema is what a real server of its version serves today (the
    definitions the fake keeps, descriptions left out): a new capture shows up here."""
    if api_mode() != "real":
        pytest.skip("compares the fake with a real API server: runs in the real-API pass")
    name = _fake_schema_for(cluster.api)
    version = request_json(cluster.api, "GET", "/version")
    if name == "v1.34" and version.get("minor") != "34":
        pytest.skip(f"the fake has v1.34's and v1.24's schemas; this server is {version}")
    served = request_json(cluster.api, "GET", "/openapi/v2", timeout=(5, 60))["definitions"]
    assert openapi.trimmed(served) == openapi.by_name(name).definitions


@pytest.fixture
def sides(cluster: ApiUnderTest, fake_server: tuple[FakeApiServer, Path]) -> tuple[Side, Side]:
    if api_mode() != "real":
        pytest.skip("compares the fake with a real API server: runs in the real-API pass")
    server, path = fake_server

    def real_node(node: str) -> str:
        path = cluster.session.node_kubeconfig(node)
        if path == cluster.kubeconfig:
            pytest.skip(f"needs node credentials: {cluster.session.no_node_credentials}")
        return path

    real = Side("real", cluster.kubeconfig, cluster.namespace, real_node)
    fake = Side(
        "fake",
        str(path),
        cluster.namespace,
        lambda node: str(
            server.write_kubeconfig(path.with_name(f"{node}.kubeconfig"), f"system:node:{node}")
        ),
    )
    fake("POST", "/api/v1/namespaces", {"metadata": {"name": cluster.namespace}})
    key = cluster.kubeconfig
    if key not in _ADMISSION:
        _ADMISSION[key] = _admission_differs(real, fake)
    if _ADMISSION[key]:
        pytest.skip(_ADMISSION[key])
    return real, fake


# Per real server: how its admission differs from the fake's (None: it does not).
_ADMISSION: dict[str, str | None] = {}


def _admission_differs(real: Side, fake: Side) -> str | None:
    """What the server's admission does to a pod and a token request, beside the fake's (which
    does what the tests' own control plane does): the ServiceAccount plugin's kube-api-access
    volume and mount, the default tolerations, a token's default audience (the issuer). A server
    set up otherwise answers every scenario otherwise; the contract is with the tests' own.
    One line saying the first difference, or None."""
    answers = {}
    for side in (real, fake):
        pod = _pod("ks-contract-admission", "admission-probe")
        made = side("POST", "/api/v1/namespaces/{ns}/pods", pod)
        side("DELETE", "/api/v1/namespaces/{ns}/pods/admission-probe", {"gracePeriodSeconds": 0})
        spec = made.body.get("spec") or {} if isinstance(made.body, dict) else {}
        token = side("POST", "/api/v1/namespaces/{ns}/serviceaccounts/default/token", {"spec": {}})
        answers[side.name] = {
            "pod volumes": spec.get("volumes"),
            "pod volume mounts": (spec.get("containers") or [{}])[0].get("volumeMounts"),
            "pod tolerations": spec.get("tolerations"),
            "token audiences": (token.body.get("spec") or {}).get("audiences")
            if isinstance(token.body, dict)
            else token.code,
        }
    for what in answers["real"]:
        differences = _diff(_normalize(answers["real"][what]), _normalize(answers["fake"][what]))
        if differences:
            return (
                "the server's admission is not the tests' own control plane's, which the fake "
                f"follows ({what}: {differences[0]})"
            )
    return None


def _pod(node: str, name: str = "p") -> dict[str, Any]:
    c = {"name": "c", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}
    return pod_manifest(name, [c], labels={"app": "x"}, nodeName=node)


def _first_status(node_ip: str) -> dict[str, Any]:
    """The agent's first status write for a pod with one container."""
    return {
        "metadata": {"uid": "<uid>"},
        "status": {
            "phase": "Pending",
            "hostIP": node_ip,
            "startTime": T0,
            "conditions": [
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": T0,
                },
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": T0,
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [c]",
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": T0,
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [c]",
                },
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": False,
                    "restartCount": 0,
                    "image": "busybox:1.36",
                    "imageID": "",
                    "started": False,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                },
            ],
        },
    }


def _second_status() -> dict[str, Any]:
    """The two-way patch once the container runs: merge lists by key, containerStatuses whole."""
    running = {"running": {"startedAt": T0}}
    return {
        "metadata": {"uid": "<uid>"},
        "status": {
            "phase": "Running",
            "podIP": "172.17.0.5",
            "podIPs": [{"ip": "172.17.0.5"}],
            "$setElementOrder/conditions": [
                {"type": "Initialized"},
                {"type": "Ready"},
                {"type": "ContainersReady"},
            ],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": None, "message": None},
                {"type": "ContainersReady", "status": "True", "reason": None, "message": None},
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox:1.36",
                    "imageID": "docker-pullable://busybox@sha256:" + "a" * 64,
                    "containerID": "docker://" + "b" * 64,
                    "started": True,
                    "state": running,
                },
            ],
        },
    }


def _with_uid(body: dict[str, Any], uid: str) -> dict[str, Any]:
    return json.loads(json.dumps(body).replace("<uid>", uid))


Scenario = Callable[[Side, str], list[tuple[str, Answer]]]


def scenario_pod_status_writes(s: Side, node: str) -> list[tuple[str, Answer]]:
    pods = "/api/v1/namespaces/{ns}/pods"
    created = s("POST", pods, _pod(node))
    uid = created.body["metadata"]["uid"]
    first = s("PATCH", pods + "/p/status", _with_uid(_first_status("10.1.2.3"), uid), SMP)
    second = s("PATCH", pods + "/p/status", _with_uid(_second_status(), uid), SMP)
    unknown = s("PATCH", pods + "/p/status", {"status": {"notAField": [{"ip": "1.2.3.4"}]}}, SMP)
    wrong_uid = s(
        "PATCH",
        pods + "/p/status",
        _with_uid(_second_status(), "0" * 8 + "-0000-0000-0000-" + "0" * 12),
        SMP,
    )
    return [
        ("create", created),
        ("first status", first),
        ("second status", second),
        ("unknown field", unknown),
        ("wrong uid", wrong_uid),
    ]


def scenario_order_directive(s: Side, node: str) -> list[tuple[str, Answer]]:
    pods = "/api/v1/namespaces/{ns}/pods"
    s("POST", pods, _pod(node))
    body = {
        "status": {
            "$setElementOrder/containerStatuses": [{"name": "c"}],
            "containerStatuses": [{"name": "c", "ready": True}],
        }
    }
    answer = s("PATCH", pods + "/p/status", body, SMP)
    failed = Answer(500 if answer.code >= 500 else answer.code, {"failed": answer.code >= 500})
    return [("order directive", failed), ("transport", answer)]


def scenario_deletes(s: Side, node: str) -> list[tuple[str, Answer]]:
    pods = "/api/v1/namespaces/{ns}/pods"
    created = s("POST", pods, _pod(node))
    rv, uid = created.body["metadata"]["resourceVersion"], created.body["metadata"]["uid"]
    wrong = {"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}
    results = [("wrong uid", s("DELETE", pods + "/p", wrong))]
    results.append(
        ("wrong rv", s("DELETE", pods + "/p", {"preconditions": {"resourceVersion": "1"}}))
    )
    results.append(("graceful", s("DELETE", pods + "/p", {})))
    final = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
    results.append(("final", s("DELETE", pods + "/p", final)))
    results.append(("gone", s("GET", pods + "/p")))
    events = s.watch(pods, rv, lambda e: any(x["type"] == "DELETED" for x in e))
    summary = [
        (e["type"], e["object"]["metadata"].get("deletionGracePeriodSeconds")) for e in events
    ]
    results.append(("watch", Answer(200, summary)))
    return results


def scenario_list_and_watch(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What the agent's informer does: list by node, watch from the list's RV."""
    pods = "/api/v1/namespaces/{ns}/pods"
    s("POST", pods, _pod(node, "mine"))
    s("POST", pods, _pod(node + "-other", "theirs"))
    listed = s("GET", pods + f"?fieldSelector=spec.nodeName%3D{node}")
    names = Answer(listed.code, [i["metadata"]["name"] for i in listed.body.get("items", [])])
    all_nodes = s("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}&resourceVersion=0")
    rv = listed.body["metadata"]["resourceVersion"]
    s("PATCH", pods + "/mine", {"metadata": {"labels": {"b": "c"}}}, MERGE)
    s("PATCH", pods + "/theirs", {"metadata": {"labels": {"b": "c"}}}, MERGE)
    events = s.watch(pods, rv, lambda e: len(e) >= 1, selector=f"spec.nodeName={node}")
    seen = [(e["type"], e["object"].get("metadata", e["object"]).get("name")) for e in events]
    bad_selector = s("GET", pods + "?fieldSelector=spec.notAField%3Dx")
    return [
        ("list", names),
        ("list all namespaces", Answer(all_nodes.code, len(all_nodes.body.get("items", [])))),
        ("watch", Answer(200, seen)),
        ("bad selector", bad_selector),
    ]


def scenario_lease_and_node(s: Side, node: str) -> list[tuple[str, Answer]]:
    leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    lease = {
        "metadata": {"name": node},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": 40,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }
    created = s("POST", leases, lease)
    bad = json.loads(json.dumps(created.body))
    bad["spec"]["renewTime"] = "2026-01-01T00:00:00Z"
    refused = s("PUT", leases + f"/{node}", bad)
    body = {
        "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": T0,
                    "lastTransitionTime": T0,
                }
            ],
            "capacity": {"cpu": "2", "pods": "110"},
            "allocatable": {"cpu": "2", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}],
        },
    }
    node_created = s("POST", "/api/v1/nodes", body)
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "lastHeartbeatTime": T0,
                    "lastTransitionTime": T0,
                }
            ],
            "addresses": [{"type": "Hostname", "address": node}],
        }
    }
    patched = s("PATCH", f"/api/v1/nodes/{node}/status", status, SMP)
    replace = {
        "status": {
            "addresses": [{"$patch": "replace"}, {"type": "InternalIP", "address": "10.9.9.9"}]
        }
    }
    replaced = s("PATCH", f"/api/v1/nodes/{node}/status", replace, SMP)
    s("DELETE", f"/api/v1/nodes/{node}")
    return [
        ("addresses replaced", replaced),
        ("lease", created),
        ("lease bad time", refused),
        ("node", node_created),
        ("node status", patched),
    ]


def scenario_events(s: Side, node: str) -> list[tuple[str, Answer]]:
    event = {
        "metadata": {"name": "p.1"},
        "involvedObject": {
            "kind": "Pod",
            "namespace": s.ns,
            "name": "p",
            "apiVersion": "v1",
            "fieldPath": "spec.containers{c}",
        },
        "reason": "Started",
        "message": "Started container c",
        "type": "Normal",
        "source": {"component": "kubelet", "host": node},
        "count": 1,
        "firstTimestamp": T0,
        "lastTimestamp": T0,
    }
    events = "/api/v1/namespaces/{ns}/events"
    created = s("POST", events, event)
    patched = s("PATCH", events + "/p.1", {"count": 2, "lastTimestamp": T0}, SMP)
    return [("create", created), ("count", patched)]


def scenario_watch_edges(s: Side, node: str) -> list[tuple[str, Answer]]:
    """A watch from a resourceVersion the server has not reached yet, and a bad one."""
    pods = "/api/v1/namespaces/{ns}/pods"
    listed = s("GET", pods)
    future = str(int(listed.body["metadata"]["resourceVersion"]) + 1_000_000)
    started = time.monotonic()
    events = s.watch(pods, future, lambda e: len(e) >= 1)
    waited = time.monotonic() - started
    summary = [(e["type"], e["object"].get("code"), e["object"].get("reason")) for e in events]
    bad = s.watch(pods, "not-a-number", lambda e: len(e) >= 1)
    bad_summary = [(e["type"], e["object"].get("code"), e["object"].get("reason")) for e in bad]
    return [
        ("future rv", Answer(200, summary)),
        ("future rv waits", Answer(200, waited > 2)),
        ("bad rv", Answer(200, bad_summary)),
    ]


def scenario_token_request(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What the agent asks for a pod's projected service account token."""
    pods = "/api/v1/namespaces/{ns}/pods"
    pod = s("POST", pods, _pod(node)).body
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": 3607,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "p",
                "uid": pod["metadata"]["uid"],
            },
        },
    }
    answer = s("POST", "/api/v1/namespaces/{ns}/serviceaccounts/default/token", request)
    if answer.code == 200:
        status = answer.body.get("status", {})
        answer = Answer(
            200,
            {
                "kind": answer.body.get("kind"),
                "has token": bool(status.get("token")),
                "spec": answer.body.get("spec"),
            },
        )
    return [("token", answer)]


def scenario_node_credentials(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What the Node authorizer and NodeRestriction allow a kubelet, and what they refuse."""
    pods = "/api/v1/namespaces/{ns}/pods"
    mine = _pod(node, "mine")
    mine["spec"]["volumes"] = [{"name": "v", "configMap": {"name": "used"}}]
    s("POST", pods, mine)
    s("POST", pods, _pod(node + "-other", "theirs"))
    for name in ("used", "unused"):
        s("POST", "/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": name}})
    kubelet = s.as_node(node)
    node_body = {"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}}
    results = [
        ("register", kubelet("POST", "/api/v1/nodes", node_body)),
        ("register another", kubelet("POST", "/api/v1/nodes", {"metadata": {"name": "x" + node}})),
        ("list own pods", kubelet("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")),
        ("get used configmap", kubelet("GET", "/api/v1/namespaces/{ns}/configmaps/used")),
        (
            "watch used configmap",
            kubelet("GET", "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Dused"),
        ),
        ("get unused configmap", kubelet("GET", "/api/v1/namespaces/{ns}/configmaps/unused")),
        ("list configmaps", kubelet("GET", "/api/v1/namespaces/{ns}/configmaps")),
        ("own pod status", kubelet("PATCH", pods + "/mine/status", {"status": {}}, SMP)),
        ("other pod status", kubelet("PATCH", pods + "/theirs/status", {"status": {}}, SMP)),
        ("delete own node", kubelet("DELETE", f"/api/v1/nodes/{node}")),
        ("read namespace", kubelet("GET", "/api/v1/namespaces/{ns}")),
    ]
    s("DELETE", f"/api/v1/nodes/{node}")
    return [(step, _shape(answer)) for step, answer in results]


def _shape(answer: Answer) -> Answer:
    """A success by its kind (the objects are compared elsewhere), a refusal in full."""
    if answer.code == 200 and isinstance(answer.body, dict) and "kind" in answer.body:
        return Answer(200, answer.body["kind"])
    return answer


def scenario_status_validation(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What pods/status validation refuses: leaving `terminated` without a restart policy that
    allows it, a bad nominatedNodeName, a pod IP that is not one."""
    pods = "/api/v1/namespaces/{ns}/pods"
    results = []
    for policy in ("Never", "OnFailure", "Always"):
        for code in (0, 1):
            name = f"{policy.lower()}-{code}"
            body = _pod(node, name)
            body["spec"]["restartPolicy"] = policy
            s("POST", pods, body)
            state = {
                "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
            }
            ended = {
                "name": "c",
                "ready": False,
                "restartCount": 0,
                "image": "busybox:1.36",
                "imageID": "",
                "state": state,
            }
            s("PATCH", pods + f"/{name}/status", {"status": {"containerStatuses": [ended]}}, SMP)
            again = {**ended, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            answer = s(
                "PATCH", pods + f"/{name}/status", {"status": {"containerStatuses": [again]}}, SMP
            )
            results.append((f"{name} back to waiting", _shape(answer)))
    nominated = {"status": {"nominatedNodeName": "Not_A_Name"}}
    results.append(("nominatedNodeName", s("PATCH", pods + "/always-0/status", nominated, SMP)))
    bad_ip = {"status": {"podIPs": [{"ip": "10.0.0.300"}]}}
    results.append(("pod IP", s("PATCH", pods + "/always-0/status", bad_ip, SMP)))
    return results


def scenario_reviews(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What the kubelet API's gate asks, with node credentials: who a token is (TokenReview),
    and whether a user may reach nodes/proxy (SubjectAccessReview)."""
    kubelet = s.as_node(node)
    issued = s("POST", "/api/v1/namespaces/{ns}/serviceaccounts/default/token", {"spec": {}})
    token = (issued.body.get("status") or {}).get("token", "") if issued.code < 300 else ""
    results = []
    for step, candidate in (("unknown token", "not-a-token"), ("service account token", token)):
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": candidate}}  # fmt: skip
        answer = kubelet("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
        status = answer.body.get("status") or {} if isinstance(answer.body, dict) else {}
        user = status.get("user") or {}
        shown = {"authenticated": status.get("authenticated"), "username": user.get("username"),
                 "groups": user.get("groups")}  # fmt: skip
        results.append((step, Answer(answer.code, shown)))
    for step, user, groups, sub in (
        ("admin on nodes/proxy", "kube-apiserver-kubelet-client", ["system:masters"], "proxy"),
        ("account on nodes/proxy", "system:serviceaccount:x:a", ["system:authenticated"], "proxy"),
        ("node on nodes/proxy", f"system:node:{node}", ["system:nodes"], "proxy"),
        ("node on its node", f"system:node:{node}", ["system:nodes"], ""),
    ):  # fmt: skip
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [*groups, "system:authenticated"],
                "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": sub,
                                       "name": node, "version": "v1"},
            },
        }  # fmt: skip
        answer = kubelet("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        status = answer.body.get("status") or {} if isinstance(answer.body, dict) else {}
        results.append((step, Answer(answer.code, {"allowed": bool(status.get("allowed"))})))
    return results


def scenario_services(s: Side, node: str) -> list[tuple[str, Answer]]:
    """What the agent's service informer reads: a Service as stored (ClusterIP masked, the
    ranges may differ), a headless one, an invalid one, and the master Service's shape."""
    services = "/api/v1/namespaces/{ns}/services"
    body = {"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}],
                                                   "selector": {"app": "web"}}}  # fmt: skip
    made = s("POST", services, body)
    headless = {
        "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "ports": [{"port": 7}]},
    }
    bad = {"metadata": {"name": "bad"}, "spec": {}}
    master = s("GET", "/api/v1/namespaces/default/services/kubernetes")

    def masked(answer: Answer) -> Answer:
        if not isinstance(answer.body, dict) or "spec" not in answer.body:
            return answer
        spec = dict(answer.body["spec"])
        for key in ("clusterIP", "clusterIPs"):
            spec[key] = "set" if spec.get(key) not in (None, "None", ["None"]) else spec.get(key)
        spec.pop("ports", None) if answer.body["metadata"]["name"] == "kubernetes" else None
        return Answer(answer.code, {"spec": spec, "status": answer.body.get("status")})

    return [
        ("create", masked(made)),
        ("headless", masked(s("POST", services, headless))),
        ("invalid", _shape(s("POST", services, bad))),
        ("master", masked(master)),
    ]


def scenario_quantities(s: Side, node: str) -> list[tuple[str, Answer]]:
    """Quantities come back in the server's canonical form (pod resources, node capacity)."""
    pod = _pod(node)
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "0.5", "memory": "1024Mi", "ephemeral-storage": "1000"},
        "limits": {"cpu": "1500m", "memory": "1.5Gi", "ephemeral-storage": "2e3"},
    }
    made = s("POST", "/api/v1/namespaces/{ns}/pods", pod)
    resources = Answer(made.code, made.body["spec"]["containers"][0].get("resources"))
    status = {"capacity": {"cpu": "4000m", "memory": "7237632Ki", "pods": "110"}}
    node_body = {"metadata": {"name": node}, "status": status}
    created = s("POST", "/api/v1/nodes", node_body)
    capacity = Answer(created.code, (created.body.get("status") or {}).get("capacity"))
    s("DELETE", f"/api/v1/nodes/{node}")
    return [("pod resources", resources), ("node capacity", capacity)]


def scenario_ephemeral_containers(s: Side, node: str) -> list[tuple[str, Answer]]:
    """pods/ephemeralcontainers as `kubectl debug` uses it: an ephemeral container added (and
    defaulted), then the changes the server refuses: changing, removing, reusing a name."""
    pods = "/api/v1/namespaces/{ns}/pods"
    s("POST", pods, _pod(node, "e"))
    path = pods + "/e/ephemeralcontainers"
    debugger = {"name": "debugger", "image": "busybox:1.36", "command": ["sh"], "stdin": True,
                "targetContainerName": "c"}  # fmt: skip
    added = s("PATCH", path, {"spec": {"ephemeralContainers": [debugger]}}, SMP)
    shown = (added.body.get("spec") or {}).get("ephemeralContainers") if added.code == 200 else 0
    changed = {**debugger, "image": "busybox:1.37"}
    current = s("GET", pods + "/e").body
    replaced = {**current, "spec": {**current["spec"], "ephemeralContainers": [changed]}}
    removed = {**current, "spec": {**current["spec"], "ephemeralContainers": []}}
    twice = {**debugger, "name": "c"}
    refused = s("PUT", path, replaced)  # go-cmp's diff after the first line varies by design
    message = str((refused.body or {}).get("message", "")).split("\n", 1)[0]
    return [
        ("add", Answer(added.code, shown)),
        ("change", Answer(refused.code, {**refused.body, "message": message})),
        ("remove", s("PUT", path, removed)),
        ("name of a container", s("PATCH", path, {"spec": {"ephemeralContainers": [twice]}}, SMP)),
    ]


def scenario_empty_lists(s: Side, node: str) -> list[tuple[str, Answer]]:
    """An empty list comes back as Go encodes a nil slice: null without `omitempty`, absent
    with it. A client that iterates `names` or `endpoints` must expect null (compared raw here,
    since the other scenarios treat null, absent and empty alike)."""
    images = [{"names": [], "sizeBytes": 1}, {"names": ["a:1"], "sizeBytes": 2}]
    node_body = {"metadata": {"name": node}, "status": {"images": images}}
    made = s("POST", "/api/v1/nodes", node_body)
    s("DELETE", f"/api/v1/nodes/{node}")
    slice_body = {"metadata": {"name": "empty"}, "addressType": "IPv4", "endpoints": [],
                  "ports": []}  # fmt: skip
    sliced = s("POST", "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", slice_body)
    pod = _pod(node)
    pod["spec"]["containers"][0]["args"] = []
    pod["spec"]["imagePullSecrets"] = []
    created = s("POST", "/api/v1/namespaces/{ns}/pods", pod)
    container = created.body["spec"]["containers"][0] if created.code == 201 else {}

    def raw(code: int, value: Any) -> Answer:
        return Answer(code, json.dumps(value, sort_keys=True))

    status = made.body.get("status") or {}
    fields = {k: sliced.body.get(k, "absent") for k in ("endpoints", "ports")}
    spec = created.body.get("spec", {})
    pod_lists = [container.get("args", "absent"), spec.get("imagePullSecrets", "absent")]
    return [
        ("node images", raw(made.code, status.get("images"))),
        ("slice", raw(sliced.code, fields)),
        ("pod", raw(created.code, pod_lists)),
    ]


SCENARIOS: dict[str, Scenario] = {
    "empty lists": scenario_empty_lists,
    "ephemeral containers": scenario_ephemeral_containers,
    "quantities": scenario_quantities,
    "services": scenario_services,
    "reviews": scenario_reviews,
    "status validation": scenario_status_validation,
    "node credentials": scenario_node_credentials,
    "watch edges": scenario_watch_edges,
    "token request": scenario_token_request,
    "pod status writes": scenario_pod_status_writes,
    "order directive on a list without merge key": scenario_order_directive,
    "deletes": scenario_deletes,
    "list and watch": scenario_list_and_watch,
    "lease and node": scenario_lease_and_node,
    "events": scenario_events,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fake_answers_as_the_real_server(sides: tuple[Side, Side], scenario: str) -> None:
    real, fake = sides
    node = f"ks-contract-{secrets.token_hex(3)}"
    results: dict[str, list[tuple[str, Answer]]] = {}
    raised: list[BaseException] = []

    def run(side: Side) -> None:
        try:
            results[side.name] = SCENARIOS[scenario](side, node)
        except BaseException as exc:  # a skip or a failure in the thread: the test's own
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(side,)) for side in (real, fake)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    skips = [e for e in raised if isinstance(e, pytest.skip.Exception)]
    if skips:
        pytest.skip(str(skips[0]))
    if raised:
        raise raised[0]
    problems = []
    for (step, a), (_, b) in zip(results["real"], results["fake"], strict=True):
        if KNOWN_GAPS.get((scenario, step)):
            continue
        if a.code != b.code:
            problems.append(f"{step}: HTTP real={a.code} fake={b.code} ({a.body} / {b.body})")
            continue
        for line in _diff(_normalize(a.body), _normalize(b.body)):
            problems.append(f"{step}: {line}")
    assert not problems, "\n".join(problems)
