"""An idle node holds no thread for the loops that wait for work (issue 22: a thousand nodes in
one process): the pod workers, the event recorder, the prober, the object-watch recycler, the
stop timer and the work queue's delay thread come when work does and go after it. A pod made
after the idle period still runs, with its events, probes and ConfigMap."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet_sim.loops import supervise
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.others import OtherPods, pods_of_others
from tests.pods import (
    container,
    get_pod,
    make_pod,
    pod_containers,
    running_ready,
    wait_for_events,
    wait_status,
)

# The supervised loops (by name) that must have no thread on an idle node.
ON_DEMAND = (
    "pod-worker",
    "event recorder",
    "prober ",
    "probe ",
    "stop-timer",
    "workqueue-delay",
    "object watch recycler",
    "object poller",
)
LINGER = 0.5  # the tests' linger, so that idleness is seen in a few seconds


def waiting_loops(running: RunningAgent) -> list[str]:
    """The agent's on-demand loops that have a thread now."""
    return sorted(n for n in running.agent.health() if n.startswith(ON_DEMAND))


def _idle(running: RunningAgent) -> bool:
    agent = running.agent
    threads = (
        agent.workers.threads(),
        agent.events.threads(),
        agent.syncer.prober.threads(),
        agent.objects.threads(),
    )
    LAST_SEEN[:] = [*waiting_loops(running), *map(str, threads)]
    return not waiting_loops(running) and not any(threads)


LAST_SEEN: list[str] = []  # what `_idle` saw last (for the failure's message)


def wait_idle(running: RunningAgent, timeout: float, what: str, others: OtherPods) -> None:
    """Until the agent holds no on-demand thread; a skip where the cluster gives the node pods
    of its own (`others`: a DaemonSet's, which keep it from idling)."""
    try:
        with others.excuse("an idle node is one without pods"):
            wait_for(lambda: _idle(running), timeout, what)
    except BaseException:
        print("still running (loops, then thread counts):", LAST_SEEN)
        raise


def test_an_idle_node_has_no_waiting_thread_and_a_later_pod_runs_as_before(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise, "LINGER", LINGER)
    with pods_of_others(cluster, {cluster.node_name}) as others:
        running = start_agent(cluster, docker_env, tmp_path / "root")
        try:
            wait_idle(running, 20, "no waiting thread once idle", others)
            ns = cluster.namespace
            cluster.core.create_namespaced_config_map(
                ns, {"metadata": {"name": "late"}, "data": {"k": "v"}}
            )
            env = [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "k"}}}]
            probe = {"exec": {"command": ["sh", "-c", 'test "$K" = v']}, "periodSeconds": 1}
            make_pod(cluster, "late", container(env=env, readinessProbe=probe))
            wait_status(cluster, "late", running_ready, 30, "Running and Ready (its probe passed)")
            wait_for_events(cluster, "late", "Created", "Started", timeout=20)
            assert any(n.startswith("prober ") for n in waiting_loops(running)), (
                "a scheduler thread while the node has probes"
            )
            uid = (get_pod(cluster, "late") or {})["metadata"]["uid"]
            cluster.core.delete_namespaced_pod("late", ns, grace_period_seconds=0)
            wait_for(
                lambda: not [c for c in pod_containers(docker_env, uid) if c.status == "running"],
                30,
                "the pod's containers stopped",
            )
            wait_idle(running, 30, "no waiting thread once the pod is gone", others)
        finally:
            running.stop()


def test_a_pod_worker_that_raises_on_demand_is_restarted_and_the_pod_runs(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise, "LINGER", LINGER)
    monkeypatch.setattr(supervise, "RESTART_DELAY", (0.05, 0.1))
    raised: list[str] = []

    def prepare(agent: object) -> None:
        queue = agent.workers.queue  # type: ignore[attr-defined]
        get = queue.get

        def fails_once(timeout: float | None = None) -> str | None:
            if not raised:
                raised.append("get")
                raise RuntimeError("a worker's bug")
            return get(timeout)

        queue.get = fails_once

    with pods_of_others(cluster, {cluster.node_name}) as others:
        running = start_agent(cluster, docker_env, tmp_path / "root", prepare=prepare)
        try:
            wait_idle(running, 20, "idle first", others)
            with others.excuse("an idle node is one without pods"):
                assert not raised, "no worker ran while nothing was queued"
            make_pod(cluster, "after")
            wait_status(cluster, "after", running_ready, 30, "Running after the worker's restart")
            assert raised == ["get"]
            assert running.agent.supervisor.healthy
        finally:
            running.stop()
