"""What the kubelet API serves (pkg/kubelet/server/server.go), one function per path.

Each route answers through a small `Reply` so that it is tested without sockets; the HTTP
server (`http.py`) authenticates first and turns a Reply into bytes on the wire.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from urllib.parse import parse_qs

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.attempts import attempts_of
from kubelet_sim.server.node_metrics import NodeSample, render_node_metrics
from kubelet_sim.server.ports import LogSource
from kubelet_sim.server.usage import NodeUsage, PodUsage, resource_metrics, summary

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
_LOGS = re.compile(r"^/containerLogs/([^/]+)/([^/]+)/([^/]+)$")


class NodeView(Protocol):
    """What the server reads of its node (assembly/served_node.py gives it)."""

    node_name: str

    def pods(self) -> list[Json]: ...

    def containers(self, uid: str) -> Sequence[cri.ObservedContainer]: ...

    def health(self) -> tuple[bool, str]: ...

    def metrics(self) -> NodeSample: ...

    def usage(self) -> tuple[NodeUsage, list[PodUsage]]: ...


@dataclass
class Reply:
    status: int
    body: Iterable[bytes] = ()
    content_type: str = "text/plain; charset=utf-8"
    close: Callable[[], None] = field(default=lambda: None)  # ends a stream the client left
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: int, text: str, headers: Iterable[tuple[str, str]] = ()) -> Reply:
        return cls(status, [text.encode()], headers=tuple(headers))

    @classmethod
    def json(cls, status: int, obj: Json) -> Reply:
        return cls(status, [json.dumps(obj).encode()], "application/json")


def route(node: NodeView, logs: LogSource, path: str, query: str) -> Reply:
    if path == "/healthz":
        healthy, why = node.health()
        return Reply.text(200, "ok") if healthy else Reply.text(500, f"healthz check failed: {why}")
    if path in ("/pods", "/pods/"):
        items = node.pods()
        return Reply.json(
            200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        )
    if path == "/metrics":
        return Reply(200, [render_node_metrics(node.metrics()).encode()], PROMETHEUS)
    if path == "/metrics/resource":
        return Reply(200, [resource_metrics(*node.usage()).encode()], PROMETHEUS)
    if path == "/stats/summary":
        node_usage, pods = node.usage()
        return Reply.json(200, summary(node.node_name, node_usage, pods))
    found = _LOGS.match(path)
    if found:
        namespace, pod, container = found.groups()
        return container_logs(node, logs, namespace, pod, container, parse_qs(query))
    return Reply.text(404, "404 page not found\n")


def container_logs(
    node: NodeView,
    logs: LogSource,
    namespace: str,
    pod_name: str,
    container: str,
    query: dict[str, list[str]],
) -> Reply:
    """getContainerLogs: the pod by namespace and name, its container's latest (or previous)
    attempt, Docker's log of it under the options kubectl logs sends."""
    try:
        options = _LogOptions.parse(query)
    except ValueError as exc:
        return Reply.text(422, f"{exc}\n")
    pod = find_pod(node, namespace, pod_name)
    if pod is None:
        return Reply.text(404, f'pod "{pod_name}/{namespace}" does not exist\n')
    spec = pod.get("spec") or {}
    names = [
        c.get("name")
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or ()
    ]
    if container not in names:
        return Reply.text(404, f"container {container} is not valid for pod {pod_name}\n")
    attempts = attempts_of(node.containers(str(pod["metadata"].get("uid"))), container)
    index = 1 if options.previous else 0
    if len(attempts) <= index:
        if options.previous:
            return Reply.text(
                400,
                f'previous terminated container "{container}" in pod "{pod_name}" not found\n',
            )
        return Reply.text(
            400,
            f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating\n',
        )
    try:
        chunks = logs.container_logs(attempts[index].id, options.read)
    except cri.ContainerNotFound:
        return Reply.text(404, f'container "{container}" in pod "{pod_name}" is not available\n')
    close = getattr(chunks, "close", lambda: None)
    return Reply(200, _limited(chunks, options.limit_bytes), close=close)


def find_pod(node: NodeView, namespace: str, name: str, uid: str = "") -> Json | None:
    """GetPodByName (and the uid when the path names one)."""
    for pod in node.pods():
        meta = pod.get("metadata") or {}
        if meta.get("namespace") == namespace and meta.get("name") == name:
            return pod if not uid or meta.get("uid") == uid else None
    return None


def _limited(chunks: Iterable[bytes], limit: int | None) -> Iterator[bytes]:
    if limit is None:
        yield from chunks
        return
    left = limit
    for chunk in chunks:
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


@dataclass(frozen=True)
class _LogOptions:
    read: cri.LogOptions  # what the runtime reads
    previous: bool = False
    limit_bytes: int | None = None

    @classmethod
    def parse(cls, query: dict[str, list[str]]) -> _LogOptions:
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        def flag(name: str) -> bool:
            return (one(name) or "").lower() in ("true", "1")

        def number(name: str) -> int | None:
            text = one(name)
            if text is None:
                return None
            value = int(text)
            if value < 0 or (name != "tailLines" and value == 0):
                raise ValueError(f"{name}: Invalid value: {value}: must be greater than 0")
            return value

        since_seconds, since_time = number("sinceSeconds"), one("sinceTime")
        if since_seconds is not None and since_time is not None:
            raise ValueError("at most one of `sinceTime` or `sinceSeconds` may be specified")
        since = None
        if since_time is not None:
            since = datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp()
        elif since_seconds is not None:
            since = datetime.now().timestamp() - since_seconds
        read = cri.LogOptions(
            follow=flag("follow"),
            tail=number("tailLines"),
            since=since,
            timestamps=flag("timestamps"),
        )
        return cls(read, previous=flag("previous"), limit_bytes=number("limitBytes"))
