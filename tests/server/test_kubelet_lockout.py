"""Clients without credentials cannot lock the kubelet API out (issue 34, deliverable 1): at the
connection cap the connection that has waited longest makes room, one that never
authenticated first; a connection that keeps failing authentication is closed; random bearer
tokens cost the API server a few TokenReviews a second, not one each. Counted in /metrics.

The issue's case is 5,000 connections against the default cap of 4,096; here the cap is 50
and 200 connections are opened (four times the cap), which is the same situation at a cost a
test can pay (each connection is a TLS handshake on this machine's two cores).

Both API servers: the TokenReviews are counted where the API server shows them (the fake's
request log, the real one's `apiserver_request_total`).
"""

from __future__ import annotations

import contextlib
import http.client
import re
import secrets
import socket
import ssl
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim.kube.rest import request_bytes
from kubelet_sim.kube.reviews import User
from kubelet_sim.server import budgets
from kubelet_sim.server.settings import ConnectionLimits
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.kubelet_api import COUNT, Node, admin_token, sa_token, serving_node
from tests.pods import container, make_pod, wait_status

__all__ = ["admin_token"]  # the fixture

CAP = 50


def _context(node: Node | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if node is not None:
        context.load_cert_chain(node.tls / "admin.crt", node.tls / "admin.key")
    return context


def _https(node: Node, context: ssl.SSLContext, source: str = "") -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        "127.0.0.1",
        node.port,
        context=context,
        timeout=10,
        source_address=(source, 0) if source else None,
    )


def _ask(conn: http.client.HTTPSConnection, path: str, token: str = "") -> http.client.HTTPResponse:
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    answer = conn.getresponse()
    answer.read()
    return answer


def _counter(node: Node, name: str, **labels: str) -> float:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    series = rf"{name}\{{{inner}\}}" if labels else name
    found = re.search(rf"^{series} (\S+)$", node.text("/metrics"), re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def capped(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Node]:
    with serving_node(cluster, docker_env, tmp_path, ConnectionLimits(max_connections=CAP)) as n:
        yield n


@pytest.mark.through_api_server  # `kubectl logs` through the API server, once flooded
def test_connections_that_got_401_and_stay_open_lock_no_one_out(
    cluster: ApiUnderTest, capped: Node
) -> None:
    """200 connections, each answered 401 and kept open by its client (the idle timeout is
    the kubelet's 90 s): then an authenticated /healthz, /containerLogs and `kubectl logs`
    through the API server succeed within a second; the flood evicted its own oldest."""
    node = capped
    make_pod(cluster, "talker", container(command=["sh", "-c", "echo said; sleep 3600"]))
    wait_status(cluster, "talker", lambda s: s.get("phase") == "Running", 30, "running")
    logs = f"/containerLogs/{cluster.namespace}/talker/c"
    wait_for(lambda: node.text(logs), 20, "a log")
    flood: list[http.client.HTTPSConnection] = []
    try:
        for _ in range(4 * CAP):
            conn = _https(node, _context())
            flood.append(conn)
            assert _ask(conn, "/pods").status == 401
        started = time.monotonic()
        assert node.text("/healthz") == "ok"
        assert node.text(logs) == "said\n"
        assert cluster.core.read_namespaced_pod_log("talker", cluster.namespace) == "said\n"
        took = time.monotonic() - started
        assert took < 1.0 * deadline_scale(), f"{took:.2f} s"
        still_open = sum(1 for c in flood if c.sock is not None and not _ended(c.sock))
        assert CAP - 5 <= still_open <= CAP, "the newest of the flood hold the places"
    finally:
        for conn in flood:
            conn.close()
    evicted = _counter(
        node, "kubelet_sim_server_connections_evicted_total", reason="unauthenticated"
    )
    assert evicted >= 3 * CAP
    assert _counter(node, "kubelet_sim_server_authentication_failures_total") >= 4 * CAP


def _ended(sock: socket.socket) -> bool:
    """Whether the server has closed (or reset) the connection; never waits."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_a_connection_that_keeps_failing_authentication_is_closed(capped: Node) -> None:
    """max_auth_failures (3) answers of 401 on one connection: the last says Connection:
    close and the connection ends; an authenticated connection serves on."""
    raw = socket.create_connection(("127.0.0.1", capped.port), timeout=10)
    with _context().wrap_socket(raw) as sock:
        answers = []
        for token in ("wrong", "", "wrong again"):
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
            answer = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
            answer.begin()
            answer.read()
            answers.append((answer.status, answer.getheader("Connection")))
        assert answers == [(401, None), (401, None), (401, "close")]
        assert sock.recv(1) == b"", "then the server ends the connection"
    refused = _counter(
        capped, "kubelet_sim_server_connections_refused_total", reason="authentication_failures"
    )
    assert refused == 1
    good = _https(capped, _context(capped))
    try:
        assert all(_ask(good, "/healthz").status == 200 for _ in range(5))
    finally:
        good.close()


def test_past_the_cap_with_every_connection_busy_a_new_one_is_reset(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """Room is made only from connections that wait: with the cap taken by followed logs
    (streams, each with a request in hand) a new connection is reset, and counted."""
    limits = ConnectionLimits(max_connections=3)
    with serving_node(cluster, docker_env, tmp_path, limits) as node:
        make_pod(cluster, "counter", container(command=COUNT))
        wait_status(cluster, "counter", lambda s: s.get("phase") == "Running", 30, "running")
        path = f"/containerLogs/{cluster.namespace}/counter/c?follow=true"
        followers = []
        try:
            for _ in range(3):
                follower = _https(node, _context(node))
                follower.request("GET", path)
                answer = follower.getresponse()
                assert answer.readline().startswith(b"line ")
                followers.append(follower)
            with (
                pytest.raises(ConnectionResetError),
                socket.create_connection(("127.0.0.1", node.port), timeout=10) as late,
            ):
                late.recv(1)
        finally:
            for follower in followers:
                follower.close()

        def refused() -> float | None:  # once a follower's stream has seen its client go
            with contextlib.suppress(urllib.error.URLError):
                name = "kubelet_sim_server_connections_refused_total"
                return _counter(node, name, reason="max_connections")
            return None

        assert wait_for(refused, 10, "the followers let go") >= 1


def _token_reviews(cluster: ApiUnderTest) -> int:
    """TokenReviews the API server has answered (so far)."""
    if cluster.fake is not None:
        return cluster.fake.count("create", "tokenreviews")
    text = request_bytes(cluster.api, "/metrics").decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{")
        and 'resource="tokenreviews"' in line
        and 'verb="POST"' in line
    )


def test_random_bearer_tokens_cost_a_few_token_reviews_a_second(
    cluster: ApiUnderTest, capped: Node, admin_token: str
) -> None:
    """A client sends random tokens at up to 200 a second for two seconds: its address spends
    FAILED_BURST reviews, then FAILED_PER_SECOND, and is answered 429 beyond that; a repeated
    bad token is answered from the cache. A good token from another address gets in at once."""
    node = capped
    before = _token_reviews(cluster)
    conn = _https(node, _context())
    try:
        for _ in range(3):  # one token three times: one review, then the cache (and closed)
            assert _ask(conn, "/healthz", "the-same-wrong-token").status == 401
    finally:
        conn.close()
    wait_for(lambda: _token_reviews(cluster) >= before + 1, 5, "the first review counted")
    statuses: dict[int, int] = {}
    started = time.monotonic()
    sent = 0
    conn = _https(node, _context())
    try:
        while (elapsed := time.monotonic() - started) < 2.0:
            if sent >= 200 * elapsed:
                time.sleep(0.001)
                continue
            try:
                status = _ask(conn, "/healthz", secrets.token_urlsafe(32)).status
            except (ConnectionError, http.client.HTTPException, ssl.SSLError):
                conn.close()
                conn = _https(node, _context())
                continue
            statuses[status] = statuses.get(status, 0) + 1
            sent += 1
    finally:
        conn.close()
    elapsed = time.monotonic() - started
    other = _https(node, _context(), source="127.0.0.2")  # another address, its own budget
    try:
        assert _ask(other, "/healthz", admin_token).status == 200
    finally:
        other.close()
    bound = 1 + budgets.ADDRESS_BURST + budgets.ADDRESS_PER_SECOND * elapsed + 1  # + admin_token
    reviews = _token_reviews(cluster) - before
    assert sent >= 100, f"only {sent} requests sent in {elapsed:.1f} s"
    assert set(statuses) <= {401, 429}, statuses
    assert statuses.get(429, 0) >= sent - bound, statuses
    assert reviews <= bound, f"{reviews} TokenReviews for {sent} random tokens"
    throttled = _counter(node, "kubelet_sim_server_token_reviews_throttled_total")
    assert throttled == statuses.get(429, 0)
    assert _counter(node, "kubelet_sim_server_token_cache_hits_total", result="rejected") >= 2
    assert _counter(node, "kubelet_sim_server_token_reviews_total", result="rejected") <= bound


def test_an_exec_request_gets_no_thread_before_it_is_authenticated(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 2: with room for one stream, an exec request whose token is still being
    reviewed (the API server slow to answer) holds no stream thread: the streams gauge stays 0
    and an authenticated exec meanwhile is answered (here: its pod does not exist), not 503.
    Once the review ends the held request gets its 401."""
    limits = ConnectionLimits(max_streams=1)
    with serving_node(cluster, docker_env, tmp_path, limits) as node:
        server = node.agent.agent.server
        assert server is not None
        reviewing, release = threading.Event(), threading.Event()
        review = server.gate.reviews.authenticate

        def slow(token: str) -> User | None:
            if token == "held-token":
                reviewing.set()
                release.wait(30)
            return review(token)

        monkeypatch.setattr(server.gate.reviews, "authenticate", slow)
        exec_path = f"/exec/{cluster.namespace}/no-such-pod/c?command=true&output=1"
        held: list[int] = []

        def ask_held() -> None:
            conn = _https(node, _context())
            try:
                held.append(_ask(conn, exec_path, "held-token").status)
            finally:
                conn.close()

        asker = threading.Thread(target=ask_held, daemon=True)
        asker.start()
        try:
            assert reviewing.wait(10 * deadline_scale()), "the held review began"
            assert _counter(node, "kubelet_sim_server_streams") == 0
            conn = _https(node, _context(node))
            try:
                answer = _ask(conn, exec_path)
            finally:
                conn.close()
            assert answer.status == 404, "the exec's own answer (no such pod), not 503"
        finally:
            release.set()
            asker.join(30)
        assert held == [401]


def _random_tokens(node: Node, source: str, count: int) -> list[int]:
    """`count` requests with random tokens from `source`, on a new connection whenever the
    node closes one (after max_auth_failures answers)."""
    statuses: list[int] = []
    conn = _https(node, _context(), source)
    try:
        while len(statuses) < count:
            try:
                statuses.append(_ask(conn, "/healthz", secrets.token_urlsafe(32)).status)
            except (ConnectionError, http.client.HTTPException, ssl.SSLError):
                conn.close()
                conn = _https(node, _context(), source)
    finally:
        conn.close()
    return statuses


def test_addresses_taking_turns_get_a_bounded_number_of_reviews(
    cluster: ApiUnderTest, capped: Node, admin_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 10: more client addresses than the budget table holds take turns, each
    spending its burst of failed TokenReviews twice over (one pushed out came back with a full
    budget: the issue's 4,097 /64s got 40,969 reviews). Here the table holds 30 and 60
    loopback addresses take turns: the API server sees at most the process's bound, and a
    client that authenticated before the flood gets its new token reviewed, not 429."""
    node = capped
    monkeypatch.setattr(budgets, "ADDRESS_LIMIT", 30)
    known = _https(node, _context(), "127.0.0.1")
    try:
        assert _ask(known, "/healthz", admin_token).status == 200
    finally:
        known.close()
    renewed = sa_token(cluster, "renewed")
    before = _token_reviews(cluster)
    started = time.monotonic()
    statuses: list[int] = []
    for _turn in range(2):
        for i in range(60):
            statuses += _random_tokens(node, f"127.0.3.{i + 1}", int(budgets.ADDRESS_BURST))
    elapsed = time.monotonic() - started
    late = _https(node, _context(), "127.0.0.1")
    try:
        assert _ask(late, "/healthz", renewed).status == 403, "reviewed: its user may not"
    finally:
        late.close()
    bound = budgets.PROCESS_BURST + budgets.PROCESS_PER_SECOND * elapsed + 1  # + renewed
    reviews = _token_reviews(cluster) - before
    assert set(statuses) == {401, 429}, statuses
    assert reviews <= bound, f"{reviews} TokenReviews for {len(statuses)} random tokens"
