"""The kubelet API server on its port: TLS, then the gate, then a route.

Connections are the listener's (`listener.py`: a selector thread for every waiting client, a
bounded pool for the work, limits and timeouts in `settings.ConnectionLimits`), one for all the
nodes of a process: the node keeps its own port, certificate, gate and counters. A client
certificate is asked for but not checked in the TLS handshake: the x509 authenticator checks it
at the connection's first request (`tls.py`, `x509auth.py`), so one from another CA ends in
401 unless a bearer token vouches, as on a kubelet.
"""

from __future__ import annotations

import functools
import posixpath
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import parse_qs

from kubelet_sim.logs import get_logger
from kubelet_sim.server import run_endpoint
from kubelet_sim.server.auth import THROTTLED, Gate
from kubelet_sim.server.budgets import Throttled
from kubelet_sim.server.connections import Stream
from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.metrics import render
from kubelet_sim.server.ports import ContainerStreams
from kubelet_sim.server.routes import NodeView, Reply, route
from kubelet_sim.server.streaming.serve import PREFIXES
from kubelet_sim.server.streaming.serve import serve as serve_stream
from kubelet_sim.server.tls import ServingTls, serving_tls

if TYPE_CHECKING:
    from kubelet_sim.server.x509auth import X509Authenticator


class ServerError(Exception):
    """The server cannot start (the port is taken, a certificate file is bad): one line."""


def client_certificates(client_ca_file: str | None) -> X509Authenticator:
    """The client CA file's authenticator as the file is now (`x509auth.ClientCa`: read again
    when it changes), imported at the first request (with `cryptography`, some 8 MiB a
    process never pays while no client comes)."""
    from kubelet_sim.server.x509auth import client_ca  # noqa: PLC0415 (at first use)

    return client_ca(client_ca_file).current()


class Target(NamedTuple):
    path: str
    query: str


def split_target(target: str) -> Target:
    """An origin-form request target's path and query (urlsplit would read `//x` as a host)."""
    path, _, query = target.partition("?")
    return Target(path, query)


def clean_path(path: str) -> str:
    """Go's ServeMux cleanPath: `.` and `..` resolved, slashes collapsed, a trailing slash kept
    (on the escaped path: `%2F` is not a slash here)."""
    if not path.startswith("/"):
        path = "/" + path
    cleaned = "/" + posixpath.normpath(path).lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def is_stream(exchange: Exchange) -> bool:
    """Long-running: an upgrade to a stream, or a followed log (a thread of its own)."""
    path, _, query = exchange.path.partition("?")
    if path.startswith(PREFIXES):
        return True
    if path.startswith("/containerLogs/"):
        follow = (parse_qs(query).get("follow") or [""])[-1].lower()
        return follow in ("true", "1")
    return False


class KubeletServer:
    def __init__(
        self,
        node: NodeView,
        streams: ContainerStreams,
        gate: Gate,
        *,
        address: str,
        port: int,
        cert_file: Path | None,
        key_file: Path | None,
        client_ca_file: str | None,
        listener: Listener,
        self_signed: Callable[[], tuple[Path, Path]] | None = None,
    ) -> None:
        """`streams`: the node's containers as the API streams them (logs, exec, attach,
        port-forward). `self_signed` makes the serving pair when no files are given, at the
        first connection (`tls.ServingTls`)."""
        self.node, self.streams, self.gate = node, streams, gate
        self.log = get_logger("kubelet_sim.server", node=gate.node_name)
        try:
            if cert_file is not None and key_file is not None:
                self.tls = serving_tls(cert_file, key_file, client_ca_file)
            elif self_signed is not None:
                self.tls = ServingTls(self_signed, client_ca_file)
            else:
                raise ValueError("no serving certificate given, and none to make")
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ServerError(f"cannot use the serving certificate or client CA: {exc}") from exc
        if self.tls.verified_in_handshake:
            self.log.warning(
                "client certificates are verified in the TLS handshake (deferring it needs"
                " CPython, its ssl on a shared libssl): one from another CA fails the"
                " handshake, not 401",
                python=sys.implementation.name,
            )
        self.listener = listener  # the process's: its connection limits are the process's
        try:
            self.endpoint = self.listener.bind(
                address, port, self.tls.context, self.serve, self.log
            )
        except OSError as exc:
            raise ServerError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from exc
        self.port = self.endpoint.port

    def start(self) -> None:
        """Serve this node's port on the process's listener (a request that fails is answered
        500: see `serve`)."""
        self.listener.open(self.endpoint)
        self.log.info("kubelet API server listening", port=self.port)

    def stop(self) -> None:
        """This node's port closes; a shared listener serves the other nodes on."""
        self.listener.close(self.endpoint)

    @property
    def open_connections(self) -> int:
        """This node's open connections."""
        return self.endpoint.open_connections

    def serve(self, handler: Exchange) -> Stream | None:
        """One request, answered; or, once authenticated, a long-running one's rest, for the
        listener to run on a thread of its own (never before: a client without credentials
        gets no thread). Logged when answered, without its query."""
        stream = None
        try:
            stream = self._serve(handler)
        finally:
            if stream is None:  # answered (or failed): said now; a stream says it at its end
                self._logged(handler)
        return stream

    def _logged(self, handler: Exchange) -> None:
        path = split_target(handler.path).path
        self.log.debug("request", method=handler.command, path=path, code=str(handler.status))

    def _stream_refused(self, reason: str) -> None:
        self.endpoint.counters.add("kubelet_sim_server_stream_refusals_total", reason=reason)
        self.log.info("stream ended by a limit", reason=reason)

    def _refusal(self, handler: Exchange, path: str) -> Reply | None:
        """The gate's answer if it refuses; the outcome is left on the exchange for the
        listener (a connection that keeps failing is closed: its last answer says so)."""
        conn: ssl.SSLSocket = handler.request  # type: ignore[assignment]
        client = _peer_address(conn)
        try:
            certificates = client_certificates(self.tls.client_ca_file)
            peer = certificates.authenticate(conn, self.listener.certificates, client)
        except Throttled:
            self.endpoint.counters.add("kubelet_sim_server_certificate_checks_throttled_total")
            verdict = THROTTLED
        else:
            if peer is not None and peer.error:  # the kubelet logs it, then tries the token
                self.log.info("client certificate not accepted", error=peer.error)
            verdict = self.gate.decide(
                handler.command, path, peer, handler.headers.get("Authorization", ""), client,
                self.endpoint.counters,
            )  # fmt: skip
        handler.authenticated = verdict.authenticated
        if verdict.authenticated is False:
            self.endpoint.counters.add("kubelet_sim_server_authentication_failures_total")
            if handler.last_failure_allowed:
                handler.close_connection = True
        if verdict.refusal is None:
            return None
        status, text = verdict.refusal
        return Reply.text(status, text + "\n", [("Retry-After", "1")] if status == 429 else [])

    def _serve(self, handler: Exchange) -> Stream | None:
        parts = split_target(handler.path)
        cleaned = clean_path(parts.path)
        if cleaned != parts.path:  # ServeMux redirects before any filter, the gate included
            location = cleaned + (f"?{parts.query}" if parts.query else "")
            body = f'<a href="{location}">Moved Permanently</a>.\n\n'
            reply = Reply(301, [body.encode()], "text/html; charset=utf-8")
            reply.headers = (("Location", location),)
            _send(handler, reply)
            return None
        refused = self._refusal(handler, parts.path)
        if refused is not None:
            _send(handler, refused)
            return None
        if is_stream(handler):
            return functools.partial(self._stream, handler, parts)
        self._answer(handler, parts)
        return None

    def _stream(self, handler: Exchange, parts: Target) -> None:
        try:
            self._answer(handler, parts)
        finally:
            self._logged(handler)

    def _answer(self, handler: Exchange, parts: Target) -> None:
        """An authenticated and authorized request's answer (a stream's, to its end)."""
        if parts.path.startswith(PREFIXES) and handler.command in ("GET", "POST"):
            answer = serve_stream(
                handler, parts.path, parts.query, self.node, self.streams, self.listener.limits,
                self._stream_refused,
            )  # fmt: skip
            if answer is None:
                return  # the connection was upgraded, served and closed
            reply = answer
        elif parts.path.startswith(run_endpoint.PREFIX):
            try:
                reply = run_endpoint.run(
                    self.node, self.streams, handler.command, parts.path, parts.query
                )
            except Exception as exc:  # one broken request never takes the server down
                self.log.exception("request failed", path=parts.path)
                reply = Reply.text(500, f"{type(exc).__name__}: {exc}\n")
        elif handler.command not in ("GET", "HEAD"):
            reply = Reply.text(405, "405 method not allowed\n")
        else:
            try:
                reply = route(self.node, self.streams, parts.path, parts.query)
                if parts.path == "/metrics" and reply.status == 200:
                    reply.body = [*reply.body, render(self.endpoint.counters.families()).encode()]
            except Exception as exc:  # one broken request never takes the server down
                self.log.exception("request failed", path=parts.path)
                reply = Reply.text(500, f"{type(exc).__name__}: {exc}\n")
        _send(handler, reply)


def _peer_address(conn: ssl.SSLSocket) -> str:
    try:
        return str(conn.getpeername()[0])
    except (OSError, IndexError):
        return ""


def _send(handler: Exchange, reply: Reply) -> None:
    """Chunked, flushed per chunk: a followed log reaches the client as Docker writes it."""
    try:
        handler.send_response(reply.status)
        handler.send_header("Content-Type", reply.content_type)
        handler.send_header("Transfer-Encoding", "chunked")
        for name, value in reply.headers:
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":  # a HEAD answer has no body, not even the last chunk
            for chunk in reply.body:
                if chunk:
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except OSError:  # TimeoutError included
        handler.close_connection = True  # the client left: end a followed stream
    finally:
        reply.close()
