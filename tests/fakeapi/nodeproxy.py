"""pods/exec, pods/attach, pods/portforward and pods/log: how an API server reaches a node.

As kube-apiserver does it (pkg/registry/core/pod/strategy.go, ExecLocation/LogLocation and
streamParams): the pod's node and container are checked, the node's preferred address and
advertised kubelet port are looked up, the client's options become the kubelet's query
(stdin=true → input=1, ...), and the request is proxied there over TLS with the server's
kubelet-client certificate. An upgrade (SPDY or websocket) is piped both ways as raw bytes,
so the node's answer (101 or a refusal) reaches the client unchanged.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
from collections.abc import Sequence
from email.message import Message
from typing import Any
from urllib.parse import quote, urlencode

from tests.fakeapi.errors import ApiError

Obj = dict[str, Any]
SUBRESOURCES = frozenset({"exec", "attach", "portforward", "log"})
ADDRESS_TYPES = ("InternalIP", "Hostname")  # the test control plane's --kubelet-preferred-...
_FORWARDED = ("Connection", "Upgrade", "X-Stream-Protocol-Version", "Sec-WebSocket-Key",
              "Sec-WebSocket-Version", "Sec-WebSocket-Protocol", "Content-Type")  # fmt: skip
_TRUE = ("true", "1")


def location(
    pod: Obj, node: Obj | None, sub: str, query: dict[str, list[str]]
) -> tuple[str, int, str]:
    """(host, port, path?query) on the node for a pod subresource, or the API's 400/404."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    name, namespace = meta["name"], meta["namespace"]
    node_name = spec.get("nodeName") or ""
    if not node_name:
        raise ApiError(400, f"pod {name} does not have a host assigned", "BadRequest")
    if node is None:
        raise ApiError(404, f'nodes "{node_name}" not found', "NotFound")
    status = node.get("status") or {}
    host = preferred_address(status.get("addresses") or (), ADDRESS_TYPES)
    port = int(
        ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        or 0  # DaemonEndpoint's json name
    )
    if not host or not port:
        known = [a.get("type") for a in status.get("addresses") or ()]
        raise ApiError(500, f"no preferred addresses found; known addresses: {known}")

    def one(key: str) -> str:
        return (query.get(key) or [""])[-1]

    if sub == "portforward":
        ports = [("port", p) for p in query.get("ports", ())]
        return host, port, f"/portForward/{quote(namespace)}/{quote(name)}" + _query(ports)
    container = _container(pod, one("container"))
    base = f"/{quote(namespace)}/{quote(name)}/{quote(container)}"
    if sub == "log":
        options = [(k, one(k)) for k in ("follow", "previous", "timestamps") if one(k) in _TRUE]
        options += [(k, one(k)) for k in ("sinceSeconds", "sinceTime", "tailLines", "limitBytes")
                    if one(k)]  # fmt: skip
        return host, port, "/containerLogs" + base + _query(options)
    params = [("command", c) for c in query.get("command", ())] if sub == "exec" else []
    for option, kubelet_name in (("stdin", "input"), ("stdout", "output"), ("stderr", "error"),
                                 ("tty", "tty")):  # fmt: skip
        if one(option) in _TRUE:
            params.append((kubelet_name, "1"))
    return host, port, f"/{sub}" + base + _query(params)


def preferred_address(addresses: Sequence[Obj], preferred: Sequence[str]) -> str:
    """GetPreferredNodeAddress: the first address of the first preferred type the node has
    ("" when none); an address that fails is not followed by the next."""
    for kind in preferred:
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                return str(address["address"])
    return ""


def _query(pairs: list[tuple[str, str]]) -> str:
    return "?" + urlencode(pairs) if pairs else ""


def _container(pod: Obj, wanted: str) -> str:
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or ()]
    init = [c["name"] for c in spec.get("initContainers") or ()]
    ephemeral = [c["name"] for c in spec.get("ephemeralContainers") or ()]
    name = pod["metadata"]["name"]
    if not wanted:
        if len(names) == 1:
            return names[0]
        message = f"a container name must be specified for pod {name}, choose one of: {names}"
        if init:
            message += f" or one of the init containers: {init}"
        raise ApiError(400, message.replace("'", "").replace(",", ""), "BadRequest")
    if wanted not in names + init + ephemeral:
        raise ApiError(400, f"container {wanted} is not valid for pod {name}", "BadRequest")
    return wanted


def proxy(
    client: socket.socket,
    client_reader: Any,
    method: str,
    target: tuple[str, int, str],
    headers: Message,
    body: bytes,
    cert: tuple[str, str],
) -> None:
    """Send the request to the node and pipe bytes until both sides are done."""
    host, port, path = target
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # API servers do not verify kubelet serving certs
    context.load_cert_chain(*cert)
    try:
        upstream = context.wrap_socket(socket.create_connection((host, port), timeout=10))
    except OSError as exc:
        raise ApiError(500, f"error dialing backend: {exc}") from None
    upstream.settimeout(None)
    upgrade = "upgrade" in (headers.get("Connection") or "").lower()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    for name in _FORWARDED:
        lines += [f"{name}: {value}" for value in headers.get_all(name) or ()]
    if not upgrade:
        lines.append("Connection: close")
    if body:
        lines.append(f"Content-Length: {len(body)}")
    upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    _pipe(client, client_reader, upstream, both_ways=upgrade)


def _pipe(client: socket.socket, reader: Any, upstream: ssl.SSLSocket, both_ways: bool) -> None:
    """One thread moves both directions (a TLS socket is never used by two threads at once)
    until the node's side ends; bytes the client's HTTP reader buffered go first."""
    client.setblocking(False)
    upstream.setblocking(False)
    pending_up, pending_down = bytearray(), bytearray()
    if both_ways:
        with contextlib.suppress(BlockingIOError):
            pending_up += reader.read1(65536) or b""
    client_open = both_ways
    selector = selectors.DefaultSelector()
    try:
        while True:
            _watch_for(selector, upstream, reading=True, writing=bool(pending_up))
            _watch_for(selector, client, reading=client_open, writing=bool(pending_down))
            for key, mask in selector.select() + _ssl_pending(upstream, selector):
                if mask & selectors.EVENT_WRITE:
                    if key.fileobj is upstream:
                        pending_up = _send(upstream, pending_up)
                    else:
                        pending_down = _send(client, pending_down)
                if not mask & selectors.EVENT_READ:
                    continue
                if key.fileobj is upstream:
                    chunk = _recv(upstream)
                    if chunk == b"":
                        return
                    pending_down += chunk or b""
                else:  # readable only while open: registered for reading only then
                    client_open = _from_client(client, upstream, pending_up)
    except OSError:
        pass
    finally:
        selector.close()
        upstream.close()
        with contextlib.suppress(OSError):
            client.setblocking(True)
            client.sendall(pending_down)
            client.shutdown(socket.SHUT_RDWR)


def _from_client(client: socket.socket, upstream: ssl.SSLSocket, pending_up: bytearray) -> bool:
    """What the client sent, added to `pending_up`; False once it closed its side, which is
    passed on to the node."""
    chunk = _recv(client)
    if chunk == b"":
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)
        return False
    pending_up += chunk or b""
    return True


def _watch_for(
    selector: selectors.BaseSelector, sock: socket.socket, *, reading: bool, writing: bool
) -> None:
    """What the next select waits for on `sock`: bytes to read, room to write, or nothing."""
    events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if writing else 0)
    with contextlib.suppress(KeyError):
        selector.unregister(sock)
    if events:
        selector.register(sock, events)


def _ssl_pending(sock: ssl.SSLSocket, selector: selectors.BaseSelector) -> list[Any]:
    """Bytes TLS decrypted already are not seen by select."""
    if not sock.pending():
        return []
    try:
        return [(selector.get_key(sock), selectors.EVENT_READ)]
    except KeyError:
        return []


def _recv(sock: socket.socket) -> bytes | None:
    """bytes, b"" at the end, None when nothing is there now."""
    try:
        return sock.recv(65536)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return None


def _send(sock: socket.socket, data: bytearray) -> bytearray:
    if not data:
        return data
    try:
        sent = sock.send(data)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return data
    return data[sent:]
