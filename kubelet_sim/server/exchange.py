"""One HTTP/1.1 request and its answer on a TLS connection: the request parsed from bytes the
listener gathered (never read from the socket here), the answer written to the socket.

The surface is the part of http.server's BaseHTTPRequestHandler the routes and the streaming
upgrades use (command, path, headers, request, rfile, wfile, send_response, send_header,
end_headers, close_connection), so they do not care who read the request.
"""

from __future__ import annotations

import email.utils
import http.client
import io
import re
import socket
from email.message import Message
from http import HTTPStatus

_REQUEST_LINE = re.compile(rb"^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/(\d)\.(\d)$")


class BadRequest(Exception):
    """The bytes are not an HTTP/1.1 request: (status, text) answered, then the connection ends."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class _Writer:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        """Every write is sent at once."""


class Exchange:
    def __init__(
        self, sock: socket.socket, command: str, path: str, version: tuple[int, int],
        headers: Message, rest: bytes,
    ) -> None:  # fmt: skip
        self.request = sock
        self.command, self.path, self.headers = command, path, headers
        self.rfile = io.BytesIO(rest)  # what arrived after the headers (an upgrade's first frames)
        self.wfile = _Writer(sock)
        self.status = 0
        # what the gate made of it (auth.Verdict), for the listener: True, False (401/429) or
        # None (anonymous, or never asked); and whether a failure is the connection's last
        self.authenticated: bool | None = None
        self.last_failure_allowed = False
        self._head: list[bytes] = []
        self._said_close = False
        connection = (headers.get("Connection") or "").lower()
        self.close_connection = version < (1, 1) or "close" in connection
        if headers.get("Content-Length", "0").strip() not in ("", "0") or headers.get(
            "Transfer-Encoding"
        ):
            self.close_connection = True  # a body is never read: the connection ends after it

    @classmethod
    def parse(cls, sock: socket.socket, head: bytes, rest: bytes) -> Exchange:
        """`head`: the request line and headers without the blank line. Raises BadRequest."""
        line, _, fields = head.partition(b"\r\n")
        found = _REQUEST_LINE.match(line)
        if found is None:
            raise BadRequest(400, "Bad Request")
        method, target, major, minor = found.groups()
        if int(major) != 1:
            raise BadRequest(505, "HTTP Version Not Supported")
        try:
            headers = http.client.parse_headers(io.BytesIO(fields + b"\r\n\r\n"))
        except (http.client.HTTPException, UnicodeDecodeError, ValueError):
            raise BadRequest(400, "Bad Request") from None
        if int(minor) >= 1 and not headers.get("Host"):
            raise BadRequest(400, "Bad Request: missing required Host header")
        if not target.startswith(b"/"):
            raise BadRequest(400, "Bad Request")
        return cls(sock, method.decode(), target.decode("latin-1"), (1, int(minor)), headers, rest)

    def send_response(self, code: int, message: str | None = None) -> None:
        self.status = code
        reason = message or (
            HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        )
        self._head = [f"HTTP/1.1 {code} {reason}\r\n".encode()]
        self.send_header("Date", email.utils.formatdate(usegmt=True))

    def send_header(self, name: str, value: str) -> None:
        if name.lower() == "connection" and value.lower() == "close":
            self.close_connection = self._said_close = True
        self._head.append(f"{name}: {value}\r\n".encode("latin-1"))

    def end_headers(self) -> None:
        if self.close_connection and self.status != 101 and not self._said_close:
            self._head.append(b"Connection: close\r\n")
        self._head.append(b"\r\n")
        head, self._head = b"".join(self._head), []
        self.request.sendall(head)


def refusal(status: int, text: str) -> bytes:
    """A whole answer for a request that never became an Exchange (Go's server says these)."""
    body = f"{status} {text}".encode()
    return (
        f"HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
