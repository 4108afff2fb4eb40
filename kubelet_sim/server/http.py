"""The kubelet API server on its port: TLS, then the gate, then a route.

A thread per connection (the standard library's ThreadingHTTPServer) with the TLS handshake on
that thread, so a slow or broken client never holds the accept loop. A client certificate is
asked for but not checked in the handshake: the x509 authenticator checks it per request
(`tls.py`), so one from another CA ends in 401 unless a bearer token vouches, as on a kubelet.
"""

from __future__ import annotations

import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubelet_sim.logs import get_logger
from kubelet_sim.server import run
from kubelet_sim.server.auth import Gate
from kubelet_sim.server.routes import LogSource, NodeView, Reply, route
from kubelet_sim.server.streaming.serve import PREFIXES, StreamRuntime
from kubelet_sim.server.streaming.serve import serve as serve_stream
from kubelet_sim.server.tls import serving_tls
from kubelet_sim.supervise import Supervisor

HANDSHAKE_TIMEOUT = 10.0


class ServerError(Exception):
    """The server cannot start (the port is taken, a certificate file is bad): one line."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    app: KubeletServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that fails before any request (a failed TLS handshake: a plain-TCP
        client, a certificate from another CA, a timeout) is one line, as Go's server says
        "http: TLS handshake error from ...", never a traceback on stderr."""
        error = sys.exc_info()[1]
        client = f"{client_address[0]}:{client_address[1]}" if client_address else "?"
        if isinstance(error, _HandshakeFailed):
            self.app.log.info("TLS handshake error", client=client, error=str(error))
        elif isinstance(error, OSError):  # the client left mid-request
            self.app.log.debug("connection ended", client=client, error=str(error))
        else:
            self.app.log.exception("connection failed", client=client)


class _HandshakeFailed(Exception):
    """The TLS handshake failed (ssl.SSLError, a reset or a timeout): said in one line."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        conn: ssl.SSLSocket = self.request
        conn.settimeout(HANDSHAKE_TIMEOUT)
        try:  # a refused certificate raises here: the connection just ends
            conn.do_handshake()
        except OSError as exc:
            raise _HandshakeFailed(str(exc) or type(exc).__name__) from None
        conn.settimeout(None)
        super().setup()

    def do_GET(self) -> None:
        self.server.app.serve(self)

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """The method, path and answer: never the query, which for /exec holds the command
        and its arguments (a secret among them, maybe)."""
        path = urlsplit(self.path).path if getattr(self, "path", "") else ""
        self.server.app.log.debug("request", method=self.command, path=path, code=str(code))

    def log_message(self, format: str, *args: Any) -> None:
        """The standard library's error lines (a bad request quotes its request line): cut at
        the first `?`, so no query reaches the log."""
        self.server.app.log.debug("request", line=_without_query(format % args))


def _without_query(text: str) -> str:
    head, sep, _query = text.partition("?")
    return head + ("?…" if sep else "")


class KubeletServer:
    def __init__(
        self,
        node: NodeView,
        logs: LogSource,
        streams: StreamRuntime,
        gate: Gate,
        *,
        address: str,
        port: int,
        cert_file: Path,
        key_file: Path,
        client_ca_file: str | None,
    ) -> None:
        self.node, self.logs, self.streams, self.gate = node, logs, streams, gate
        self.log = get_logger("kubelet_sim.server", node=gate.node_name)
        try:
            self.tls = serving_tls(cert_file, key_file, client_ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ServerError(f"cannot use the serving certificate or client CA: {exc}") from exc
        if self.tls.verified_in_handshake:
            self.log.warning(
                "client certificates are verified in the TLS handshake (this Python's ssl"
                " cannot defer it): one from another CA fails the handshake, not 401"
            )
        context = self.tls.context
        try:
            self._http = _Server((address, port), _Handler, bind_and_activate=True)
        except OSError as exc:
            raise ServerError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from exc
        self._http.app = self
        self._http.socket = context.wrap_socket(
            self._http.socket, server_side=True, do_handshake_on_connect=False
        )
        self.port = int(self._http.server_address[1])
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def start(self, supervisor: Supervisor | None = None) -> None:
        """Accept connections on a supervised thread (each request has its own thread, and a
        request that fails is answered 500: see `serve`)."""
        self._thread = (supervisor or Supervisor(node=self.gate.node_name)).thread(
            "kubelet-server", self._accept, self._stopped
        )
        self._thread.start()
        self.log.info("kubelet API server listening", port=self.port)

    def _accept(self) -> None:
        self._http.serve_forever(poll_interval=0.5)

    def stop(self) -> None:
        if self._thread is not None:
            # Returns once no loop serves: one running ends, one about to start ends at once,
            # and after a crash (the supervisor waiting to restart) there is nothing to wait for.
            self._http.shutdown()
        self._stopped.set()  # and the supervisor starts no other
        self._http.server_close()

    def serve(self, handler: _Handler) -> None:
        parts = urlsplit(handler.path)
        conn: ssl.SSLSocket = handler.request
        peer = self.tls.authenticator.authenticate(conn)
        if peer is not None and peer.error:  # the kubelet logs it, then tries the token
            self.log.info("client certificate not accepted", error=peer.error)
        refused = self.gate.check(
            handler.command, parts.path, peer, handler.headers.get("Authorization", "")
        )
        if refused is not None:
            reply = Reply.text(refused[0], refused[1] + "\n")
        elif parts.path.startswith(PREFIXES) and handler.command in ("GET", "POST"):
            answer = serve_stream(handler, parts.path, parts.query, self.node, self.streams)
            if answer is None:
                return  # the connection was upgraded, served and closed
            reply = answer
        elif parts.path.startswith(run.PREFIX):
            try:
                reply = run.run(self.node, self.streams, handler.command, parts.path, parts.query)
            except Exception as exc:  # one broken request never takes the server down
                self.log.exception("request failed", path=parts.path)
                reply = Reply.text(500, f"{type(exc).__name__}: {exc}\n")
        elif handler.command not in ("GET", "HEAD"):
            reply = Reply.text(405, "405 method not allowed\n")
        else:
            try:
                reply = route(self.node, self.logs, parts.path, parts.query)
            except Exception as exc:  # one broken request never takes the server down
                self.log.exception("request failed", path=parts.path)
                reply = Reply.text(500, f"{type(exc).__name__}: {exc}\n")
        _send(handler, reply)


def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
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
