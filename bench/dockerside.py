"""What Docker itself says about the pods' containers, read by the bench on its own socket.

Docker's `State.StartedAt` is the runtime's own start time (not the agent's word), and its
events stream gives the exact moment each container was destroyed, with no polling.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import docker
import requests

from bench.times import parse_time

LABEL_NODE = "io.kubelet-sim.node"
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_TYPE = "io.kubernetes.docker.type"
LABEL_POOL = "io.kubelet-sim.sandbox-pool"
POOL_NAME_PREFIX = "k8s-pool_"  # an unclaimed pool sandbox (kubelet_sim.cri)
DIRECT_SOCKET = "unix:///var/run/docker.sock"
# A remove that fails or times out (an engine that stopped answering) is left, not fatal: the
# cleanup goes on with the next container and the bench still reports.
REMOVE_FAILED = (docker.errors.APIError, requests.exceptions.RequestException)


def connect() -> docker.DockerClient:
    """The engine itself, not the counting proxy: the bench's calls are not the agent's."""
    return docker.DockerClient(base_url=DIRECT_SOCKET)


def app_started_at(dk: docker.DockerClient, node: str, uids: set[str]) -> dict[str, float]:
    """pod uid → StartedAt of its (first) app container, for the pods of `node` in `uids`."""
    found: dict[str, float] = {}
    summaries = dk.api.containers(
        all=True, filters={"label": [f"{LABEL_NODE}={node}", f"{LABEL_TYPE}=container"]}
    )
    for summary in summaries:
        uid = (summary.get("Labels") or {}).get(LABEL_POD_UID, "")
        if uid not in uids:
            continue
        with contextlib.suppress(docker.errors.NotFound):
            state = dk.api.inspect_container(summary["Id"]).get("State") or {}
            started = str(state.get("StartedAt") or "")
            if started and not started.startswith("0001"):
                at = parse_time(started)
                found[uid] = min(found.get(uid, at), at)
    return found


@dataclass(frozen=True)
class PoolCost:
    """The node's unclaimed warm sandboxes at one moment: what its pool holds idle."""

    sandboxes: int
    memory_mib: float  # their cgroups' memory, page cache that may be reclaimed left out


def pool_cost(dk: docker.DockerClient, node: str) -> PoolCost:
    """What the node's sandbox pool holds now, as Docker counts it (docker stats' memory)."""
    listed = dk.api.containers(filters={"label": [f"{LABEL_NODE}={node}", f"{LABEL_POOL}=true"]})
    pooled = [s for s in listed if s["Names"][0].lstrip("/").startswith(POOL_NAME_PREFIX)]
    memory = 0
    for summary in pooled:
        with contextlib.suppress(*REMOVE_FAILED):
            stats = dk.api.stats(summary["Id"], stream=False, one_shot=True)["memory_stats"]
            detail = stats.get("stats") or {}
            cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
            memory += max(0, int(stats.get("usage") or 0) - int(cache))
    return PoolCost(len(pooled), memory / (1 << 20))


def pod_uids_with_containers(dk: docker.DockerClient, node: str) -> set[str]:
    """Pods of `node` that still have any container (sandbox included)."""
    summaries = dk.api.containers(all=True, filters={"label": f"{LABEL_NODE}={node}"})
    return {str((s.get("Labels") or {}).get(LABEL_POD_UID, "")) for s in summaries}


def remove_node_containers(dk: docker.DockerClient, node: str) -> int:
    """Force-remove every container labelled with `node` (cleanup after a run)."""
    return remove_containers_of(dk, {node})


def containers_of(dk: docker.DockerClient, nodes: set[str]) -> list[str]:
    """Ids of the containers of any of `nodes` (one list call, however many nodes)."""
    return [
        str(summary["Id"])
        for summary in dk.api.containers(all=True, filters={"label": LABEL_NODE})
        if (summary.get("Labels") or {}).get(LABEL_NODE) in nodes
    ]


def remove_containers_of(dk: docker.DockerClient, nodes: set[str]) -> int:
    """Force-remove the containers of any of `nodes`; how many went."""
    removed = 0
    for container in containers_of(dk, nodes):
        try:
            dk.api.remove_container(container, v=True, force=True)
            removed += 1
        except docker.errors.APIError:
            continue
        except requests.exceptions.RequestException:
            break  # the engine stopped answering: one timeout, not one per container
    return removed


class DockerEvents:
    """Container events of one node: destroy times per pod uid and counts per action."""

    def __init__(self, dk: docker.DockerClient, node: str) -> None:
        self._lock = threading.Lock()
        self.destroyed: dict[str, float] = {}  # pod uid → last destroy time
        self._events: list[tuple[float, str]] = []
        self._stream: Any = dk.api.events(
            decode=True,
            since=int(time.time()) - 1,
            filters={"type": "container", "label": f"{LABEL_NODE}={node}"},
        )
        self._thread = threading.Thread(target=self._read, name="bench-docker-events", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # closing the stream ends the loop with an error
            for event in self._stream:
                at = int(event.get("timeNano") or 0) / 1e9 or time.time()
                action = str(event.get("Action") or "").split(":")[0].strip()
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                with self._lock:
                    self._events.append((at, action))
                    if action == "destroy" and attrs.get(LABEL_POD_UID):
                        uid = attrs[LABEL_POD_UID]
                        self.destroyed[uid] = max(self.destroyed.get(uid, 0.0), at)

    def counts(self, since: float, until: float) -> Counter[str]:
        with self._lock:
            return Counter(a for t, a in self._events if since <= t < until)

    def destroyed_at(self, uid: str) -> float | None:
        with self._lock:
            return self.destroyed.get(uid)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
