"""Probes on real containers: readiness drives Ready, liveness restarts, startup holds the others.

The probes reach the pod on its IP on the Docker bridge of the test's own engine (httpd and nc
of busybox serve them); results are read in the pod's status and the kubelet's events.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, wait_for
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

FAST = {"periodSeconds": 1, "failureThreshold": 1}
# httpd serves /www on port 8080 (named "http"); the trap makes SIGTERM end the pod at once.
HTTPD = [
    "sh",
    "-c",
    "mkdir -p /www && echo ok > /www/healthz && busybox httpd -p 8080 -h /www"
    " && trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done",
]


def _exec(docker_env: DockerEnv, cluster: ApiUnderTest, pod: str, *cmd: str) -> None:
    uid = (get_pod(cluster, pod) or {})["metadata"]["uid"]
    app = containers_named(docker_env, uid, running=True)[0]
    result = docker_env.client.containers.get(app.id).exec_run(list(cmd))
    assert result.exit_code == 0, result.output


def _ready(st: dict[str, Any]) -> bool:
    return condition(st, "Ready").get("status") == "True" and bool(
        container_status(st).get("ready")
    )


def test_exec_readiness_gates_ready_both_ways(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    probe = {"exec": {"command": ["test", "-f", "/tmp/ready"]}, **FAST}
    make_pod(cluster, "r", container(readinessProbe=probe))
    st = wait_status(
        cluster, "r", lambda s: s.get("phase") == "Running", 30, "running, not yet ready"
    )
    wait_for(lambda: event_messages(cluster, "r", "Unhealthy"), 20, "a failed readiness probe")
    st = get_pod(cluster, "r")["status"]  # type: ignore[index]
    assert container_status(st)["ready"] is False
    assert container_status(st)["started"] is True
    assert condition(st, "ContainersReady")["reason"] == "ContainersNotReady"
    assert event_messages(cluster, "r", "Unhealthy")[0] == "Readiness probe failed: "
    _exec(docker_env, cluster, "r", "touch", "/tmp/ready")
    wait_status(cluster, "r", _ready, 20, "Ready once the probe passes")
    _exec(docker_env, cluster, "r", "rm", "/tmp/ready")
    st = wait_status(cluster, "r", lambda s: not _ready(s), 20, "unready again")
    assert container_status(st)["restartCount"] == 0, "readiness never restarts anything"


def _restarted_by_liveness(
    cluster: ApiUnderTest, pod: str, probe: dict[str, Any], what: str
) -> dict[str, Any]:
    """A `sleep 3600` container whose FAST liveness `probe` (1s grace) fails: its pod's status
    once restarted (`what` names that wait), after the kubelet's Killing event said why."""
    probe = {**probe, "terminationGracePeriodSeconds": 1, **FAST}
    make_pod(cluster, pod, container(command=["sleep", "3600"], livenessProbe=probe))
    st = wait_status(
        cluster, pod, lambda s: container_status(s).get("restartCount", 0) >= 1, 60, what
    )
    wait_for(lambda: event_messages(cluster, pod, "Killing"), 20, "the Killing event")
    assert event_messages(cluster, pod, "Killing")[0] == (
        "Container c failed liveness probe, will be restarted"
    )
    return st


def test_failed_liveness_restarts_with_the_kubelets_events(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    st = _restarted_by_liveness(
        cluster,
        "l",
        {"exec": {"command": ["sh", "-c", "echo dead; exit 1"]}},
        "a restart after the liveness probe failed",
    )
    last = container_status(st)["lastState"]["terminated"]
    assert last["exitCode"] == 137, "sleep ignores SIGTERM: killed after the probe's grace"
    assert last["reason"] == "Error"
    assert "Liveness probe failed: dead\n" in event_messages(cluster, "l", "Unhealthy")
    assert st["phase"] == "Running"


def test_an_exec_liveness_probe_past_its_timeout_fails_and_restarts(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """container_probe.go "should be restarted with an exec liveness probe with timeout":
    ExecProbeTimeout (on since 1.20), the command's timeout is a failure."""
    st = _restarted_by_liveness(
        cluster,
        "slow",
        {"exec": {"command": ["sleep", "10"]}, "timeoutSeconds": 1},
        "a restart after the exec probe timed out",
    )
    assert st["phase"] == "Running"
    assert 'Liveness probe failed: command "sleep 10" timed out' in event_messages(
        cluster, "slow", "Unhealthy"
    )


def test_http_and_tcp_probes_on_named_ports(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    http = {"httpGet": {"path": "/healthz", "port": "http"}, **FAST}
    # not FAST: the first probe may come before httpd listens, and one failure would restart it
    tcp = {"tcpSocket": {"port": "http"}, "periodSeconds": 1, "failureThreshold": 5}
    make_pod(
        cluster,
        "web",
        container(
            command=HTTPD,
            ports=[{"name": "http", "containerPort": 8080}],
            readinessProbe=http,
            livenessProbe=tcp,
        ),
    )
    wait_status(cluster, "web", _ready, 30, "Ready through httpGet")
    _exec(docker_env, cluster, "web", "rm", "/www/healthz")
    st = wait_status(cluster, "web", lambda s: not _ready(s), 20, "unready on a 404")
    assert container_status(st)["restartCount"] == 0, "the tcp liveness probe still passes"
    wait_for(
        lambda: (
            "Readiness probe failed: HTTP probe failed with statuscode: 404"
            in event_messages(cluster, "web", "Unhealthy")
        ),
        20,
        "the 404 event",
    )


def test_tcp_probe_on_a_closed_port_says_connection_refused(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    make_pod(cluster, "closed", container(readinessProbe={"tcpSocket": {"port": 9}, **FAST}))
    wait_for(lambda: event_messages(cluster, "closed", "Unhealthy"), 30, "a failed tcp probe")
    pod = get_pod(cluster, "closed") or {}
    ip = pod["status"]["podIP"]
    assert event_messages(cluster, "closed", "Unhealthy")[0] == (
        f"Readiness probe failed: dial tcp {ip}:9: connect: connection refused"
    )
    assert container_status(pod["status"])["ready"] is False


def test_startup_probe_holds_started_then_releases(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    startup = {
        "exec": {"command": ["test", "-f", "/tmp/up"]},
        "periodSeconds": 1,
        "failureThreshold": 120,
    }
    make_pod(cluster, "s", container(startupProbe=startup))
    wait_for(lambda: event_messages(cluster, "s", "Unhealthy"), 30, "a failed startup probe")
    st = get_pod(cluster, "s")["status"]  # type: ignore[index]
    assert (container_status(st)["started"], container_status(st)["ready"]) == (False, False)
    assert event_messages(cluster, "s", "Unhealthy")[0] == "Startup probe failed: "
    _exec(docker_env, cluster, "s", "touch", "/tmp/up")
    st = wait_status(cluster, "s", _ready, 20, "started and Ready")
    assert container_status(st)["started"] is True


class _Health:
    """A grpc.health.v1 server on 127.0.0.1 whose answer the test sets."""

    def __init__(self) -> None:
        import grpc

        from kubelet_sim.prober.grpc_health import encode_request

        self.status = 2  # NOT_SERVING
        self.asked: list[bytes] = []

        def check(request: bytes, _context: Any) -> bytes:
            self.asked.append(request)
            return b"\x08" + bytes([self.status])

        handler = grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)}
        )
        self.server = grpc.server(ThreadPoolExecutor(2), handlers=[handler])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.encode = encode_request


@pytest.fixture
def health() -> Iterator[_Health]:
    server = _Health()
    yield server
    server.server.stop(0)


def test_grpc_readiness_asks_the_health_service(
    cluster: ApiUnderTest, privileged_agent: RunningAgent, health: _Health
) -> None:
    """A hostNetwork pod's probe reaches the node's address: here a health server of the
    test's own on loopback (so no traffic leaves the machine)."""
    probe = {"grpc": {"port": health.port, "service": "db"}, **FAST}
    make_pod(cluster, "g", container(readinessProbe=probe), hostNetwork=True)
    wait_for(
        lambda: (
            'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")'
            in event_messages(cluster, "g", "Unhealthy")
        ),
        30,
        "the NOT_SERVING answer",
    )
    assert health.asked[0] == health.encode("db"), "the probe names its service"
    health.status = 1  # SERVING
    wait_status(cluster, "g", _ready, 20, "Ready once SERVING")
