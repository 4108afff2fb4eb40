"""/exec, /attach and /portForward: the checks a kubelet makes before it upgrades, then the
upgrade, then the session on a thread of its own while this thread moves the bytes."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from urllib.parse import parse_qs, unquote

from kubelet_sim import cri
from kubelet_sim.pod.attempts import attempts_of, latest_sandbox
from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.ports import StreamRuntime
from kubelet_sim.server.routes import NodeView, Reply, find_pod
from kubelet_sim.server.settings import ConnectionLimits
from kubelet_sim.server.streaming import portforward, remotecommand, websocket
from kubelet_sim.server.streaming.pump import SocketPump
from kubelet_sim.server.streaming.spdy import Stream
from kubelet_sim.server.streaming.upgrade import Refused, is_websocket, negotiate, upgrade

PREFIXES = ("/exec/", "/attach/", "/portForward/")
_COMMAND = re.compile(r"^/(exec|attach)/([^/]+)/([^/]+)/(?:([^/]+)/)?([^/]+)$")
_FORWARD = re.compile(r"^/portForward/([^/]+)/([^/]+)(?:/([^/]+))?$")


def serve(
    handler: Exchange,
    path: str,
    query: str,
    node: NodeView,
    runtime: StreamRuntime,
    limits: ConnectionLimits | None = None,
    on_refusal: Callable[[str], None] | None = None,
) -> Reply | None:
    """A Reply to refuse the request before any upgrade, or None once the connection ended."""
    try:
        conn, session = _prepare(handler, path, parse_qs(query), node, runtime)
    except Refused as refused:
        return Reply.text(refused.status, refused.text + "\n", headers=refused.headers)
    conn.idle_timeout = (limits or ConnectionLimits()).streaming_idle_timeout
    if on_refusal is not None:
        conn.on_refusal = on_refusal
    worker = threading.Thread(target=session, name="stream-session", daemon=True)
    worker.start()
    conn.run()
    return None


def _prepare(
    handler: Exchange,
    path: str,
    query: dict[str, list[str]],
    node: NodeView,
    runtime: StreamRuntime,
) -> tuple[SocketPump, Callable[[], None]]:
    command_path, forward_path = _COMMAND.match(path), _FORWARD.match(path)
    if forward_path:
        namespace, name, uid = (unquote(g or "") for g in forward_path.groups())
        sandbox = latest_sandbox(node.containers(_uid_of(node, namespace, name, uid)))
        if sandbox is None or sandbox.state != cri.ContainerState.RUNNING:
            raise Refused(500, f'pod not found ("{name}_{namespace}")')
        if is_websocket(handler.headers):  # kubectl falls back to SPDY
            raise Refused(400, "port-forward over websocket is not served here; use SPDY/3.1")
        sandbox_id = sandbox.id
        forward = portforward.PortForward(
            sandbox_id, lambda port: runtime.pod_connect(sandbox_id, port)
        )
        forwarding = upgrade(
            handler, negotiate(handler.headers, portforward.PROTOCOLS), forward.on_stream
        )
        forward.conn = forwarding
        return forwarding, lambda: None
    if not command_path:
        raise Refused(404, "404 page not found")
    kind, namespace, name, uid, container = (unquote(g or "") for g in command_path.groups())
    try:
        options = remotecommand.Options.parse(query)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    command = query.get("command") or []
    if kind == "exec" and not command:
        raise Refused(400, "you must specify a command")  # the API server checks it first
    target = _running(node, namespace, name, uid, container)
    if target is None:
        raise Refused(500, f'container not found ("{container}")')
    conn: SocketPump
    if is_websocket(handler.headers):
        protocol = websocket.negotiate(handler.headers)
        socket_conn = websocket.upgrade(handler, protocol)
        streams = remotecommand.Streams.of_channels(protocol, options, socket_conn.channels)
        conn = socket_conn
    else:
        protocol = negotiate(handler.headers, remotecommand.PROTOCOLS)
        streams = remotecommand.Streams.expect(protocol, options)
        conn = upgrade(handler, protocol, streams.on_stream)

    def start() -> cri.StreamSession:
        if kind == "exec":
            return runtime.exec_stream(target, command, stdin=options.stdin, tty=options.tty)
        return runtime.attach_stream(target, stdin=options.stdin)

    return conn, lambda: remotecommand.serve(
        conn, streams, start, command if kind == "exec" else None
    )


def _uid_of(node: NodeView, namespace: str, name: str, uid: str) -> str:
    pod = find_pod(node, namespace, name, uid)
    if pod is None:
        raise Refused(404, "pod does not exist")
    return str(pod["metadata"].get("uid"))


def _running(node: NodeView, namespace: str, name: str, uid: str, container: str) -> str | None:
    """The id of the named container's running attempt (findContainer sees running ones only)."""
    attempts = attempts_of(node.containers(_uid_of(node, namespace, name, uid)), container)
    if attempts and attempts[0].state == cri.ContainerState.RUNNING:
        return attempts[0].id
    return None


__all__ = ["PREFIXES", "Stream", "StreamRuntime", "serve"]
