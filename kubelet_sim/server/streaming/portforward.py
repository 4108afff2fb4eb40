"""port-forward over SPDY streams (the kubelet's cri/streaming/portforward/httpstream.go).

Each forwarded connection is a pair of streams sharing a requestID: `error` (the node writes
why a forward failed) and `data` (the bytes). A complete pair is dialled to localhost:port
inside the pod; a pair left half-open for 30 s is told so on its error stream.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kubelet_sim import cri
from kubelet_sim.server.streaming.spdy import Connection, Stream

PROTOCOLS = ("portforward.k8s.io",)
STREAM_CREATION_TIMEOUT = 30.0

Dial = Callable[[int], socket.socket]  # port → a connection inside the pod (cri.StreamError)


@dataclass
class _Pair:
    request_id: str
    error: Stream | None = None
    data: Stream | None = None


class PortForward:
    """One SPDY connection's forwards to one pod: pairs streams, dials, copies both ways."""

    def __init__(self, sandbox_id: str, dial: Dial) -> None:
        self.sandbox_id, self.dial = sandbox_id, dial
        self.conn: Connection | None = None
        self._pairs: dict[str, _Pair] = {}
        self._lock = threading.Lock()

    def on_stream(self, stream: Stream) -> bool:
        """httpStreamReceived's checks, then the pair; never blocks the socket's thread."""
        port, kind = stream.header("port"), stream.header("streamType")
        if not port.isdigit() or not 0 < int(port) < 65536 or kind not in ("error", "data"):
            return False
        request_id = stream.header("requestID") or str(
            stream.id if kind == "error" else stream.id - 2  # clients before request ids
        )
        with self._lock:
            pair = self._pairs.get(request_id)
            if pair is None:
                pair = self._pairs[request_id] = _Pair(request_id)
                timer = threading.Timer(STREAM_CREATION_TIMEOUT, self._expire, [pair])
                timer.daemon = True
                timer.start()
            if getattr(pair, kind) is not None:
                return True  # "… stream already assigned": the first one stays
            setattr(pair, kind, stream)
            complete = pair.error is not None and pair.data is not None
            if complete:
                del self._pairs[request_id]
        if complete:
            threading.Thread(
                target=self._forward, args=(pair, int(port)), name="port-forward", daemon=True
            ).start()
        return True

    def _expire(self, pair: _Pair) -> None:
        with self._lock:
            if self._pairs.get(pair.request_id) is not pair:
                return
            del self._pairs[pair.request_id]
        if pair.error is not None:
            _quietly(
                pair.error.write, f"timed out waiting for streams ({pair.request_id})".encode()
            )
            _quietly(pair.error.close)

    def _forward(self, pair: _Pair, port: int) -> None:
        data, error = pair.data, pair.error
        assert data is not None
        assert error is not None
        try:
            try:
                target = self.dial(port)
            except cri.StreamError as exc:
                message = f"error forwarding port {port} to pod {self.sandbox_id}, uid : {exc}"
                body = {"closeConnection": True, "message": message}
                _quietly(error.write, (json.dumps(body) + "\n").encode())
                return
            threading.Thread(target=_to_pod, args=(data, target), daemon=True).start()
            try:  # the pod's side decides the end, as the kubelet's forwarder does
                while chunk := target.recv(65536):
                    data.write(chunk)
            except OSError:
                pass
            target.close()
        finally:
            _quietly(data.close)
            _quietly(error.close)
            if self.conn is not None:
                self.conn.forget(data, error)


def _to_pod(data: Stream, target: socket.socket) -> None:
    try:
        while chunk := data.read():
            target.sendall(chunk)
        target.shutdown(socket.SHUT_WR)  # the client is done sending: the pod reads EOF
    except OSError:
        pass


def _quietly(action: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(OSError):
        action(*args)
