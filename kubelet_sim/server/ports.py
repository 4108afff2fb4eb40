"""The server's own port to the node's containers: what the kubelet API streams from them.

The server names no runtime: the node's runtime hands it one object with these calls
(runtime/node_streams.py on Docker), as the kubelet's streaming server talks to the CRI.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from typing import Protocol

from kubelet_sim import cri


class LogSource(Protocol):
    """/containerLogs: a container's stdout and stderr."""

    def container_logs(self, container_id: str, options: cri.LogOptions) -> Iterator[bytes]: ...


class StreamRuntime(Protocol):
    """/exec, /attach, /run and /portForward: sessions with a container or a pod's network."""

    def exec_stream(
        self, container_id: str, command: Sequence[str], *, stdin: bool, tty: bool
    ) -> cri.StreamSession: ...

    def attach_stream(self, container_id: str, *, stdin: bool) -> cri.StreamSession: ...

    def pod_connect(self, sandbox_id: str, port: int, timeout: float = 10.0) -> socket.socket: ...


class ContainerStreams(LogSource, StreamRuntime, Protocol):
    """Everything the kubelet API streams from a node's containers."""
