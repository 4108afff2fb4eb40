"""Supervised threads: a loop that raised restarts (an informer relists first); one that keeps
failing stops the agent with exit code 1 instead of leaving it on a frozen cache."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.informer import ADDED, Informer, ListWatchSource
from kubelet_sim.kube.watches import pods_on_node
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import FAILED, RUNNING, Supervisor
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import make_pod, running_ready, wait_status

# An event the informer chokes on (no metadata.name): before supervision it killed the thread
# while `synced` stayed set, and the agent ran on a frozen pod cache.
POISON = b'{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {}}}\n'


def quick() -> Backoff:
    return Backoff(initial=0.05, cap=0.1)


# -- the supervisor on its own --------------------------------------------------------------


def test_a_loop_that_raised_is_restarted_after_its_hook() -> None:
    calls: list[str] = []
    stop = threading.Event()

    def body() -> None:
        calls.append("run")
        if len(calls) < 5:  # runs 1 and 3 raise (2 and 4 are the hooks)
            raise KeyError("name")
        stop.wait()

    supervisor = Supervisor(backoff=quick)
    thread = supervisor.thread("loop", body, stop, on_crash=lambda: calls.append("hook"))
    thread.start()
    wait_for(lambda: len(calls) == 5, 30, "two restarts")  # tracebacks render slowly
    health = supervisor.health()["loop"]
    assert (health.state, health.restarts, health.last_error) == (RUNNING, 2, "KeyError: 'name'")
    assert calls == ["run", "hook", "run", "hook", "run"]
    assert supervisor.healthy
    stop.set()
    thread.join(2)
    assert "loop" not in supervisor.health(), "a stopped loop leaves the health list"


def test_a_loop_failing_beyond_the_limit_is_given_up_and_reported() -> None:
    failures: list[str] = []
    supervisor = Supervisor(max_failures=3, backoff=quick, on_failure=failures.append)

    def body() -> None:
        raise RuntimeError("always")

    thread = supervisor.thread("doomed", body, threading.Event())
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert supervisor.failed.is_set()
    assert not supervisor.healthy
    assert failures == [supervisor.failure]
    assert "doomed" in supervisor.failure
    assert "RuntimeError: always" in supervisor.failure
    assert supervisor.health()["doomed"].state == FAILED


# -- an informer whose stream carries a poisoned event ----------------------------------------


class _Body:
    """A list answer: what `Informer._list` reads."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()

    def release_conn(self) -> None:
        pass


class _Stream:
    """A watch answer: the given lines, then silence until closed."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.closed = threading.Event()

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        yield from self.lines
        self.closed.wait()

    def shutdown(self) -> None:
        self.closed.set()

    def close(self) -> None:
        self.closed.set()

    def release_conn(self) -> None:
        pass


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1"}}


def test_poisoned_event_restarts_the_informer_which_relists_before_it_says_synced() -> None:
    second_list = threading.Event()
    lists: list[list[dict[str, Any]]] = [[_pod("a")], [_pod("a"), _pod("b")]]
    watches = [_Stream([POISON]), _Stream([])]

    def list_method(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return watches.pop(0)
        if len(lists) == 1:
            second_list.wait(5)  # hold the relist: the informer must not say synced meanwhile
        return _Body(lists.pop(0))

    seen: list[tuple[str, str]] = []
    supervisor = Supervisor(backoff=quick)
    informer = Informer(
        ListWatchSource("pods", list_method),
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        supervisor=supervisor,
    ).start()
    try:
        wait_for(lambda: supervisor.health()["informer pods"].restarts == 1, 5, "a restart")
        wait_for(lambda: len(lists) == 1, 5, "the relist to begin")
        assert not informer.synced.is_set(), "synced while its cache is suspect"
        second_list.set()
        assert informer.synced.wait(5)
        assert informer.keys() == {"ns/a", "ns/b"}
        assert seen == [(ADDED, "a"), (ADDED, "b")]
        assert (informer.stats.lists, informer.stats.relists) == (2, 1)
        assert supervisor.health()["informer pods"].state == RUNNING
    finally:
        second_list.set()
        informer.stop()


# -- the agent: a later pod still runs; a loop that keeps failing ends the command --------------


class _PoisonedOnce:
    """Wraps a real watch response: the poison comes first, then the server's own stream."""

    def __init__(self, response: Any) -> None:
        self._response = response

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        yield POISON
        yield from self._response.stream(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)


@pytest.mark.docker
def test_poisoned_pod_watch_event_does_not_stop_later_pods(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    poisoned = threading.Event()

    def prepare(agent: Any) -> None:
        real = pods_on_node(agent.kube.api, agent.node_name)

        def list_method(*args: Any, **kwargs: Any) -> Any:
            response = real.list_method(*args, **kwargs)
            if kwargs.get("watch") and not poisoned.is_set():
                poisoned.set()
                return _PoisonedOnce(response)
            return response

        source = ListWatchSource(real.description, list_method, real.args, real.kwargs)
        watches = agent.watches  # the node's own (a process of one node)
        watches.pods = Informer(
            source, watches._on_pod, supervisor=agent.supervisor, node=agent.node_name
        )

    running = start_agent(cluster, docker_env, tmp_path / "root", prepare=prepare)
    try:
        informer = running.agent.watches.pods
        name = f"informer {informer.source.description}"
        wait_for(lambda: running.agent.health()[name].restarts == 1, 10, "the informer restart")
        wait_for(informer.synced.is_set, 10, "the relist")
        make_pod(cluster, "after-poison")
        wait_status(cluster, "after-poison", running_ready, 30, "Running and Ready")
        assert informer.stats.relists >= 1
        assert running.agent.supervisor.healthy
    finally:
        running.stop()


# Runs the real command with the pod informer's list always failing in a way no loop expects,
# and a small failure limit: the command must end by itself with exit code 1.
_FAILING_AGENT = """
import sys
from kubelet_sim.loops import supervise
from kubelet_sim.kube import informer

supervise.MAX_FAILURES = 3
supervise.RESTART_DELAY = (0.05, 0.1)
real_list = informer.Informer._list

def broken_list(self):
    if self.source.description.startswith("pods on"):
        raise RuntimeError("poisoned list")
    real_list(self)

informer.Informer._list = broken_list
from kubelet_sim.cli import main
main()
"""


@pytest.mark.docker
def test_a_loop_that_keeps_failing_ends_the_command_with_exit_code_1(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    args = ["--node-name", cluster.node_name, "--kubeconfig", cluster.node_kubeconfig]
    args += ["--pod-infra-image", PAUSE_IMAGE, "--root-dir", str(tmp_path / "root")]
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_AGENT, *args, "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=180,  # registration and 3 quick failures; slow only on a loaded machine
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kubelet-sim: error: node {cluster.node_name}: loop 'informer pods on")
    assert "RuntimeError: poisoned list" in last
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert any(r["event"] == "loop failed; restarting" for r in records)
    assert any(r["event"] == "loop failed too often; giving up" for r in records)
