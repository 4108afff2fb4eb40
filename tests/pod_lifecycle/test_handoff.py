"""The scheduler-to-kubelet handoff end to end: a real scheduler binds, kubelet-sim runs.

Needs a cluster with a scheduler (and a Deployment controller for the Deployment): each test
asks the server and skips, saying what it lacks; the fake schedules nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubelet_sim import cri
from kubelet_sim.demo.sample import deployment_of
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.manifests import to_schedule_on
from tests.pods import BUSYBOX, SLEEP_FOREVER, running_ready, traced

pytestmark = pytest.mark.docker

SCHEDULER = "default-scheduler"


# kubelet-sim registers with this NoSchedule taint unless told otherwise: pods meant for the
# virtual node tolerate it, as the docs' examples do.
def _require_scheduler(cluster: ApiUnderTest) -> None:
    cluster.require_scheduler()


def _pod_spec(node: str) -> dict[str, Any]:
    """A busybox sleeping for ever, tolerating the virtual node's taint, for `node` alone."""
    container = {
        "name": "web",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",  # nothing is ever pulled in the tests
        "command": SLEEP_FOREVER,
    }
    return {**to_schedule_on(node), "containers": [container]}


def _pods(cluster: ApiUnderTest, selector: str) -> list[dict[str, Any]]:
    items = cluster.core.list_namespaced_pod(cluster.namespace, label_selector=selector).items
    return [cluster.api.sanitize_for_serialization(p) for p in items]


def _scheduler_events(cluster: ApiUnderTest, reason: str) -> dict[str, str]:
    """Pod name → message of the scheduler's events with `reason` (events.k8s.io)."""
    events = cluster.core.list_namespaced_event(cluster.namespace).items
    return {
        e.involved_object.name: e.message
        for e in events
        if e.reason == reason and (e.reporting_component or "") == SCHEDULER
    }


def _unscheduled(
    cluster: ApiUnderTest, name: str, spec: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Create pod `name` (labelled app=`name`) of `spec`, wait for the scheduler's
    FailedScheduling and its PodScheduled condition (the scheduler sends the event and patches
    the pod's status apart, either first): the event's message, and the pod, still bound to
    no node."""
    pod = {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}
    cluster.core.create_namespaced_pod(cluster.namespace, pod)
    failed: str = wait_for(
        lambda: _scheduler_events(cluster, "FailedScheduling").get(name),
        30,
        "the scheduler's FailedScheduling",
    )

    def told() -> dict[str, Any] | None:
        [found] = _pods(cluster, f"app={name}")
        conditions = found["status"].get("conditions") or []
        return found if any(c["type"] == "PodScheduled" for c in conditions) else None

    found: dict[str, Any] = wait_for(told, 30, "the scheduler's PodScheduled condition")
    assert not found["spec"].get("nodeName")
    return failed, found


def test_a_deployment_is_scheduled_onto_the_node_runs_and_scales_down(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    _require_scheduler(cluster)
    cluster.require_controller("Deployment")
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        apps = client.AppsV1Api(cluster.api)
        apps.create_namespaced_deployment(
            cluster.namespace, deployment_of("web", 3, _pod_spec(cluster.node_name))
        )

        def three_ready() -> list[dict[str, Any]] | None:
            pods = _pods(cluster, "app=web")
            ready = [p for p in pods if running_ready(p.get("status") or {})]
            return ready if len(ready) == 3 else None

        pods = wait_for(three_ready, 90, "3 replicas Running and Ready")
        scheduled = wait_for(
            lambda: len(s := _scheduler_events(cluster, "Scheduled")) >= 3 and s,
            30,
            "the scheduler's Scheduled events",
        )
        for pod in pods:
            name = pod["metadata"]["name"]
            assert pod["spec"]["nodeName"] == cluster.node_name
            assert pod["spec"]["schedulerName"] == SCHEDULER
            bound = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert bound[0]["status"] == "True"
            assert scheduled[name] == (
                f"Successfully assigned {cluster.namespace}/{name} to {cluster.node_name}"
            )
        uids = {p["metadata"]["uid"] for p in pods}
        steps = traced(cluster, running.agent.runtime, pods[0]["metadata"]["name"])
        by_name = {s.step: s for s in steps}
        assert by_name["scheduled"].detail == f"by {SCHEDULER}"
        assert by_name["bound"].time is not None
        assert by_name["seen by the node"].detail.startswith("ADDED via watch")
        assert by_name["Ready written"].time is not None

        apps.patch_namespaced_deployment_scale("web", cluster.namespace, {"spec": {"replicas": 1}})
        wait_for(lambda: len(_pods(cluster, "app=web")) == 1, 60, "2 replicas deleted to the end")
        [kept] = _pods(cluster, "app=web")
        gone = uids - {kept["metadata"]["uid"]}

        def containers_gone() -> bool:
            # The summary list, not SDK objects: those inspect each container, and the agent
            # is removing them right now (a 404 between list and inspect).
            summaries = docker_env.client.api.containers(
                all=True, filters={"label": f"{cri.LABEL_NODE}={cluster.node_name}"}
            )
            left = {(c.get("Labels") or {}).get(cri.LABEL_POD_UID) for c in summaries}
            return not (left & gone)

        wait_for(containers_gone, 30, "the deleted replicas' containers removed")
    finally:
        running.stop()


def test_a_pod_without_the_toleration_is_not_scheduled_onto_the_virtual_node(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """The default taint keeps ordinary workloads (and DaemonSets) off the node."""
    _require_scheduler(cluster)
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        spec = _pod_spec(cluster.node_name)
        del spec["tolerations"]
        failed, _ = _unscheduled(cluster, "plain", spec)
        # v1.24's scheduler names the taint; v1.34's only says "had untolerated taint(s)"
        assert "kubelet-sim.io/virtual" in failed or "had untolerated taint(s)" in failed, failed
    finally:
        running.stop()


def test_a_pod_that_fits_no_node_waits_then_runs_when_its_node_registers(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    _require_scheduler(cluster)
    late = dataclasses.replace(
        cluster, node_name=f"{cluster.node_name}-late", _node_kubeconfig=None
    )
    failed, waiting = _unscheduled(cluster, "waiting", _pod_spec(late.node_name))
    assert "nodes are available" in failed or "no nodes available" in failed, failed
    assert waiting["status"]["phase"] == "Pending"
    unschedulable = [c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (unschedulable[0]["status"], unschedulable[0]["reason"]) == ("False", "Unschedulable")

    running: RunningAgent | None = None
    try:
        running = start_agent(late, docker_env, tmp_path / "root")
        started = wait_for(
            lambda: [p for p in _pods(cluster, "app=waiting") if running_ready(p["status"])],
            90,
            "the pod bound and started once its node registered",
        )
        assert started[0]["spec"]["nodeName"] == late.node_name
    finally:
        if running is not None:
            running.stop()
        docker_env.remove_labelled(f"{cri.LABEL_NODE}={late.node_name}")
        for name in (late.node_name,):
            try:
                cluster.core.delete_node(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
