"""Docker inspect JSON → ObservedContainer, with dockershim's reading of Docker's State. Pure."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from kubelet_sim import cri

DOCKER_ZERO_TIME_PREFIX = "0001-01-01"  # Go's zero time: Docker's "never"


def parse_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 (nanoseconds, Z) as an aware datetime; its zero time means never."""
    if not value or value.startswith(DOCKER_ZERO_TIME_PREFIX):
        return None
    try:
        return datetime.fromisoformat(value)  # 3.11 takes the Z and drops digits past micros
    except ValueError:
        return None


def container_state(state: dict[str, Any]) -> cri.ContainerState:
    """Running (also paused/restarting: the process exists), exited, or created.

    As dockershim: finished, dead, or a failed start (never started, exit code or error set) is
    exited, so the pod logic sees a terminated container (ContainerCannotRun) and restarts it.
    """
    if state.get("Running"):
        return cri.ContainerState.RUNNING
    if parse_time(state.get("FinishedAt")) is not None or state.get("Dead"):
        return cri.ContainerState.EXITED
    if state.get("ExitCode") or state.get("Error"):
        return cri.ContainerState.EXITED
    status = state.get("Status")
    if status == "created":
        return cri.ContainerState.CREATED
    if status in ("exited", "dead", "removing"):
        return cri.ContainerState.EXITED
    return cri.ContainerState.UNKNOWN


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def pod_of(labels: dict[str, str]) -> cri.PodRef | None:
    """The pod a container belongs to, from its labels; None for containers not made by us."""
    uid = labels.get(cri.LABEL_POD_UID)
    if not uid:
        return None
    return cri.PodRef(
        node=labels.get(cri.LABEL_NODE, ""),
        name=labels.get(cri.LABEL_POD_NAME, ""),
        namespace=labels.get(cri.LABEL_POD_NAMESPACE, ""),
        uid=uid,
    )


def claimed_pod(labels: dict[str, str], name: str) -> cri.PodRef | None:
    """The pod a claimed pool sandbox belongs to: pool labels, and the pod's dockershim name
    `k8s_POD_<pod>_<namespace>_<uid>_<attempt>` (pod names, namespaces and uids have no `_`).
    None for an unclaimed one: it is no pod's, and the agent never counts it."""
    if labels.get(cri.LABEL_POOL) != "true":
        return None
    parts = name.lstrip("/").split("_")
    if len(parts) != 6 or parts[:2] != ["k8s", cri.SANDBOX_CONTAINER_NAME] or not parts[4]:
        return None
    return cri.PodRef(
        node=labels.get(cri.LABEL_NODE, ""), name=parts[2], namespace=parts[3], uid=parts[4]
    )


def observed_from_inspect(
    attrs: dict[str, Any], image_id: str = ""
) -> cri.ObservedContainer | None:
    """One `docker inspect` result in CRI terms; `image_id` is the kubelet's imageID string."""
    config = attrs.get("Config") or {}
    labels: dict[str, str] = config.get("Labels") or {}
    pod = pod_of(labels) or claimed_pod(labels, str(attrs.get("Name", "")))
    if pod is None:
        return None
    is_sandbox = labels.get(cri.LABEL_CONTAINER_TYPE) == "podsandbox"
    name = cri.SANDBOX_CONTAINER_NAME if is_sandbox else labels.get(cri.LABEL_CONTAINER_NAME, "")
    state_json = attrs.get("State") or {}
    state = container_state(state_json)
    network = attrs.get("NetworkSettings") or {}
    return cri.ObservedContainer(
        id=str(attrs.get("Id", "")),
        pod=pod,
        name=name,
        attempt=_int(labels.get(cri.LABEL_RESTART_COUNT), _attempt_from_name(attrs)),
        state=state,
        image=str(config.get("Image", "")),
        image_id=image_id,
        spec_hash=labels.get(cri.LABEL_CONTAINER_HASH, ""),
        created_at=parse_time(attrs.get("Created")),
        started_at=parse_time(state_json.get("StartedAt")),
        finished_at=parse_time(state_json.get("FinishedAt")),
        exit_code=int(state_json.get("ExitCode", 0))
        if state == cri.ContainerState.EXITED
        else None,
        oom_killed=bool(state_json.get("OOMKilled")),
        error=str(state_json.get("Error") or ""),
        ip=_sandbox_ip(network) if is_sandbox else "",
        pid=int(state_json.get("Pid") or 0)
        if is_sandbox and state == cri.ContainerState.RUNNING
        else 0,
    )


def _sandbox_ip(network: dict[str, Any]) -> str:
    """The default bridge's address, else the first address on a network the sandbox joined."""
    if network.get("IPAddress"):
        return str(network["IPAddress"])
    for attached in (network.get("Networks") or {}).values():
        if (attached or {}).get("IPAddress"):
            return str(attached["IPAddress"])
    return ""


def _attempt_from_name(attrs: dict[str, Any]) -> int:
    """The `_<attempt>` suffix of a dockershim name, for containers that lack the label."""
    name = str(attrs.get("Name", ""))
    return _int(name.rsplit("_", 1)[-1]) if "_" in name else 0


def stats_from_docker(raw: dict[str, Any]) -> cri.ContainerStats:
    """Docker's stats answer (cgroup v1 or v2) as the kubelet's summary counts it."""
    cpu = ((raw.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage") or 0
    memory = raw.get("memory_stats") or {}
    usage = int(memory.get("usage") or 0)
    detail = memory.get("stats") or {}
    inactive = detail.get("total_inactive_file", detail.get("inactive_file", 0)) or 0
    read = parse_time(str(raw.get("read") or ""))
    return cri.ContainerStats(
        cpu_seconds=int(cpu) / 1e9,
        memory_working_set_bytes=max(usage - int(inactive), 0),
        memory_usage_bytes=usage,
        timestamp=read.timestamp() if read is not None else time.time(),
    )
