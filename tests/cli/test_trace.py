"""`kubelet-sim trace`: one pod's handoff, every step present, in order, with its latency."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.client import connect
from kubelet_sim.tools.trace import Step
from tests.agent_fixture import start_agent
from tests.agent_process import run_command
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.handoff_order import handoff_steps
from tests.pods import container, make_pod, running_ready, traced, wait_status

pytestmark = pytest.mark.docker


STEPS = handoff_steps("bound", init=["setup"], containers=["c"])


@contextmanager
def _traced_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, root: Path, name: str, **spec: Any
) -> Iterator[list[Step]]:
    """The steps of the pod `name` (made with `spec`) once Running and Ready, on an agent with
    `root` as its --root-dir, which runs until the block ends."""
    running = start_agent(cluster, docker_env, root / cluster.node_name)
    try:
        make_pod(cluster, name, **spec)
        wait_status(cluster, name, running_ready, 30, "Running and Ready")
        yield traced(cluster, running.agent.runtime, name)
    finally:
        running.stop()


def test_trace_of_a_pod_with_an_init_container(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    root, init = tmp_path / "root", container("setup", command=["true"])
    with _traced_pod(cluster, docker_env, root, "traced", initContainers=[init]) as steps:
        # The first status write is the status manager's, beside the runtime: anywhere after
        # the admission and before Ready, where its time puts it.
        first_write = "first status written"
        assert [s.step for s in steps if s.step != first_write] == [
            s for s in STEPS if s != first_write
        ]
        names = [s.step for s in steps]
        assert names.index("admitted") < names.index(first_write) < names.index("Ready written")
        by_name = {s.step: s for s in steps}
        assert by_name["bound"].time is None, "created with spec.nodeName: no scheduler, no binding"
        assert "spec.nodeName" in by_name["bound"].detail
        assert by_name["seen by the node"].detail.startswith("ADDED via watch, rv ")
        assert by_name["first status written"].detail == "phase Pending"
        assert by_name["Ready written"].detail == "phase Running"
        timed = [s for s in steps if s.step != "bound"]
        assert all(s.time is not None for s in timed), [s.step for s in timed if s.time is None]
        precise = [s.time for s in timed if s.precise and s.time is not None]
        assert precise == sorted(precise), "the node's and Docker's steps happen in this order"
        created, ready = by_name["created"].time, by_name["Ready written"].time
        assert created is not None
        assert ready is not None
        assert timedelta(0) <= ready - created < timedelta(seconds=30)  # created is whole seconds


def test_trace_command_prints_the_timeline(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    with _traced_pod(cluster, docker_env, root, "shown"):
        args = ["trace", "shown", "-n", cluster.namespace, "--kubeconfig", cluster.kubeconfig]
        args += ["--root-dir", str(root)]
        result = run_command(*args, "--output", "json")
        table = run_command(*args)
    assert result.returncode == 0, result.stderr
    trace = json.loads(result.stdout)
    assert trace["node"] == cluster.node_name
    steps = {s["step"]: s for s in trace["steps"]}
    assert steps["seen by the node"]["time"]
    assert steps["Ready written"]["time"]
    assert table.returncode == 0, table.stderr
    assert "seen by the node" in table.stdout
    assert "container c started" in table.stdout


def test_follow_prints_each_new_pod_once_it_is_ready(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    import threading

    from kubelet_sim.tools.trace import follow

    running = start_agent(cluster, docker_env, tmp_path / "root")
    printed: list[dict[str, object]] = []
    stop = threading.Event()
    listening = threading.Event()
    errors: list[BaseException] = []

    def run(*args: object, **kwargs: object) -> None:
        try:
            follow(*args, **kwargs)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)
            raise

    thread = threading.Thread(
        target=run,
        args=(connect(cluster.kubeconfig), running.agent.runtime, cluster.node_name),
        kwargs={
            "write": lambda line: printed.append(json.loads(line)),
            "stop": stop,
            "output": "json",
            "listening": listening,
        },
        daemon=True,
    )
    try:
        make_pod(cluster, "before")
        wait_status(cluster, "before", running_ready, 30, "the first pod Ready")
        thread.start()
        wait_for(listening.is_set, 10, "trace --follow listening")
        make_pod(cluster, "after")
        wait_status(cluster, "after", running_ready, 30, "the second pod Ready")
        wait_for(lambda: printed or errors, 15, "the new pod's timeline")
    finally:
        stop.set()
        thread.join(10)
        running.stop()
    assert not errors, errors
    assert [p["pod"] for p in printed] == [f"{cluster.namespace}/after"], "only new pods, once"
    steps = {s["step"]: s for s in printed[0]["steps"]}  # type: ignore[attr-defined]
    assert steps["Ready written"]["time"]
