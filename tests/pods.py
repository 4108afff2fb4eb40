"""Helpers for pod tests: bodies, reading status, and the pod's containers in Docker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubelet_sim import cri
from kubelet_sim.kube.client import connect
from kubelet_sim.kube.rest import ApiError, call_json
from kubelet_sim.tools.trace import Step, collect
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.manifests import pod_manifest

BUSYBOX = "kubelet-sim.local/busybox:test"
# PID 1 ignores SIGTERM unless it traps it; this one exits at once on SIGTERM.
SLEEP_FOREVER = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]


def container(name: str = "c", command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX, "command": command or SLEEP_FOREVER, **extra}


def make_pod(
    cluster: ApiUnderTest,
    name: str,
    *containers: dict[str, Any],
    restart: str = "Always",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body = pod_manifest(
        name,
        list(containers) or [container()],
        labels=labels,
        annotations=annotations,
        **{
            "nodeName": cluster.node_name,
            "restartPolicy": restart,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            **spec,
        },
    )
    if spec.get("automountServiceAccountToken", False) is None:
        del body["spec"]["automountServiceAccountToken"]
    created = cluster.core.create_namespaced_pod(cluster.namespace, body)
    return cluster.api.sanitize_for_serialization(created)  # type: ignore[no-any-return]


def get_pod(cluster: ApiUnderTest, name: str) -> dict[str, Any] | None:
    """The pod as the server sent it (raw JSON: every field, and no model round trip, whose
    CPU cost, polled, slowed the agent it was waiting for)."""
    try:
        return call_json(cluster.core.read_namespaced_pod, name, cluster.namespace)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def status_of(cluster: ApiUnderTest, name: str) -> dict[str, Any]:
    pod = get_pod(cluster, name)
    return (pod or {}).get("status") or {}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def container_status(status: dict[str, Any], name: str = "c", init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((c for c in status.get(key) or [] if c["name"] == name), {})


def wait_status(
    cluster: ApiUnderTest, name: str, predicate: Any, timeout: float, what: str
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        st = status_of(cluster, name)
        return st if predicate(st) else None

    result: dict[str, Any] = wait_for(check, timeout, f"{name}: {what}")
    return result


def wait_condition(
    cluster: ApiUnderTest, name: str, kind: str, timeout: float = 30, **wanted: str
) -> dict[str, Any]:
    """The pod's status once its condition `kind` has the `wanted` fields (status="True",
    reason="Unschedulable", ...)."""

    def has(st: dict[str, Any]) -> bool:
        found = condition(st, kind)
        return all(found.get(key) == value for key, value in wanted.items())

    what = " ".join([kind, *(f"{key}={value}" for key, value in wanted.items())])
    return wait_status(cluster, name, has, timeout, what)


@dataclass(frozen=True)
class SeenContainer:
    """A container as one `docker ps -a` saw it (no inspect: it may be gone a moment later)."""

    id: str
    name: str
    labels: dict[str, str]
    status: str  # created, running, exited, ...


def pod_containers(docker_env: DockerEnv, uid: str) -> list[SeenContainer]:
    listed = docker_env.client.api.containers(
        all=True, filters={"label": f"{cri.LABEL_POD_UID}={uid}"}
    )
    return [
        SeenContainer(c["Id"], c["Names"][0].lstrip("/"), c.get("Labels") or {}, c["State"])
        for c in listed
    ]


def containers_named(
    docker_env: DockerEnv, uid: str, name: str = "c", *, running: bool = False
) -> list[SeenContainer]:
    """The Docker containers of the pod's container `name`: every attempt, or with `running`
    the running ones only."""
    return [
        c
        for c in pod_containers(docker_env, uid)
        if c.labels.get(cri.LABEL_CONTAINER_NAME) == name and (not running or c.status == "running")
    ]


def ended_output(cluster: ApiUnderTest, docker_env: DockerEnv, name: str) -> str:
    """What the pod's one app container printed (stdout and stderr), once the pod (restart
    policy Never) ran to its end; it must have succeeded."""
    wait_status(cluster, name, lambda s: s.get("phase") in ("Succeeded", "Failed"), 30, "the end")
    status = status_of(cluster, name)
    assert status["phase"] == "Succeeded", status
    uid = cluster.core.read_namespaced_pod(name, cluster.namespace).metadata.uid
    (app,) = [
        c
        for c in pod_containers(docker_env, uid)
        if c.labels.get(cri.LABEL_CONTAINER_NAME) != cri.SANDBOX_CONTAINER_NAME
    ]
    return str(docker_env.client.api.logs(app.id, stdout=True, stderr=True).decode())


def running_ready(st: dict[str, Any]) -> bool:
    return st.get("phase") == "Running" and condition(st, "Ready").get("status") == "True"


def wait_for_events(cluster: ApiUnderTest, name: str, *reasons: str, timeout: float = 10.0) -> None:
    """Events go out on the agent's own thread, after the status that a test waited for."""

    def seen() -> bool:
        return set(reasons) <= {e.reason for e in kubelet_events(cluster, name)}

    wait_for(seen, timeout, f"the kubelet's events {sorted(reasons)} for {name}")


def event_messages(cluster: ApiUnderTest, name: str, reason: str) -> list[str]:
    """The messages of the kubelet's events of one reason for a pod, oldest first."""
    return [e.message for e in kubelet_events(cluster, name) if e.reason == reason]


def kubelet_events(cluster: ApiUnderTest, name: str) -> list[Any]:
    items = cluster.core.list_namespaced_event(cluster.namespace).items
    return [e for e in items if e.involved_object.name == name and e.source.component == "kubelet"]


def traced(cluster: ApiUnderTest, runtime: Any, name: str) -> list[Step]:
    """The pod's steps once the node journaled its Ready write (just after the write itself,
    which the test may have seen first)."""
    kube = connect(cluster.kubeconfig)

    def complete() -> list[Step] | None:
        _, steps = collect(kube, runtime, cluster.namespace, name)
        done = any(s.step == "Ready written" and s.time is not None for s in steps)
        return steps if done else None

    steps: list[Step] = wait_for(complete, 10, f"{name}: the node's Ready write journaled")
    return steps
