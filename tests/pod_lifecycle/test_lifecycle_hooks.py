"""postStart and preStop hooks on real containers, read back from the container's own output.

The hooks write to PID 1's stdout, so `docker logs` of the container shows, in order, what the
container and its hooks did. A finalizer keeps a deleted pod (and its exited containers) on
the node until the test has read them.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import docker.errors
import pytest

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, open_watch, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    condition,
    container,
    container_status,
    containers_named,
    event_messages,
    get_pod,
    make_pod,
    wait_status,
)

FINALIZER = "kubelet-sim.io/test-keeps-the-pod"
SAY = "echo {} > /proc/1/fd/1"
TRAPS_TERM = [
    "sh",
    "-c",
    "trap 'echo term; exit 0' TERM; echo start; while :; do sleep 1 & wait $!; done",
]


def _logs(cluster: ApiUnderTest, docker_env: DockerEnv, name: str) -> list[str]:
    uid = (get_pod(cluster, name) or {})["metadata"]["uid"]
    text = ""
    for c in containers_named(docker_env, uid):
        try:
            text += docker_env.client.api.logs(c.id).decode()
        except docker.errors.NotFound:  # removed since it was listed
            continue
    return text.split()


def _running(st: dict[str, Any]) -> bool:
    return "running" in (container_status(st).get("state") or {})


def test_pre_stop_runs_before_sigterm_and_post_start_after_start(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    hooks = {
        "postStart": {"exec": {"command": ["sh", "-c", SAY.format("poststart")]}},
        "preStop": {"exec": {"command": ["sh", "-c", SAY.format("prestop")]}},
    }
    make_pod(cluster, "hooked", container(command=TRAPS_TERM, lifecycle=hooks))
    cluster.core.patch_namespaced_pod(
        "hooked", cluster.namespace, {"metadata": {"finalizers": [FINALIZER]}}
    )
    try:
        wait_status(cluster, "hooked", _running, 30, "running")
        wait_for(
            lambda: "poststart" in _logs(cluster, docker_env, "hooked"), 20, "the postStart mark"
        )
        cluster.core.delete_namespaced_pod("hooked", cluster.namespace)
        wait_for(lambda: "term" in _logs(cluster, docker_env, "hooked"), 30, "SIGTERM handled")
        assert _logs(cluster, docker_env, "hooked") == ["start", "poststart", "prestop", "term"]
    finally:
        cluster.core.patch_namespaced_pod(
            "hooked", cluster.namespace, {"metadata": {"finalizers": None}}
        )


def test_failed_post_start_kills_and_restarts_the_container(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    command = ["sh", "-c", "echo nope; exit 1"]
    make_pod(
        cluster, "bad-hook", container(lifecycle={"postStart": {"exec": {"command": command}}})
    )
    wait_status(
        cluster,
        "bad-hook",
        lambda s: container_status(s).get("restartCount", 0) >= 1,
        60,
        "a restart after the failed postStart hook",
    )
    wait_for(lambda: event_messages(cluster, "bad-hook", "Killing"), 20, "the Killing event")
    uid = (get_pod(cluster, "bad-hook") or {})["metadata"]["uid"]
    pod = f"bad-hook_{cluster.namespace}({uid})"
    assert event_messages(cluster, "bad-hook", "FailedPostStartHook")[0] == (
        f'Exec lifecycle hook ([sh -c echo nope; exit 1]) for Container "c" in Pod "{pod}"'
        " failed - error: command 'sh -c echo nope; exit 1' exited with 1: ,"
        ' message: "nope\\n"'
    )
    assert event_messages(cluster, "bad-hook", "Killing")[0] == "FailedPostStartHook"


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str]]

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("User-Agent", "")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """An HTTP server on 127.0.0.1 that records each GET (path, User-Agent)."""
    seen: list[tuple[str, str]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def test_http_pre_stop_hook_reaches_its_host(
    cluster: ApiUnderTest,
    agent: RunningAgent,
    loopback_server: tuple[int, list[tuple[str, str]]],
) -> None:
    """The agent runs in this process: its hook's GET to 127.0.0.1 stays on loopback."""
    port, seen = loopback_server
    get = {"host": "127.0.0.1", "port": port, "path": "/bye"}
    make_pod(cluster, "web-hook", container(lifecycle={"preStop": {"httpGet": get}}))
    wait_status(cluster, "web-hook", _running, 30, "running")
    assert seen == [], "a preStop hook runs only when the container stops"
    cluster.core.delete_namespaced_pod("web-hook", cluster.namespace)
    wait_for(lambda: seen, 30, "the preStop GET")
    assert seen[0][0] == "/bye"
    assert seen[0][1].startswith("kube-lifecycle/"), "hooks send the kubelet's User-Agent"
    wait_for(lambda: get_pod(cluster, "web-hook") is None, 30, "the pod gone")


# -- postStart as the kubelet shows it --------------------------------------------------------

CREATING = {"waiting": {"reason": "ContainerCreating"}}


def _state(status: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return container_status(status, name).get("state") or {}


def test_every_status_written_while_post_start_runs_says_container_creating(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """The kubelet runs postStart inside the container's start: until the hook ends, what it
    writes shows the container waiting (ContainerCreating) and the pod Pending, though Docker
    has the container running. `b` starts first, so at least one write comes during the hook
    (the one that says `b` runs)."""
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "sleep 10"]}}}
    stream = open_watch(
        cluster.core.list_namespaced_pod,
        cluster.namespace,
        field_selector="metadata.name=slow-start",
        _request_timeout=90,
    )
    try:
        make_pod(cluster, "slow-start", container("b"), container("c", lifecycle=hook))
        before: list[dict[str, Any]] = []
        while True:  # every status the watch shows until `c` runs
            latest = stream.next(60)["object"].get("status") or {}
            if "running" in _state(latest):
                seen_running = time.time()
                break
            before.append(latest)
    finally:
        stream.close()
    written = [s for s in before if s.get("containerStatuses")]
    assert written, "the node wrote a status before the hook ended"
    for status in written:
        assert _state(status) == CREATING, status
        assert status["phase"] == "Pending", status
        assert condition(status, "Ready").get("status") == "False", status
    assert any("running" in _state(s, "b") for s in written), "a status written during the hook"
    started = _state(latest)["running"]["startedAt"]
    began = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
    assert seen_running - began >= 8.5, "running only once the 10 s hook ended"
    assert latest["phase"] == "Running"
    assert condition(latest, "Ready").get("status") == "True"


def test_four_slow_post_start_hooks_delay_no_other_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """The issue's hole: hooks shared four threads, so while four pods ran slow postStart hooks
    a fifth pod's instant hook did not run at all, and a preStop waited for a slot out of its
    grace period. Now each hook has a thread of its own."""
    slow = {"postStart": {"exec": {"command": ["sh", "-c", SAY.format("slow") + "; sleep 60"]}}}
    names = [f"slow-{i}" for i in range(4)]
    for name in names:
        make_pod(cluster, name, container(lifecycle=slow))

    def hooks_running() -> bool:
        return all("slow" in _logs(cluster, docker_env, name) for name in names)

    wait_for(hooks_running, 60, "four slow postStart hooks running")
    quick = {
        "postStart": {"exec": {"command": ["sh", "-c", SAY.format("poststart")]}},
        "preStop": {"exec": {"command": ["sh", "-c", SAY.format("prestop")]}},
    }
    asked = time.monotonic()
    make_pod(
        cluster,
        "quick",
        container(command=TRAPS_TERM, lifecycle=quick),
        terminationGracePeriodSeconds=30,
    )
    wait_status(cluster, "quick", _running, 15, "running while four slow hooks run")
    assert time.monotonic() - asked < 15
    assert "poststart" in _logs(cluster, docker_env, "quick")
    for name in names:  # still in their hooks, and shown so
        assert _state((get_pod(cluster, name) or {}).get("status") or {}) == CREATING
    cluster.core.patch_namespaced_pod(
        "quick", cluster.namespace, {"metadata": {"finalizers": [FINALIZER]}}
    )
    try:
        asked = time.monotonic()
        cluster.core.delete_namespaced_pod("quick", cluster.namespace)
        wait_for(lambda: "term" in _logs(cluster, docker_env, "quick"), 15, "SIGTERM after preStop")
        assert time.monotonic() - asked < 15, "the preStop waited for nothing"
        assert _logs(cluster, docker_env, "quick") == ["start", "poststart", "prestop", "term"]
    finally:
        cluster.core.patch_namespaced_pod(
            "quick", cluster.namespace, {"metadata": {"finalizers": None}}
        )
