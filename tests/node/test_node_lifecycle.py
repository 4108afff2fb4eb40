"""Node registration, Lease heartbeat and node status against the API server (fake or real)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kubelet_sim.formats.quantity import value
from kubelet_sim.kube.client import connect
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError, call_json
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import Timers
from kubelet_sim.node.host import HostFacts, detect_host, resolve_name
from kubelet_sim.node.lifecycle import NodeLifecycle, RuntimeProbe
from kubelet_sim.node.node_object import KUBELET_VERSION
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.pod.generation import CURRENT
from tests.cluster import ApiUnderTest, wait_for

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
FAST = {
    "lease_renew_interval": 0.2,
    "status_update_interval": 0.2,
    "status_report_interval": 300.0,
}


class FakeProbe:
    """A container runtime that answers, or not, as the test says."""

    def __init__(self, up: bool = True) -> None:
        self.up = up

    def ping(self) -> bool:
        return self.up

    def version(self) -> str:
        if not self.up:
            raise RuntimeError("runtime down")
        return "27.3.1"

    def list_images(self) -> list[Any]:
        return []


@pytest.fixture
def timers() -> Iterator[Timers]:
    """The process's timers, as a node gets them from its builder."""
    running = Timers(pool_threads=4, supervisor=Supervisor()).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def host() -> HostFacts:
    return detect_host()


Start = Callable[..., NodeLifecycle]


@pytest.fixture
def start_node(cluster: ApiUnderTest, host: HostFacts, timers: Timers) -> Iterator[Start]:
    """Start a NodeLifecycle for the test's node name; stop every one at teardown."""
    started: list[NodeLifecycle] = []

    def start(
        probe: RuntimeProbe | None = None,
        admin: bool = False,
        resolve: Callable[[str], tuple[str, ...]] = resolve_name,
        **overrides: Any,
    ) -> NodeLifecycle:
        """With a kubelet's credentials on a real server, unless `admin`."""
        settings = NodeSettings(node_name=cluster.node_name, **{**FAST, **overrides})
        api = cluster.api if admin else connect(cluster.node_kubeconfig).api
        lifecycle = NodeLifecycle(
            settings,
            NodeApi(api),
            probe or FakeProbe(),
            timers,
            host,
            lambda: CURRENT,
            resolve=resolve,
        )
        started.append(lifecycle)
        assert lifecycle.start()
        return lifecycle

    yield start
    for lifecycle in started:
        lifecycle.stop()
    _delete_lease(cluster)


def _delete_lease(cluster: ApiUnderTest) -> None:
    try:
        call_json(
            cluster.coordination.delete_namespaced_lease, cluster.node_name, "kube-node-lease"
        )
    except ApiError as exc:
        if not exc.not_found:
            raise


def _node(cluster: ApiUnderTest) -> dict[str, Any] | None:
    return NodeApi(cluster.api).get_node(cluster.node_name)


def _lease(cluster: ApiUnderTest) -> dict[str, Any] | None:
    return NodeApi(cluster.api).get_lease("kube-node-lease", cluster.node_name)


def _ready(cluster: ApiUnderTest) -> dict[str, Any] | None:
    node = _node(cluster)
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), None)


def _wait_ready(cluster: ApiUnderTest, status: str, timeout: float = 5.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        ready = _ready(cluster)
        return ready if ready and ready["status"] == status else None

    result: dict[str, Any] = wait_for(check, timeout, f"Ready={status}")
    return result


def test_node_registers_with_the_kubelets_fields_and_is_ready(
    cluster: ApiUnderTest, start_node: Start, host: HostFacts
) -> None:
    start_node(
        node_labels={"example.com/pool": "blue"},
        register_with_taints=[{"key": "example.com/only", "value": "me", "effect": "NoSchedule"}],
    )
    ready = _wait_ready(cluster, "True")
    assert (ready["reason"], ready["message"]) == (
        "KubeletReady",
        "kubelet is posting ready status",
    )
    node = _node(cluster)
    assert node is not None
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == cluster.node_name
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == host.architecture
    assert labels["example.com/pool"] == "blue"
    assert _own_taints(node) == [{"key": "example.com/only", "value": "me", "effect": "NoSchedule"}]
    status = node["status"]
    assert {"cpu", "memory", "pods", "ephemeral-storage"} <= set(status["capacity"])
    assert status["capacity"]["pods"] == "110"
    assert set(status["allocatable"]) == set(status["capacity"])
    # the test's node name resolves nowhere: no Hostname address an API server would fail on
    internal = [{"type": "InternalIP", "address": host.node_ip}] if host.node_ip else []
    assert status["addresses"] == internal
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    info = status["nodeInfo"]
    assert info["kubeletVersion"] == KUBELET_VERSION
    assert info["containerRuntimeVersion"] == "docker://27.3.1"
    assert (info["operatingSystem"], info["architecture"]) == ("linux", host.architecture)
    kinds = [c["type"] for c in status["conditions"]]
    assert {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} <= set(kinds)


def test_restart_adopts_the_node_and_keeps_its_taints(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    first = start_node(register_with_taints=[{"key": "a", "effect": "NoSchedule"}])
    _wait_ready(cluster, "True")
    # The node lifecycle controller (a real one, or the fake's) removes the not-ready taint once
    # Ready: the admin edits the node after that. Before it, the edit races the controller, and
    # v1.24's controller patches taints from its cache without a resourceVersion precondition
    # (the RV was added to PatchNodeTaints in a later release): CI once saw it put back ["a"].
    env = cluster.session.env
    if env is None or "kube-controller-manager" in env.components:
        wait_for(lambda: _taint_keys(cluster) == ["a"], 30, "the not-ready taint removed")
    first.stop()
    node = _node(cluster)
    assert node is not None
    uid = node["metadata"]["uid"]
    # Meanwhile an admin cordons the node, changes taints and a label we own.
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [{"key": "admin", "effect": "NoExecute"}]
    node["metadata"]["labels"]["kubernetes.io/os"] = "plan9"
    node["metadata"]["labels"]["example.com/admin"] = "yes"
    NodeApi(cluster.api).update_node(node)  # the client's replace_node wants kubeProxyVersion

    start_node(register_with_taints=[{"key": "b", "effect": "NoSchedule"}])
    node = _node(cluster)
    assert node is not None
    assert node["metadata"]["uid"] == uid
    assert node["spec"]["unschedulable"] is True
    assert _own_taints(node) == [{"key": "admin", "effect": "NoExecute"}]
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert node["metadata"]["labels"]["example.com/admin"] == "yes"
    _wait_ready(cluster, "True")


def _addresses(cluster: ApiUnderTest) -> list[dict[str, str]]:
    return list(((_node(cluster) or {}).get("status") or {}).get("addresses") or [])


def test_hostname_address_follows_what_the_node_name_resolves_to(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    """A name that leads to the node IP is advertised as Hostname; after a restart where it
    no longer does (or after an older kubelet-sim, which always advertised it) the Hostname
    address is gone from the Node, not merged in beside the new list."""
    internal = {"type": "InternalIP", "address": "10.20.30.40"}
    hostname = {"type": "Hostname", "address": cluster.node_name}
    first = start_node(node_ip="10.20.30.40", resolve=lambda _name: ("10.20.30.40",))
    assert _addresses(cluster) == [internal, hostname]
    first.stop()
    start_node(node_ip="10.20.30.40", resolve=lambda _name: ())
    wait_for(lambda: _addresses(cluster) == [internal], 5, "the Hostname address removed")


def test_lease_is_owned_by_the_node_and_renewed(cluster: ApiUnderTest, start_node: Start) -> None:
    start_node()
    lease = wait_for(lambda: _lease(cluster), 5, "the node lease")
    node = _node(cluster)
    assert node is not None
    assert lease["spec"]["holderIdentity"] == cluster.node_name
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert MICRO_TIME.match(lease["spec"]["renewTime"]), lease["spec"]["renewTime"]
    assert lease["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": cluster.node_name,
            "uid": node["metadata"]["uid"],
        }
    ]
    from kubernetes.client import V1Lease

    assert V1Lease.from_dict(lease).spec.holder_identity == cluster.node_name
    first = lease["spec"]["renewTime"]
    wait_for(
        lambda: (_lease(cluster) or {}).get("spec", {}).get("renewTime", "") > first,
        5,
        "renewTime to advance",
    )


def test_lease_written_by_someone_else_is_reread(cluster: ApiUnderTest, start_node: Start) -> None:
    start_node()
    lease = wait_for(lambda: _lease(cluster), 5, "the node lease")
    lease["metadata"].setdefault("annotations", {})["example.com/touched"] = "yes"
    touched = NodeApi(cluster.api).update_lease(lease)
    mark = touched["spec"]["renewTime"]

    def renewed_after_touch() -> bool:
        current = _lease(cluster) or {}
        return current.get("spec", {}).get("renewTime", "") > mark and (
            current["metadata"].get("annotations", {}).get("example.com/touched") == "yes"
        )

    wait_for(renewed_after_touch, 5, "a renewal on top of the other writer's lease")


def test_ready_follows_the_runtime(cluster: ApiUnderTest, start_node: Start) -> None:
    probe = FakeProbe()
    start_node(probe)
    ready = _wait_ready(cluster, "True")
    probe.up = False
    down = _wait_ready(cluster, "False")
    assert (down["reason"], down["message"]) == ("KubeletNotReady", "container runtime is down")
    assert down["lastTransitionTime"] >= ready["lastTransitionTime"]
    probe.up = True
    back = _wait_ready(cluster, "True")
    assert back["reason"] == "KubeletReady"


def test_ready_unknown_written_by_the_node_controller_is_answered(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    """The node lifecycle controller marks a node whose Lease aged Unknown (a lost
    connection); the kubelet sets its status on the Node it reads, so its next update writes
    Ready=True again with a new transition time, though its own status did not change. (The
    agent's node informer hands the changed Node to the lifecycle; here the test does.)"""
    lifecycle = start_node(FakeProbe())
    ready = _wait_ready(cluster, "True")
    unknown = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": ready["lastHeartbeatTime"],
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    cluster.core.patch_node_status(
        cluster.node_name,
        {"status": {"conditions": [unknown]}},
        _content_type="application/strategic-merge-patch+json",
    )
    marked = _node(cluster)
    assert marked is not None
    lifecycle.node_changed(marked)
    back = _wait_ready(cluster, "True")
    assert back["reason"] == "KubeletReady"
    assert back["lastTransitionTime"] > unknown["lastTransitionTime"]


def test_conditions_of_other_components_survive_the_nodes_status_writes(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    """Node status goes as a strategic merge patch: conditions merge by type (the server's
    schema), so one the node does not own stays, as a CNI plugin's NetworkUnavailable does."""
    probe = FakeProbe()
    start_node(probe)
    _wait_ready(cluster, "True")
    network = {
        "type": "NetworkUnavailable",
        "status": "False",
        "reason": "RouteCreated",
        "message": "set by another component",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
    }
    cluster.core.patch_node_status(
        cluster.node_name,
        {"status": {"conditions": [network]}},
        _content_type="application/strategic-merge-patch+json",
    )
    probe.up = False
    _wait_ready(cluster, "False")
    node = _node(cluster)
    assert node is not None
    kept = [c for c in node["status"]["conditions"] if c["type"] == "NetworkUnavailable"]
    assert kept == [network]


@pytest.mark.docker
def test_real_docker_makes_the_node_ready(
    cluster: ApiUnderTest, start_node: Start, docker_env: Any
) -> None:
    from kubelet_sim.runtime.engine import DockerEngine

    runtime = DockerEngine(docker_env.client)  # not closed: the session's client
    start_node(runtime)
    _wait_ready(cluster, "True")
    node = _node(cluster)
    assert node is not None
    version = node["status"]["nodeInfo"]["containerRuntimeVersion"]
    assert version == f"docker://{runtime.version()}"
    busybox = docker_env.client.api.inspect_image("kubelet-sim.local/busybox:test")
    images = node["status"].get("images") or ()
    # An untagged image has no names: the server answers null for the empty list it was sent.
    listed = {n: i["sizeBytes"] for i in images for n in i.get("names") or ()}
    assert listed.get("kubelet-sim.local/busybox:test") == busybox["Size"], "status.images"


def test_reservations_shrink_the_allocatable_the_server_keeps(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    start_node(
        cpu="4", memory="8Gi", system_reserved={"cpu": "250m"}, kube_reserved={"memory": "1Gi"}
    )
    node = _node(cluster)
    assert node is not None
    assert node["status"]["capacity"]["cpu"] == "4"
    assert node["status"]["allocatable"]["cpu"] == "3750m"
    memory = value(node["status"]["allocatable"]["memory"])  # a server may reformat it (7068Mi)
    assert memory == (8 * 1024 - 1024 - 100) * 1024 * 1024


def test_runtime_that_never_answered_registers_not_ready(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    start_node(FakeProbe(up=False))
    ready = _wait_ready(cluster, "False")
    assert ready["reason"] == "KubeletNotReady"
    assert ready["message"] == "container runtime status check may not have completed yet"
    node = _node(cluster)
    assert node is not None
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "docker://unknown"


def test_deleted_node_is_registered_again_when_the_informer_says_so(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    lifecycle = start_node()
    _wait_ready(cluster, "True")
    old_uid = (_node(cluster) or {})["metadata"]["uid"]
    call_json(cluster.core.delete_node, cluster.node_name)
    lifecycle.node_deleted()
    node = wait_for(
        lambda: (n := _node(cluster)) and n["metadata"]["uid"] != old_uid and n,
        5,
        "the node registered again",
    )
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == cluster.node_name
    _wait_ready(cluster, "True")


def test_deleted_node_is_registered_again_on_the_next_status_write(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    start_node(status_report_interval=0.3)
    _wait_ready(cluster, "True")
    old_uid = (_node(cluster) or {})["metadata"]["uid"]
    call_json(cluster.core.delete_node, cluster.node_name)
    wait_for(
        lambda: (n := _node(cluster)) and n["metadata"]["uid"] != old_uid,
        5,
        "the node registered again",
    )
    _wait_ready(cluster, "True")


def test_registration_retries_while_the_api_server_fails(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    fake = cluster.require_fake("injects 500s")
    fake.fail_next(3, 500, verb="create", resource="nodes")
    start_node()
    assert fake.count("create", "nodes") >= 4
    _wait_ready(cluster, "True")


def test_stop_is_prompt_and_can_interrupt_registration(
    cluster: ApiUnderTest, host: HostFacts, timers: Timers
) -> None:
    fake = cluster.require_fake("keeps registration failing")
    fake.fail_next(1000, 503, verb="create", resource="nodes")
    settings = NodeSettings(node_name=cluster.node_name)
    lifecycle = NodeLifecycle(
        settings, NodeApi(cluster.api), FakeProbe(), timers, host, lambda: CURRENT
    )
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(lifecycle.start()))
    thread.start()
    wait_for(lambda: fake.count("create", "nodes") >= 2, 5, "registration attempts")
    began = time.monotonic()
    lifecycle.stop()
    thread.join(5)
    assert result == [False]
    assert time.monotonic() - began < 2


def test_stop_is_prompt_with_default_intervals(
    cluster: ApiUnderTest, host: HostFacts, timers: Timers
) -> None:
    settings = NodeSettings(node_name=cluster.node_name)
    lifecycle = NodeLifecycle(
        settings, NodeApi(cluster.api), FakeProbe(), timers, host, lambda: CURRENT
    )
    assert lifecycle.start()
    wait_for(lambda: _lease(cluster), 5, "the node lease")
    began = time.monotonic()
    lifecycle.stop()
    assert time.monotonic() - began < 5, "well inside the 10 s intervals it would wait out"
    _delete_lease(cluster)


def test_delete_node_on_exit(cluster: ApiUnderTest, start_node: Start) -> None:
    lifecycle = start_node(admin=True, delete_node_on_exit=True)  # a kubelet's may not
    _wait_ready(cluster, "True")
    lifecycle.stop()
    assert _node(cluster) is None


def test_delete_node_on_exit_refused_says_why(cluster: ApiUnderTest, start_node: Start) -> None:
    from structlog.testing import capture_logs

    cluster.require_node_credentials()
    with capture_logs() as logs:
        lifecycle = start_node(delete_node_on_exit=True)
        _wait_ready(cluster, "True")
        if cluster.fake is not None:  # the fake authorizes nothing: answer as the Node authorizer
            cluster.fake.fail_next(1, 403, verb="delete", resource="nodes")
        lifecycle.stop()
    assert _node(cluster) is not None
    errors = [e["event"] for e in logs if e["log_level"] == "error"]
    assert any("may not delete their own Node" in e for e in errors), errors


def test_spec_changes_seen_by_the_informer_are_logged(
    cluster: ApiUnderTest, start_node: Start
) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        lifecycle = start_node(register_with_taints=[{"key": "a", "effect": "NoSchedule"}])
        node = _node(cluster)
        assert node is not None
        node["spec"] = {"unschedulable": True, "taints": [{"key": "b", "effect": "NoExecute"}]}
        lifecycle.node_changed(node)
    events = {e["event"]: e for e in logs}
    assert "node cordoned" in events
    taints = events["node taints changed"]
    removed = [t for t in taints["removed"] if not t.startswith(CONTROLLER_TAINTS)]
    assert (taints["added"], removed) == (["b=:NoExecute"], ["a=:NoSchedule"])


CONTROLLER_TAINTS = "node.kubernetes.io/"  # the node lifecycle controller's (not-ready, ...)


def _taint_keys(cluster: ApiUnderTest) -> list[str]:
    return [t["key"] for t in ((_node(cluster) or {}).get("spec") or {}).get("taints") or []]


def _own_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Taints other than those a real cluster's node lifecycle controller adds on its own."""
    taints = node["spec"].get("taints") or []
    return [t for t in taints if not t["key"].startswith(CONTROLLER_TAINTS)]
