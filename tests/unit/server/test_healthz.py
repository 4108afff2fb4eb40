"""The process's plain-HTTP /healthz (`--healthz-port`), what a workload's liveness probe reads."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.server.healthz import HealthzServer


@pytest.fixture
def health() -> Iterator[tuple[list[tuple[bool, str]], HealthzServer]]:
    answer = [(True, "")]
    server = HealthzServer("127.0.0.1", 0, lambda: answer[0], Supervisor()).start()
    yield answer, server
    server.stop()


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_healthz_says_ok_then_the_failure(
    health: tuple[list[tuple[bool, str]], HealthzServer],
) -> None:
    answer, server = health
    assert _get(server.port, "/healthz") == (200, "ok")
    answer[0] = (False, "node n1: loop 'pods' failed 5 times in a row: boom")
    assert _get(server.port, "/healthz") == (
        500,
        "healthz check failed: node n1: loop 'pods' failed 5 times in a row: boom",
    )
    assert _get(server.port, "/metrics")[0] == 404


def test_stop_ends_its_thread_and_frees_the_port() -> None:
    server = HealthzServer("127.0.0.1", 0, lambda: (True, ""), Supervisor()).start()
    thread = server._thread
    assert thread is not None
    assert thread.is_alive()
    server.stop()
    assert not thread.is_alive()
    HealthzServer("127.0.0.1", server.port, lambda: (True, ""), Supervisor()).stop()
