"""A node's containers as the kubelet API streams them: logs, exec, attach, port-forward.

Implements the server's own port (kubelet_sim/server/ports.py's ContainerStreams) on the
process's engine; each session is counted in the node's stats.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from docker.errors import APIError, NotFound

from kubelet_sim import cri
from kubelet_sim.runtime import streams
from kubelet_sim.runtime.containers import explain
from kubelet_sim.runtime.stats import RuntimeStats

if TYPE_CHECKING:
    from kubelet_sim.runtime.engine import DockerEngine


@dataclass(frozen=True, eq=False)
class NodeStreams:
    """The streams of one node's containers (made by its NodeRuntime)."""

    engine: DockerEngine
    stats: RuntimeStats

    @property
    def _api(self) -> Any:
        return self.engine.client.api

    def container_logs(self, container_id: str, options: cri.LogOptions) -> Iterator[bytes]:
        """stdout and stderr as Docker keeps them (json-file), as the kubelet's ReadLogs reads
        them under `options`."""
        self.stats.add("logs")
        try:
            chunks = self._api.logs(
                container_id,
                stdout=True,
                stderr=True,
                stream=True,
                follow=options.follow,
                timestamps=options.timestamps,
                tail="all" if options.tail is None else max(options.tail, 0),
                since=options.since,
            )
        except NotFound as exc:
            raise cri.ContainerNotFound(container_id) from exc
        return cast(Iterator[bytes], chunks)

    def exec_stream(
        self, container_id: str, command: Sequence[str], *, stdin: bool, tty: bool
    ) -> cri.StreamSession:
        self.stats.add("streams")
        with _stream_errors():
            return streams.exec_session(self._api, container_id, list(command), stdin, tty)

    def attach_stream(self, container_id: str, *, stdin: bool) -> cri.StreamSession:
        self.stats.add("streams")
        with _stream_errors():
            return streams.attach_session(self._api, container_id, stdin)

    def pod_connect(self, sandbox_id: str, port: int, timeout: float = 10.0) -> socket.socket:
        """localhost:port as the pod sees it: inside the sandbox's network namespace when this
        process may enter it (root), else the pod's IP from the host (a port bound to the
        pod's loopback only is then out of reach)."""
        self.stats.add("port_forwards")
        try:
            attrs = cast(dict[str, Any], self._api.inspect_container(sandbox_id))
        except (NotFound, APIError) as exc:
            raise cri.StreamError(f"sandbox {sandbox_id[:12]} not found") from exc
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if not pid:
            raise cri.StreamError(f"sandbox {sandbox_id[:12]} is not running")
        try:
            return streams.connect_in_netns(pid, port, timeout)
        except PermissionError:
            pass
        except OSError as exc:
            raise cri.StreamError(str(exc.strerror or exc)) from None
        host = (attrs.get("HostConfig") or {}).get("NetworkMode") == "host"
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        network = self.engine.network
        ip = "127.0.0.1" if host else str((networks.get(network) or {}).get("IPAddress", ""))
        try:
            return streams.connect_to_ip(ip, port, timeout)
        except OSError as exc:
            raise cri.StreamError(f"dial tcp {ip}:{port}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _stream_errors() -> Iterator[None]:
    """Docker's refusal to open an exec or attach, as the runtime's StreamError."""
    try:
        yield
    except NotFound as exc:  # before APIError, which it is
        raise cri.StreamError(str(exc)) from None
    except APIError as exc:
        raise cri.StreamError(explain(exc)) from None
