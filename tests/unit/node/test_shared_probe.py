"""The runtime probe a process of many nodes shares: one call per TTL, failures shared too."""

from __future__ import annotations

import threading

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


def test_while_one_caller_asks_again_the_others_take_the_last_answer_at_once() -> None:
    now = [100.0]
    engine = _Engine()
    probe = SharedProbe(engine, clock=lambda: now[0])
    assert probe.ping()
    now[0] += PING_TTL
    asking, release = threading.Event(), threading.Event()

    def slow_ping() -> bool:
        asking.set()
        release.wait(10)
        engine.calls += 1
        return True

    engine.ping = slow_ping  # type: ignore[method-assign]
    slow = threading.Thread(target=probe.ping)
    slow.start()
    assert asking.wait(10)
    assert probe.ping()  # the last answer, while the slow call is in flight
    assert engine.calls == 1
    release.set()
    slow.join(10)
    assert engine.calls == 2


def test_a_first_answer_is_waited_for_and_asked_once() -> None:
    engine = _Engine()
    gate = threading.Event()
    real_ping = engine.ping

    def gated_ping() -> bool:
        gate.wait(10)
        return real_ping()

    engine.ping = gated_ping  # type: ignore[method-assign]
    probe = SharedProbe(engine, clock=lambda: 100.0)
    answers: list[bool] = []
    callers = [threading.Thread(target=lambda: answers.append(probe.ping())) for _ in range(5)]
    for caller in callers:
        caller.start()
    gate.set()
    for caller in callers:
        caller.join(10)
    assert answers == [True] * 5
    assert engine.calls == 1
