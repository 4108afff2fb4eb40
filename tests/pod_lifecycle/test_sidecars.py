"""Sidecars (init containers with `restartPolicy: Always`) through a whole life, on real Docker:
start order, restarts, the startup probe gate, and termination in reverse order.

What each container does goes to a file on a hostPath volume owned by the test (so the agent
runs with --allow-privileged), read even after the pod is gone. Servers before v1.29 drop
`restartPolicy` from init containers, so on v1.24 (CI's second real pass) these tests are
skipped; the fake and the default real server (v1.34) keep it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, server_has_field, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    condition,
    container,
    container_status,
    containers_named,
    event_messages,
    get_pod,
    make_pod,
    running_ready,
    wait_status,
)


@pytest.fixture(autouse=True)
def _needs_sidecars(cluster: ApiUnderTest) -> None:
    if not server_has_field(cluster.api, "io.k8s.api.core.v1.Container", "restartPolicy"):
        pytest.skip(
            "the API server's Container has no restartPolicy (v1.24 drops it from init "
            "containers; sidecars are on by default from v1.29)"
        )


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "log"
    path.mkdir()
    return path


@pytest.fixture
def agent(privileged_agent: RunningAgent) -> RunningAgent:
    """The log directory is a hostPath volume: the agent runs with --allow-privileged."""
    return privileged_agent


def _step(name: str, on_term: str = "exit 0") -> list[str]:
    """Write `<name>-start`, then `<name>-term` on SIGTERM and run `on_term`."""
    return [
        "sh",
        "-c",
        f"echo {name}-start >> /log/steps; "
        f"trap 'echo {name}-term >> /log/steps; {on_term}' TERM; "
        "while :; do sleep 1 & wait $!; done",
    ]


def _log_volume(tmp_path: Path) -> dict[str, Any]:
    return {"name": "log", "hostPath": {"path": str(tmp_path), "type": "Directory"}}


LOG_MOUNT = [{"name": "log", "mountPath": "/log"}]
PRE_STOP = {"preStop": {"exec": {"command": ["sh", "-c", "echo s1-prestop >> /log/steps"]}}}


def _steps(tmp_path: Path) -> list[str]:
    path = tmp_path / "steps"
    return path.read_text().split() if path.exists() else []


def _sidecar(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    return container(name, command, restartPolicy="Always", volumeMounts=LOG_MOUNT, **extra)


def _pod(
    cluster: ApiUnderTest,
    name: str,
    log_dir: Path,
    app: list[str],
    *init: dict[str, Any],
    **spec: Any,
) -> dict[str, Any]:
    """A pod of an `app` container (its command) after the `init` containers, the log
    directory mounted in the app (the sidecars mount it themselves)."""
    return make_pod(
        cluster,
        name,
        container("app", app, volumeMounts=LOG_MOUNT),
        initContainers=list(init),
        volumes=[_log_volume(log_dir)],
        **spec,
    )


def _file_probe(path: str, **extra: Any) -> dict[str, Any]:
    """A probe each second that succeeds once `path` exists (the test _touch-es it)."""
    return {"exec": {"command": ["test", "-f", path]}, "periodSeconds": 1, **extra}


INIT_RAN = container("init", ["sh", "-c", "echo init-ran >> /log/steps"], volumeMounts=LOG_MOUNT)


def _docker_container(docker_env: DockerEnv, uid: str, name: str, running: bool = True) -> str:
    def find() -> str | None:
        found = containers_named(docker_env, uid, name, running=running)
        return found[0].id if found else None

    found: str = wait_for(find, 10, f"container {name} in Docker")
    return found


def _touch(docker_env: DockerEnv, pod: dict[str, Any], name: str, path: str) -> None:
    """Create `path` in the pod's running container `name` (what its probe looks for)."""
    container_id = _docker_container(docker_env, pod["metadata"]["uid"], name)
    exec_id = docker_env.client.api.exec_create(container_id, ["touch", path])
    docker_env.client.api.exec_start(exec_id)


def test_sidecars_start_first_restart_on_their_own_and_stop_last_in_reverse(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent, log_dir: Path
) -> None:
    slow_exit = "sleep 1; echo {}-exit >> /log/steps; exit 0"
    pod = _pod(
        cluster,
        "sidecars",
        log_dir,
        _step("app", slow_exit.format("app")),
        _sidecar("s1", _step("s1"), lifecycle=PRE_STOP),
        INIT_RAN,
        _sidecar("s2", _step("s2", slow_exit.format("s2"))),
        terminationGracePeriodSeconds=20,
        # The node has no cluster DNS: with ClusterFirst every sync would say MissingClusterDNS
        # and the kubelet's spam filter (25 events a pod) would drop the Killing events below.
        dnsPolicy="Default",
    )
    st = wait_status(cluster, "sidecars", running_ready, 30, "Running and Ready")
    assert _steps(log_dir) == ["s1-start", "init-ran", "s2-start", "app-start"]
    s1, init, s2 = st["initContainerStatuses"]
    for sidecar in (s1, s2):
        assert "running" in sidecar["state"]
        assert (sidecar["started"], sidecar["ready"], sidecar["restartCount"]) == (True, True, 0)
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert (init["started"], init["ready"]) == (False, True)
    assert condition(st, "Initialized")["status"] == "True"

    # A sidecar that dies is restarted alone; the pod stays Running.
    uid = pod["metadata"]["uid"]
    docker_env.client.api.kill(_docker_container(docker_env, uid, "s1"))
    st = wait_status(
        cluster,
        "sidecars",
        lambda s: (
            container_status(s, "s1", init=True).get("restartCount") == 1
            and "running" in container_status(s, "s1", init=True)["state"]
        ),
        30,
        "s1 restarted",
    )
    s1 = container_status(st, "s1", init=True)
    assert s1["lastState"]["terminated"]["exitCode"] == 137
    assert container_status(st, "app")["restartCount"] == 0
    assert st["phase"] == "Running"
    wait_for(lambda: _steps(log_dir)[-1:] == ["s1-start"], 10, "s1 started again")

    # Deleted: the app container stops first, then the sidecars, the last one first.
    cluster.core.delete_namespaced_pod("sidecars", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "sidecars") is None, 40, "the pod gone")
    ending = _steps(log_dir)[5:]
    # s1's preStop hook runs at once, beside the app container's SIGTERM (in either order)
    assert sorted(ending) == sorted(["app-term", "app-exit", "s1-prestop", "s2-term", "s2-exit",
                                     "s1-term"]), _steps(log_dir)  # fmt: skip
    in_turn = [step for step in ending if step != "s1-prestop"]
    assert in_turn == ["app-term", "app-exit", "s2-term", "s2-exit", "s1-term"], ending
    assert ending.index("s1-prestop") < ending.index("s1-term"), ending
    stopping = {f"Stopping container {name}" for name in ("app", "s1", "s2")}
    wait_for(
        lambda: stopping <= set(event_messages(cluster, "sidecars", "Killing")),
        10,
        "a Killing event for each container",
    )


def test_a_finished_pod_stops_its_sidecars_and_succeeds(
    cluster: ApiUnderTest, agent: RunningAgent, log_dir: Path
) -> None:
    _pod(
        cluster,
        "done",
        log_dir,
        ["sh", "-c", "echo app-ran >> /log/steps"],
        _sidecar("side", _step("side")),
        restart="Never",
    )
    st = wait_status(cluster, "done", lambda s: s.get("phase") == "Succeeded", 30, "Succeeded")
    side = container_status(st, "side", init=True)
    assert side["state"]["terminated"]["exitCode"] == 0  # it trapped the SIGTERM
    assert (side["started"], side["ready"]) == (False, False)
    initialized = condition(st, "Initialized")
    assert (initialized["status"], initialized.get("reason")) == ("True", "PodCompleted")
    ready = condition(st, "ContainersReady")
    assert (ready["status"], ready.get("reason")) == ("False", "PodCompleted")
    assert _steps(log_dir) == ["side-start", "app-ran", "side-term"]


def test_a_sidecars_startup_probe_holds_the_next_init_container(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent, log_dir: Path
) -> None:
    side = _sidecar("side", _step("side"), startupProbe=_file_probe("/tmp/up", failureThreshold=60))
    pod = _pod(cluster, "gated", log_dir, _step("app"), side, INIT_RAN)
    wait_for(lambda: event_messages(cluster, "gated", "Unhealthy"), 20, "a failed startup probe")
    st = get_pod(cluster, "gated")
    assert st is not None
    status = st["status"]
    assert status["phase"] == "Pending"
    side = container_status(status, "side", init=True)
    assert "running" in side["state"]
    assert side["started"] is False
    assert container_status(status, "init", init=True)["state"] == {
        "waiting": {"reason": "PodInitializing"}
    }
    assert _steps(log_dir) == ["side-start"]  # init has not run
    _touch(docker_env, pod, "side", "/tmp/up")
    st = wait_status(cluster, "gated", running_ready, 30, "Running and Ready")
    assert _steps(log_dir) == ["side-start", "init-ran", "app-start"]
    assert container_status(st, "side", init=True)["started"] is True


def test_a_sidecars_readiness_holds_the_pods_ready(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent, log_dir: Path
) -> None:
    side = _sidecar("side", _step("side"), readinessProbe=_file_probe("/tmp/ready"))
    pod = _pod(cluster, "unready", log_dir, _step("app"), side)
    st = wait_status(
        cluster, "unready", lambda s: s.get("phase") == "Running", 30, "Running, not Ready"
    )
    ready = condition(st, "ContainersReady")
    assert (ready["status"], ready["message"]) == (
        "False",
        "containers with unready status: [side]",
    )
    assert container_status(st, "side", init=True)["started"] is True  # readiness gates no start
    _touch(docker_env, pod, "side", "/tmp/ready")
    wait_status(cluster, "unready", running_ready, 20, "Ready once the sidecar is")
