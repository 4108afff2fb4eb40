"""The runtime probe a process of many nodes shares: one call per TTL, failures shared too."""

from __future__ import annotations

import pytest

from kubelet_sim import cri
from kubelet_sim.node.shared_probe import PING_TTL, SharedProbe


class _Engine:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def ping(self) -> bool:
        self.calls += 1
        if self.down:
            raise ConnectionError("engine down")
        return True

    def version(self) -> str:
        return "20.10.24"

    def list_images(self) -> list[cri.ImageSummary]:
        return []


def test_many_nodes_asking_within_the_ttl_cost_one_call_and_a_later_one_asks_again() -> None:
    now = [100.0]
    engine = _Engine()
    probe = SharedProbe(engine, clock=lambda: now[0])
    assert all(probe.ping() for _ in range(1000))
    assert engine.calls == 1
    now[0] += PING_TTL
    assert probe.ping()
    assert engine.calls == 2


def test_a_failure_is_shared_within_the_ttl_and_then_asked_again() -> None:
    now = [100.0]
    engine = _Engine()
    engine.down = True
    probe = SharedProbe(engine, clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(ConnectionError):
            probe.ping()
    assert engine.calls == 1
    engine.down = False
    now[0] += PING_TTL
    assert probe.ping()
