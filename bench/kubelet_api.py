"""The kubelet API's port under a flood of idle connections, in three serving models.

    python -m bench.kubelet_api [--idle 2000] [--seconds 5] [--models pool,threads,asyncio]

Each model serves `/healthz` over TLS (client certificate asked for) in a process of its own,
on loopback:

- `pool`: kubelet-sim's server (`kubelet_sim.server.http.KubeletServer`, a selector thread for
  waiting clients and a bounded pool for requests), behind a gate that lets the bench's
  certificate in (the x509 check per request is included; no API server is asked);
- `threads`: what it replaced: the standard library's ThreadingHTTPServer, a thread per
  connection, the TLS handshake on that thread with a 10 s timeout, a listen backlog of 5;
- `asyncio`: an event loop (`asyncio.start_server` with TLS, the kernel's backlog, the same
  timeouts), the other way the issue names.

Per model: the time to open `--idle` TCP connections that never send a byte; with them held,
the server's threads and RSS, the latency of a fresh authenticated `/healthz` (TLS handshake
included) and how many such requests complete per second from 4 client threads for
`--seconds`; then the flood is closed and the time until the server's threads are back is
taken. Nothing here is part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.procstat import memory_kib
from kubelet_sim.controlplane.pki import CertificateAuthority
from kubelet_sim.kube.reviews import Decision
from kubelet_sim.logs import configure_logging, get_logger
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.server.auth import Gate
from kubelet_sim.server.http import KubeletServer
from kubelet_sim.server.listener import Listener, kernel_backlog
from kubelet_sim.server.settings import ConnectionLimits
from kubelet_sim.server.tokens import TokenGuard

MODELS = ("pool", "threads", "asyncio")


# -- certificates ------------------------------------------------------------------------------


def make_certs(directory: Path) -> None:
    """ca.crt, server.crt/.key and client.crt/.key (system:masters) in `directory`."""
    ca = CertificateAuthority(directory)
    ca.issue("server", "kubelet-api-bench", ips=("127.0.0.1",), server=True)
    ca.issue("client", "client", groups=("system:masters",))


def _server_context(directory: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "server.crt", directory / "server.key")
    context.load_verify_locations(directory / "ca.crt")
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


# -- the servers (each in its own process) ------------------------------------------------------


class _Node:
    node_name = "bench"

    def pods(self) -> list[dict[str, Any]]:
        return []

    def containers(self, uid: str) -> list[Any]:
        return []

    def health(self) -> tuple[bool, str]:
        return True, ""

    def metrics(self) -> str:
        return ""

    def usage(self) -> Any:
        raise NotImplementedError


class _Reviews:
    def authenticate(self, token: str) -> Any:
        return None

    def authorize(self, user: Any, verb: str, resource: str, subresource: str, name: str) -> Any:
        return Decision(allowed=user.name == "client")


def serve_pool(directory: Path) -> int:
    tokens = TokenGuard()
    listener = Listener(ConnectionLimits(), get_logger("bench.kubelet_api"), tokens=tokens)
    listener.start(Supervisor())
    server = KubeletServer(
        _Node(),
        None,  # type: ignore[arg-type]  # no logs, no streams: /healthz only
        Gate(_Reviews(), "bench", tokens=tokens),
        address="127.0.0.1",
        port=0,
        cert_file=directory / "server.crt",
        key_file=directory / "server.key",
        client_ca_file=str(directory / "ca.crt"),
        listener=listener,
    )
    server.start()
    return server.port


def serve_threads(directory: Path) -> int:
    """The model this project had: ThreadingHTTPServer, handshake on the connection's thread."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.request.settimeout(10.0)
            self.request.do_handshake()
            self.request.settimeout(None)
            super().setup()

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.socket = _server_context(directory).wrap_socket(
        httpd.socket, server_side=True, do_handshake_on_connect=False
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return int(httpd.server_address[1])


def serve_asyncio(directory: Path) -> int:
    ready: list[int] = []
    started = threading.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30.0)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(
            handle, "127.0.0.1", 0, ssl=_server_context(directory),
            ssl_handshake_timeout=10.0, backlog=kernel_backlog(),
        )  # fmt: skip
        ready.append(server.sockets[0].getsockname()[1])
        started.set()
        await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    started.wait(10)
    return ready[0]


def server_main(model: str, directory: Path) -> None:
    configure_logging("json", "warning", sys.stderr)
    port = {"pool": serve_pool, "threads": serve_threads, "asyncio": serve_asyncio}[model](
        directory
    )
    print(port, flush=True)
    sys.stdin.read()  # until the bench closes our stdin


# -- the bench ---------------------------------------------------------------------------------


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _healthz(port: int, context: ssl.SSLContext) -> float:
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with raw, context.wrap_socket(raw) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
            if answer.endswith((b"ok", b"ok\r\n0\r\n\r\n")):
                break
    if b" 200 " not in answer.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"/healthz answered {answer[:80]!r}")
    return time.monotonic() - started


@contextlib.contextmanager
def _server(model: str, directory: Path) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.kubelet_api", "--serve", model, "--dir", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBELET_SIM_LOG_LEVEL": "warning"},
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield proc.pid, port
    finally:
        proc.kill()
        proc.wait(10)


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(
    model: str, directory: Path, idle: int, seconds: float, flood_seconds: float
) -> dict[str, Any]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(directory / "client.crt", directory / "client.key")
    out: dict[str, Any] = {"model": model, "idle": idle}
    with _server(model, directory) as (pid, port):
        _healthz(port, context)
        out["threads_before"] = _threads(pid)
        out["rss_mib_before"] = round(memory_kib(pid)["VmRSS"] / 1024, 1)
        flood: list[socket.socket] = []
        started = time.monotonic()
        failed = 0
        for _ in range(idle):
            if time.monotonic() - started > flood_seconds:
                break  # a server that accepts a few a second: say how far it got
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                failed += 1
        took = time.monotonic() - started
        out["flood_connected"] = len(flood)
        out["flood_connects_per_s"] = round(len(flood) / took, 1)
        out["flood_connect_failures"] = failed
        time.sleep(1.0)  # let the server take them in
        out["threads_flooded"] = _threads(pid)
        out["rss_mib_flooded"] = round(memory_kib(pid)["VmRSS"] / 1024, 1)
        latencies: list[float] = []
        errors = 0
        for _ in range(20):
            try:
                latencies.append(_healthz(port, context))
            except (OSError, RuntimeError):
                errors += 1
        out["healthz_ms_p50"] = round(_percentile(latencies, 0.5) * 1000, 1) if latencies else None
        out["healthz_ms_max"] = round(max(latencies) * 1000, 1) if latencies else None
        out["healthz_errors"] = errors
        done, stop = [0], time.monotonic() + seconds

        def client() -> None:
            while time.monotonic() < stop:
                with contextlib.suppress(OSError, RuntimeError):
                    _healthz(port, context)
                    done[0] += 1

        clients = [threading.Thread(target=client) for _ in range(4)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        out["new_tls_requests_per_s"] = round(done[0] / seconds, 1)
        for sock in flood:
            sock.close()
        started = time.monotonic()
        while _threads(pid) > out["threads_before"] + 2 and time.monotonic() - started < 60:
            time.sleep(0.1)
        out["threads_after"] = _threads(pid)
        out["seconds_to_baseline"] = round(time.monotonic() - started, 1)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--flood-seconds", type=float, default=30.0)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--serve", choices=MODELS)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args(argv)
    if args.serve:
        server_main(args.serve, args.dir)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        make_certs(directory)
        results = [
            measure(m, directory, args.idle, args.seconds, args.flood_seconds)
            for m in args.models.split(",")
        ]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
