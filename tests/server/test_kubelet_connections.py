"""The kubelet API under load and abuse, with real TLS clients: clients that send nothing or
send slowly are let go at their deadlines, keep-alive works and ends when idle, bad input gets
the status Go's server gives it, a flood of idle connections leaves the port responsive (past
the cap its oldest make room; tests/server/test_kubelet_lockout.py has the rest of that rule),
streams end when idle, and a SPDY decompression bomb closes its connection with memory
bounded. Each refusal is counted in /metrics.

The timeouts are the server's settings, short here; every wait is a deadline on a condition.
Both API servers: the server under test is the agent's, the API server only answers its
TokenReviews and SubjectAccessReviews.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import ssl
import struct
import threading
import time
import urllib.error
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kubelet_sim.server.settings import ConnectionLimits
from kubelet_sim.server.streaming import spdy
from tests import spdy_client
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.kubelet_api import Node, serving_node
from tests.pods import container, make_pod, wait_status

SHORT = ConnectionLimits(
    handshake_timeout=1.0,
    header_timeout=1.5,
    idle_timeout=1.0,
    max_header_bytes=16 << 10,
    streaming_idle_timeout=1.5,
)


@pytest.fixture
def short(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Node]:
    with serving_node(cluster, docker_env, tmp_path, SHORT) as node:
        yield node


def _context(node: Node) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(node.tls / "admin.crt", node.tls / "admin.key")
    return context


def _tls(node: Node) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    return _context(node).wrap_socket(raw)


def _closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the server ends the connection (EOF or reset); fails past `limit`."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"the connection was still open after {limit} s")
    return time.monotonic() - started


def _counter(node: Node, name: str, **labels: str) -> float:
    text = node.text("/metrics")
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{inner}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_silent_and_slow_clients_are_let_go(short: Node) -> None:
    node = short
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as plain:
        assert 0.5 < _closed_after(plain, 8) < 5, "no ClientHello: the handshake timeout"
    with _tls(node) as silent:
        assert 0.9 < _closed_after(silent, 8) < 5, "handshake done, no request: header timeout"
    with _tls(node) as slow:  # headers a byte at a time: the deadline is not moved by them
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        stop = threading.Event()

        def drip() -> None:
            with contextlib.suppress(OSError):
                while not stop.wait(0.2):
                    slow.sendall(b"X")

        threading.Thread(target=drip, daemon=True).start()
        try:
            assert _closed_after(slow, 8) < 5
        finally:
            stop.set()
    assert (
        _counter(node, "kubelet_sim_server_connections_refused_total", reason="handshake_timeout")
        >= 1
    )
    assert (
        _counter(node, "kubelet_sim_server_connections_refused_total", reason="header_timeout") >= 2
    )
    assert node.text("/healthz") == "ok"


def test_keep_alive_serves_again_then_idles_out(short: Node) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", short.port, context=_context(short), timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok"
        first = conn.sock
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok"
        assert conn.sock is first, "the same connection served both"
        assert 0.5 < _closed_after(first, 8) < 5, "then idle: the idle timeout"
    finally:
        conn.close()
    idled = _counter(short, "kubelet_sim_server_connections_refused_total", reason="idle_timeout")
    assert idled >= 1


def _raw(node: Node, data: bytes) -> bytes:
    """The answer to raw bytes sent over TLS, read until the server closes."""
    with _tls(node) as sock:
        sock.sendall(data)
        sock.settimeout(10)
        out = bytearray()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := sock.recv(65536):
                out += chunk
        return bytes(out)


def test_bad_input_gets_go_servers_answers(short: Node) -> None:
    node = short
    with capture_logs() as logs:
        assert _raw(node, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        secret = b"GET /exec/n/p/c?command=s3cr3t-arg HTTP/1.1 extra\r\nHost: x\r\n\r\n"
        assert _raw(node, secret).startswith(b"HTTP/1.1 400 ")
        assert _raw(node, b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 505 ")
        assert _raw(node, b"GET /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (32 << 10) + b"\r\n\r\n"
        assert _raw(node, huge).startswith(b"HTTP/1.1 431 ")
        endless = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 << 10)
        assert _raw(node, endless).startswith(b"HTTP/1.1 431 "), "no end of headers in sight"
    assert "s3cr3t" not in repr(logs), "a bad request's query never reaches the log"
    said = [e for e in logs if e["event"] == "bad request"]
    assert len(said) == 6, said
    # paths that try to leave their route, and an upgrade nobody speaks
    # (Go's ServeMux: 301 to the cleaned path, before any filter; %2F is no slash there)
    moved = _raw(node, b"GET /containerLogs/ns/../../c?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert moved.startswith(b"HTTP/1.1 301 "), moved
    assert b"\r\nLocation: /c?x=1\r\n" in moved
    moved = _raw(node, b"GET //pods/./ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"\r\nLocation: /pods/\r\n" in moved
    with pytest.raises(urllib.error.HTTPError) as refused:
        node.get("/containerLogs/ns%2F..%2Fkube-system/p/c")
    assert refused.value.code == 404
    odd = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\nUpgrade: h2c\r\n"
    with _tls(node) as sock:
        sock.sendall(odd + b"\r\n")
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 "), "served as a plain request"
    assert _counter(node, "kubelet_sim_server_connections_refused_total", reason="bad_request") >= 4
    assert (
        _counter(node, "kubelet_sim_server_connections_refused_total", reason="header_too_large")
        >= 2
    )
    assert node.text("/healthz") == "ok"


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _kubelet_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("kubelet-api"))


@pytest.mark.through_api_server
def test_a_flood_of_idle_connections_leaves_the_port_responsive(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """300 idle connections held (no TLS bytes): authenticated /healthz still answers fast and
    `kubectl logs` (pods/log through the API server) works, no thread is spent on the idle
    ones; past the cap the oldest of them is closed to let a new one in, and when the flood
    ends every connection is let go within the timeouts (the API server's keep-alive one after
    idle_timeout)."""
    limits = ConnectionLimits(
        max_connections=320, handshake_timeout=30.0, idle_timeout=2.0, workers=8
    )
    with serving_node(cluster, docker_env, tmp_path, limits) as node:
        server = node.agent.agent.server
        assert server is not None
        make_pod(cluster, "talker", container(command=["sh", "-c", "echo said; sleep 3600"]))
        wait_status(cluster, "talker", lambda s: s.get("phase") == "Running", 30, "running")
        wait_for(lambda: node.text(f"/containerLogs/{cluster.namespace}/talker/c"), 20, "a log")
        rss_before = _rss()
        flood = [socket.create_connection(("127.0.0.1", node.port)) for _ in range(300)]
        try:
            wait_for(lambda: server.open_connections >= 300, 20, "300 accepted")
            latencies = []
            for _ in range(10):
                started = time.monotonic()
                assert node.text("/healthz") == "ok"
                latencies.append(time.monotonic() - started)
            latencies.sort()
            assert latencies[5] < 0.5, latencies  # the median; 100 ms on an idle machine
            # kubectl logs: the API server's pods/log reaches the node through the flood
            log = cluster.core.read_namespaced_pod_log("talker", cluster.namespace)
            assert log == "said\n"
            assert _kubelet_threads() <= limits.workers, "idle connections hold no thread"
            assert _rss() - rss_before < 64 << 20, "300 idle connections cost little memory"
            more = [socket.create_connection(("127.0.0.1", node.port)) for _ in range(40)]
            try:  # past the cap the flood's oldest make room: the newcomers are let in
                wait_for(lambda: sum(map(_ended, flood[:40])) >= 20, 10, "the oldest closed")
                assert not any(map(_ended, more)), "no newcomer reset"
                assert server.open_connections <= limits.max_connections
            finally:
                for sock in more:
                    sock.close()
        finally:
            for sock in flood:
                sock.close()
        wait_for(lambda: server.open_connections == 0, 20, "the flood let go")
        assert node.text("/healthz") == "ok"
        evicted = _counter(
            node, "kubelet_sim_server_connections_evicted_total", reason="unauthenticated"
        )
        assert evicted >= 20


def _ended(sock: socket.socket) -> bool:
    """Whether the server has closed (or reset) the connection; never waits."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _exec_pod(cluster: ApiUnderTest) -> None:
    make_pod(cluster, "sleeper", container(command=["sleep", "3600"]))
    wait_status(cluster, "sleeper", lambda s: s.get("phase") == "Running", 30, "running")


def test_an_idle_stream_is_closed(cluster: ApiUnderTest, short: Node) -> None:
    _exec_pod(cluster)
    path = f"/exec/{cluster.namespace}/sleeper/c?command=sleep&command=3600&output=1"
    up = spdy_client.connect(short.port, path, short.tls, ["v4.channel.k8s.io"])
    assert up.status == 101, up.body
    assert up.conn is not None
    started = time.monotonic()
    up.conn.open_stream(spdy_client.stream_headers("error"))
    stdout = up.conn.open_stream(spdy_client.stream_headers("stdout"))
    spdy_client.read_all(stdout)  # ends when the server closes the connection
    assert 1.0 < time.monotonic() - started < 10
    assert up.conn.closed.wait(10)
    assert (
        _counter(short, "kubelet_sim_server_stream_refusals_total", reason="stream_idle_timeout")
        >= 1
    )


def test_a_decompression_bomb_closes_its_connection(cluster: ApiUnderTest, short: Node) -> None:
    """A SYN_STREAM whose header block inflates to 256 MiB: the connection ends once the first
    MiB is inflated; the process's memory does not take the rest."""
    _exec_pod(cluster)
    path = f"/exec/{cluster.namespace}/sleeper/c?command=true&output=1"
    deflate = zlib.compressobj(9, zdict=spdy.DICTIONARY)
    # a name/value block claiming one header whose value is 256 MiB of "a"
    size = 256 << 20
    block = deflate.compress(struct.pack(">II", 1, 1) + b"x" + struct.pack(">I", size))
    chunk = b"a" * (1 << 20)
    for _ in range(size // len(chunk)):
        block += deflate.compress(chunk)
    block += deflate.flush(zlib.Z_SYNC_FLUSH)
    assert len(block) < spdy.MAX_FRAME, len(block)
    rss_before = _rss()
    up = spdy_client.connect(short.port, path, short.tls, ["v4.channel.k8s.io"])
    assert up.conn is not None  # (the block is made first: the stream idle timeout is short)
    frame = spdy.control_frame(spdy.SYN_STREAM, 0, struct.pack(">IIBB", 1, 0, 0, 0) + block)
    up.conn.send(frame)
    assert up.conn.closed.wait(10), "the server ended the connection"
    assert _rss() - rss_before < 64 << 20
    assert (
        _counter(short, "kubelet_sim_server_stream_refusals_total", reason="header_block_too_large")
        == 1
    )
    # a frame that claims more than the frame limit ends its connection too
    up = spdy_client.connect(short.port, path, short.tls, ["v4.channel.k8s.io"])
    assert up.conn is not None
    up.conn.send(struct.pack(">II", 1, 0xFFFFFF) + b"\0" * 1024)
    assert up.conn.closed.wait(10)
    assert (
        _counter(short, "kubelet_sim_server_stream_refusals_total", reason="frame_too_large") == 1
    )
    assert short.text("/healthz") == "ok"


def test_durations_as_the_kubelets_flags_take_them() -> None:
    from kubelet_sim.server.settings import parse_duration

    assert parse_duration("4h0m0s") == 4 * 3600
    assert parse_duration("1.5h") == 5400
    assert parse_duration("30s") == 30
    assert parse_duration("250ms") == 0.25
    assert parse_duration("0") == 0
    for bad in ("", "4", "h", "5 m", "-1s"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


def test_streams_past_the_cap_are_refused(
    cluster: ApiUnderTest, short: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One connection may open MAX_STREAMS streams (1000; 4 here): the next is refused with
    RST_STREAM, counted, and the connection serves on."""
    monkeypatch.setattr(spdy, "MAX_STREAMS", 4)
    _exec_pod(cluster)
    path = f"/exec/{cluster.namespace}/sleeper/c?command=sleep&command=3600&output=1"
    up = spdy_client.connect(short.port, path, short.tls, ["v4.channel.k8s.io"])
    assert up.conn is not None
    for kind in ("error", "stdout", "extra-1", "extra-2"):
        up.conn.open_stream(spdy_client.stream_headers(kind))
    with pytest.raises(ConnectionError, match="refused"):
        up.conn.open_stream(spdy_client.stream_headers("extra-3"), timeout=10)
    assert not up.conn.closed.is_set(), "the connection serves on"
    up.conn.close()
    refused = _counter(short, "kubelet_sim_server_stream_refusals_total", reason="too_many_streams")
    assert refused == 1


def test_a_websocket_frame_past_the_limit_closes_its_connection(
    cluster: ApiUnderTest, short: Node
) -> None:
    """A frame that declares 64 MiB (past websocket.MAX_MESSAGE, 4 MiB) ends the connection at
    its header, before any of it is buffered; counted."""
    _exec_pod(cluster)
    path = f"/exec/{cluster.namespace}/sleeper/c?command=sleep&command=3600&output=1"
    with _tls(short) as sock:
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
            ).encode()
        )
        sock.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101 "), head
        sock.sendall(struct.pack(">BBQ", 0x82, 0x80 | 127, 64 << 20) + b"\0\0\0\0" + b"\0" * 4096)
        assert _closed_after(sock, 10) < 10
    counted = _counter(short, "kubelet_sim_server_stream_refusals_total", reason="frame_too_large")
    assert counted == 1
