"""Readiness gates: a pod is Ready only once its containers are and every gate's condition is."""

from __future__ import annotations

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest
from tests.pods import condition, make_pod, wait_condition

GATE = "example.com/load-balancer"


def test_ready_waits_for_the_readiness_gate(cluster: ApiUnderTest, agent: RunningAgent) -> None:
    make_pod(cluster, "gated", readinessGates=[{"conditionType": GATE}])
    st = wait_condition(cluster, "gated", "ContainersReady", 30, status="True")
    ready = condition(st, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert (
        ready["message"]
        == f'corresponding condition of pod readiness gate "{GATE}" does not exist.'
    )
    cluster.core.patch_namespaced_pod_status(
        "gated",
        cluster.namespace,
        {"status": {"conditions": [{"type": GATE, "status": "True"}]}},
    )
    st = wait_condition(cluster, "gated", "Ready", 20, status="True")
    assert condition(st, GATE)["status"] == "True", "the gate's condition is kept"
