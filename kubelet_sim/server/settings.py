"""How the kubelet API server listens and whom it lets in (the kubelet's flags of these names)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

STREAMING_IDLE_TIMEOUT = 4 * 3600.0  # the kubelet's --streaming-connection-idle-timeout


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold of the server (see http.py for the serving model); the caps
    are the process's when its nodes share one listener (listener.py)."""

    max_connections: int = 4096  # open at once; past it the longest-waiting one makes room
    max_auth_failures: int = 3  # 401s (or 429s) on one connection; the last one closes it
    workers: int = 32  # threads serving requests at once (made as needed)
    max_streams: int = 512  # exec/attach/portForward/followed logs at once, each on a thread
    backlog: int = 0  # listen backlog; 0: the kernel's maximum (net.core.somaxconn), as Go's
    handshake_timeout: float = 10.0  # accept to the end of the TLS handshake
    header_timeout: float = 30.0  # the first byte of a request to the end of its headers
    idle_timeout: float = 90.0  # a keep-alive connection between requests (the kubelet's)
    write_timeout: float = STREAMING_IDLE_TIMEOUT  # one write to a client that does not read
    max_header_bytes: int = 1 << 20  # request line and headers (the kubelet's MaxHeaderBytes)
    streaming_idle_timeout: float = STREAMING_IDLE_TIMEOUT  # a stream with no frame either way


@dataclass(frozen=True)
class ServerSettings:
    address: str = "0.0.0.0"  # the kubelet's default: the API server must reach it
    port: int = 10250  # 0: any free port, advertised in the Node's daemonEndpoints
    tls_cert_file: Path | None = None  # with tls_private_key_file; else one is made at start
    tls_private_key_file: Path | None = None
    client_ca_file: str | None = None  # None: the cluster CA of the kubeconfig
    anonymous_auth: bool = False
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration ("4h0m0s", "30s", "1.5h") in seconds, as the kubelet's flags take it."""
    text = text.strip()
    if text == "0":
        return 0.0
    at, total = 0, 0.0
    while at < len(text):
        found = _PART.match(text, at)
        if found is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(found.group(1)) * _UNITS[found.group(2)]
        at = found.end()
    if not text:
        raise ValueError("invalid duration ''")
    return total
