"""The v1.34 kubelet's predicate admission beyond resources: the pod's OS, the supplemental groups
policy and host ports (lifecycle/predicate.go), pure and through a node's pod workers."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import Allocatable, Rejection, admit, admit_in_order, rejected_status
from kubelet_sim.pod.spec import PodView
from tests.unit.harness import Node, container, pod_body

NODE = Allocatable(cpu_milli=2000, memory_bytes=4 * 2**30, pods=10)
OS_REJECTION = Rejection(
    "PodOSNotSupported",
    "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS",
)
PORTS_REJECTION = Rejection(
    "NodePorts",
    "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the"
    " requested pod ports",
)


def view(uid: str = "u", labels: Json | None = None, **spec: Any) -> PodView:
    body = pod_body(uid, **spec)
    body["metadata"]["uid"] = uid
    body["metadata"]["labels"] = labels or {}
    return PodView.from_api(body)


def check(pod: PodView, *active: PodView) -> Rejection | None:
    return admit(pod, active_pods=active, allocatable=NODE, allow_privileged=False)


def with_port(host_port: int, **port: Any) -> list[Json]:
    return [container(ports=[{"containerPort": 80, "hostPort": host_port, **port}])]


@pytest.mark.parametrize("os_name", ["windows", "darwin", ""])
def test_a_pod_for_another_os_is_not_supported(os_name: str) -> None:
    assert check(view(os={"name": os_name})) == OS_REJECTION


def test_a_linux_pod_and_a_pod_without_an_os_are_admitted() -> None:
    assert check(view(os={"name": "linux"})) is None
    assert check(view()) is None


def test_the_os_label_on_the_pod_itself_must_be_the_nodes() -> None:
    assert check(view(labels={"kubernetes.io/os": "linux"})) is None
    assert check(view(labels={"kubernetes.io/os": "windows"})) == Rejection(
        "PodOSSelectorNodeLabelDoesNotMatch",
        "Pod was rejected: Failed to admit pod as the `kubernetes.io/os` label doesn't match"
        " node label",
    )


def test_the_os_is_checked_before_resources() -> None:
    huge = [container(resources={"requests": {"cpu": "64"}})]
    assert check(view(containers=huge, os={"name": "windows"})) == OS_REJECTION


def test_strict_supplemental_groups_are_not_supported_by_a_docker_node() -> None:
    assert check(view(securityContext={"supplementalGroupsPolicy": "Merge"})) is None
    assert check(view(securityContext={"supplementalGroupsPolicy": "Strict"})) == Rejection(
        "SupplementalGroupsPolicyNotSupported",
        "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node",
    )


def test_a_host_port_in_use_refuses_the_second_pod() -> None:
    first = view("a", containers=with_port(8080))
    assert check(view("b", containers=with_port(8080)), first) == PORTS_REJECTION
    assert check(view("b", containers=with_port(8081)), first) is None


@pytest.mark.parametrize(
    ("used", "wanted", "conflicts"),
    [
        ({}, {"protocol": "UDP"}, False),  # TCP by default: another protocol is free
        ({"hostIP": "10.0.0.1"}, {"hostIP": "10.0.0.2"}, False),
        ({"hostIP": "10.0.0.1"}, {}, True),  # no hostIP: every address
        ({}, {"hostIP": "10.0.0.2"}, True),
        (
            {"hostIP": "10.0.0.1", "protocol": "SCTP"},
            {"hostIP": "10.0.0.1", "protocol": "SCTP"},
            True,
        ),
    ],
)
def test_host_ports_conflict_by_protocol_and_address(
    used: Json, wanted: Json, conflicts: bool
) -> None:
    first = view("a", containers=with_port(9000, **used))
    rejection = check(view("b", containers=with_port(9000, **wanted)), first)
    assert rejection == (PORTS_REJECTION if conflicts else None)


def test_a_sidecars_host_port_is_held_and_a_plain_init_containers_is_not() -> None:
    sidecar = container(
        "side", restartPolicy="Always", ports=[{"containerPort": 1, "hostPort": 7000}]
    )
    init = container("init", ports=[{"containerPort": 1, "hostPort": 7001}])
    first = view("a", initContainers=[sidecar, init])
    assert check(view("b", containers=with_port(7000)), first) == PORTS_REJECTION
    assert check(view("b", containers=with_port(7001)), first) is None


def test_ports_count_only_the_pods_admitted_before() -> None:
    older = pod_body("older", containers=with_port(8080))
    younger = pod_body("younger", containers=with_port(8080))
    older["metadata"].update(uid="o", creationTimestamp="2026-01-01T00:00:00Z")
    younger["metadata"].update(uid="y", creationTimestamp="2026-01-01T00:00:01Z")
    decisions = admit_in_order(
        [PodView.from_api(younger), PodView.from_api(older)],
        admitted=[],
        already_here=(),
        allocatable=NODE,
        allow_privileged=False,
    )
    assert decisions == {"o": None, "y": PORTS_REJECTION}


def test_a_windows_pod_is_failed_and_never_started_while_another_runs(node: Node) -> None:
    other = node.add(pod_body("other"))
    node.sync_until_ready(other)
    body = pod_body("windows", os={"name": "windows"})
    body["metadata"]["generation"] = 2
    scheduled = {"type": "PodScheduled", "status": "True"}
    gate = {"type": "example.com/gate", "status": "False"}
    body["status"] = {"phase": "Pending", "qosClass": "BestEffort", "conditions": [scheduled, gate]}
    uid = node.add(body)
    node.sync(uid)
    assert node.last_status(uid) == {  # rejectPod's status, merged as the status manager merges
        "phase": "Failed",
        "reason": OS_REJECTION.reason,
        "message": OS_REJECTION.message,
        "qosClass": "BestEffort",
        "startTime": node.last_status(uid)["startTime"],
        "observedGeneration": 2,
        "conditions": [gate],
    }
    warning = node.events.of("PodOSNotSupported")
    assert [(e.uid, e.type, e.message) for e in warning] == [
        (uid, "Warning", "Failed to admit pod as the OS field doesn't match node OS")
    ]
    assert node.runtime.operations("run_sandbox") == [other]
    assert node.last_status(other)["phase"] == "Running"


def test_a_kubelet_before_v1_32_dropped_the_qos_class_of_a_pod_it_rejected() -> None:
    generated: Json = {
        "phase": "Failed",
        "reason": "OutOfcpu",
        "message": "Pod was rejected: ...",
        "startTime": "2026-11-28T00:00:00Z",
        "qosClass": "Burstable",
        "hostIP": "192.0.2.10",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "c"}],
    }
    previous: Json = {"qosClass": "Burstable", "resourceClaimStatuses": [{"name": "gpu"}]}
    kept = {k: generated[k] for k in ("phase", "reason", "message", "startTime")}
    assert rejected_status(generated, previous, 31) == {
        **kept,
        "resourceClaimStatuses": [{"name": "gpu"}],
    }
    assert rejected_status(generated, previous, 32)["qosClass"] == "Burstable"


def test_ephemeral_storage_is_fit_after_memory() -> None:
    disk = Allocatable(cpu_milli=2000, memory_bytes=2**30, pods=10, ephemeral_storage_bytes=10**9)
    used = view("a", containers=[container(resources={"requests": {"ephemeral-storage": "600M"}})])
    wanted = view(
        "b", containers=[container(resources={"requests": {"ephemeral-storage": "500M"}})]
    )
    rejection = admit(wanted, active_pods=[used], allocatable=disk, allow_privileged=False)
    assert rejection == Rejection(
        "OutOfephemeral-storage",
        "Pod was rejected: Node didn't have enough resource: ephemeral-storage, requested:"
        " 500000000, used: 600000000, capacity: 1000000000",
    )
    unreported = Allocatable(cpu_milli=2000, memory_bytes=2**30, pods=10)
    assert admit(wanted, active_pods=[used], allocatable=unreported, allow_privileged=False) is None


def test_a_resource_the_pod_does_not_ask_for_never_fails_it() -> None:
    """A node restarted smaller keeps pods that overfill its cpu (already_here); a new pod that
    asks only for memory still fits, as fitsRequest checks only what is asked (> 0)."""
    hog = view("a", containers=[container(resources={"requests": {"cpu": "3"}})])
    wanted = view("b", containers=[container(resources={"requests": {"memory": "1Mi"}})])
    assert check(wanted, hog) is None


NODE_OBJECT: Json = {
    "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux", "zone": "a", "gen": "5"}},
    "spec": {
        "taints": [{"key": "kubelet-sim.io/virtual", "value": "true", "effect": "NoSchedule"}]
    },
}
AFFINITY_REJECTION = Rejection(
    "NodeAffinity",
    "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node"
    " affinity/selector",
)
TAINT_REJECTION = Rejection(
    "TaintToleration",
    "Pod was rejected: Predicate TaintToleration failed: node(s) had taints that the pod didn't"
    " tolerate",
)


def on_node(pod: PodView, node: Json = NODE_OBJECT, *active: PodView) -> Rejection | None:
    return admit(pod, active_pods=active, allocatable=NODE, allow_privileged=False, node=node)


def required(*terms: Json) -> Json:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def test_a_node_selector_must_match_every_label() -> None:
    assert on_node(view(nodeSelector={"zone": "a", "kubernetes.io/os": "linux"})) is None
    assert on_node(view(nodeSelector={"zone": "b"})) == AFFINITY_REJECTION
    assert on_node(view(nodeSelector={"disk": "ssd"})) == AFFINITY_REJECTION


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "disk", "operator": "NotIn", "values": ["ssd"]}, True),  # absent: not in
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "disk", "operator": "Exists"}, False),
        ({"key": "disk", "operator": "DoesNotExist"}, True),
        ({"key": "gen", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gen", "operator": "Gt", "values": ["5"]}, False),
        ({"key": "gen", "operator": "Lt", "values": ["6"]}, True),
        ({"key": "zone", "operator": "Lt", "values": ["6"]}, False),  # not an integer
    ],
)
def test_required_node_affinity_expressions(expression: Json, matches: bool) -> None:
    rejection = on_node(view(affinity=required({"matchExpressions": [expression]})))
    assert rejection == (None if matches else AFFINITY_REJECTION)


def test_affinity_terms_are_ored_and_an_empty_term_matches_nothing() -> None:
    miss = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert on_node(view(affinity=required(miss, by_name))) is None
    assert on_node(view(affinity=required(miss, {}))) == AFFINITY_REJECTION
    other = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    assert on_node(view(affinity=required(other))) == AFFINITY_REJECTION
    not_other = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}
    assert on_node(view(affinity=required(not_other))) is None


def test_affinity_is_told_before_host_ports_and_after_resources() -> None:
    holder = view("a", containers=with_port(8080))
    both = view("b", containers=with_port(8080), nodeSelector={"zone": "b"})
    assert on_node(both, NODE_OBJECT, holder) == AFFINITY_REJECTION
    huge = [container(resources={"requests": {"cpu": "64"}})]
    rejection = on_node(view(containers=huge, nodeSelector={"zone": "b"}))
    assert rejection is not None
    assert rejection.reason == "OutOfcpu"


def tainted(*taints: Json) -> Json:
    return {**NODE_OBJECT, "spec": {"taints": list(taints)}}


NO_EXECUTE = {"key": "dedicated", "value": "db", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}, True),
        ({"key": "dedicated", "value": "db"}, True),  # any effect, Equal by default
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # every taint
        ({"key": "dedicated", "value": "web"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_a_no_execute_taint_needs_a_toleration(toleration: Json, tolerated: bool) -> None:
    rejection = on_node(view(tolerations=[toleration]), tainted(NO_EXECUTE))
    assert rejection == (None if tolerated else TAINT_REJECTION)


def test_only_no_execute_taints_count_and_static_pods_are_exempt() -> None:
    assert on_node(view()) is None  # the node's own NoSchedule taint: the scheduler's business
    node = tainted(NO_EXECUTE)
    assert on_node(view(), node) == TAINT_REJECTION
    static = pod_body("static")
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    assert on_node(PodView.from_api(static), node) is None


def test_without_a_node_object_labels_and_taints_are_not_checked() -> None:
    assert check(view(nodeSelector={"zone": "b"})) is None


def test_huge_pages_a_node_lacks_refuse_the_pod_and_those_it_has_are_counted() -> None:
    wants = [container(resources={"requests": {"memory": "1Mi", "hugepages-2Mi": "4Mi"}})]
    assert check(view(containers=wants)) == Rejection(
        "OutOfhugepages-2Mi",
        "Pod was rejected: Node didn't have enough resource: hugepages-2Mi, requested: 4194304,"
        " used: 0, capacity: 0",
    )
    some = Allocatable(
        cpu_milli=2000, memory_bytes=2**30, pods=10, hugepages={"hugepages-2Mi": 6 * 2**20}
    )
    first = view("a", containers=wants)
    assert admit(first, active_pods=[], allocatable=some, allow_privileged=False) is None
    rejection = admit(
        view("b", containers=wants), active_pods=[first], allocatable=some, allow_privileged=False
    )
    assert rejection is not None
    assert rejection.message.endswith("requested: 4194304, used: 4194304, capacity: 6291456")


def test_an_extended_resource_the_node_does_not_offer_is_admitted_as_the_kubelet_admits_it() -> (
    None
):
    gpu = [container(resources={"requests": {"example.com/gpu": "1"}})]
    assert check(view(containers=gpu)) is None


def test_a_status_that_says_started_is_no_proof_of_admission(node: Node) -> None:
    """Only this node's containers show an earlier admission: a startTime anyone with
    pods/status may write never lets a hostPath pod past the host-access gate."""
    host = [{"name": "host", "hostPath": {"path": "/"}}]
    body = pod_body("claims-started", volumes=host)
    body["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    uid = node.add(body)
    node.sync(uid)
    status = node.last_status(uid)
    assert (status["phase"], status["reason"]) == ("Failed", "Forbidden")
    assert node.runtime.operations("run_sandbox") == []
