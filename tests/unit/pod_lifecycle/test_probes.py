"""Probes on the fake clock: a probe schedule of tens of seconds passes in milliseconds.

Attempts run on the prober's pool (real threads); a test moves the clock, tells the prober to
look at it again, and waits (with a deadline) for what the attempt changed."""

from __future__ import annotations

from collections.abc import Sequence

from kubelet_sim import cri
from tests.cluster import wait_for
from tests.unit.harness import Node, container, pod_body


def _exec_probe(period: int = 10, threshold: int = 3) -> dict[str, object]:
    return {
        "exec": {"command": ["check"]},
        "periodSeconds": period,
        "failureThreshold": threshold,
    }


def _answers(node: Node, *codes: int) -> list[int]:
    """The probe command's exit codes, in turn (the last one repeats)."""
    left = list(codes)

    def handler(_c: cri.ObservedContainer, command: Sequence[str]) -> cri.ExecResult:
        code = left.pop(0) if len(left) > 1 else left[0]
        return cri.ExecResult(code, "" if code == 0 else "not yet")

    node.runtime.exec_handler = handler
    return left


def _attempts(node: Node) -> int:
    return len(node.runtime.operations("exec"))


def _tick(node: Node, seconds: float, attempts: int) -> None:
    node.clock.advance(seconds)
    node.syncer.prober.recheck()
    wait_for(lambda: _attempts(node) >= attempts, 10, f"probe attempt {attempts}")


def test_a_liveness_probe_failing_three_times_restarts_the_container(node: Node) -> None:
    _answers(node, 1)
    uid = node.add(pod_body(containers=[container(livenessProbe=_exec_probe())]))
    node.syncer.start()
    node.sync_until(uid, lambda: node.runtime.running(uid), "running")
    node.sync(uid)  # the running container is probed from now on
    wait_for(lambda: _attempts(node) >= 1, 10, "the first attempt")
    _tick(node, 10, 2)
    assert len(node.containers(uid, "app")) == 1  # two failures: not yet
    _tick(node, 10, 3)
    node.wait_woken(uid)  # the result changed: the pod comes back to its worker
    node.sync(uid)
    killing = node.events.of("Killing")
    assert killing[0].message == "Container app failed liveness probe, will be restarted"
    unhealthy = node.events.of("Unhealthy")
    assert len(unhealthy) == 3
    assert unhealthy[0].message == "Liveness probe failed: not yet"
    node.sync_until(uid, lambda: len(node.containers(uid, "app")) == 2, "the restart")


def test_readiness_follows_the_probe(node: Node) -> None:
    _answers(node, 1, 0)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 5}
    uid = node.add(pod_body(containers=[container(readinessProbe=probe)]))
    node.syncer.start()
    node.sync_until(uid, lambda: node.runtime.running(uid), "running")
    node.sync(uid)
    wait_for(lambda: _attempts(node) >= 1, 10, "the first attempt")
    node.sync(uid)
    assert node.condition(uid, "Ready") == "False"
    _tick(node, 5, 2)
    node.wait_woken(uid)
    node.sync(uid)
    assert node.condition(uid, "Ready") == "True"
