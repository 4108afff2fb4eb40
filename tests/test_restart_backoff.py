"""CrashLoopBackOff timing: restart at once, then 10 s doubling to 300 s, reset after 10 min."""

from __future__ import annotations

from kubelet_sim.pod.restart_backoff import KeyedBackoff, go_duration


def test_first_failure_restarts_at_once_then_waits_double() -> None:
    b = KeyedBackoff()
    assert not b.in_backoff_since("k", event_time=100, now=100)
    b.next("k", event_time=100, now=100)  # first restart, immediate
    assert b.get("k") == 10
    assert b.in_backoff_since("k", event_time=105, now=106)
    assert not b.in_backoff_since("k", event_time=105, now=115.5)
    b.next("k", event_time=105, now=116)
    assert b.get("k") == 20
    for _ in range(10):
        b.next("k", event_time=120, now=120)
    assert b.get("k") == 300


def test_resets_after_ten_minutes_of_clean_running() -> None:
    b = KeyedBackoff()
    b.next("k", event_time=0, now=0)
    b.next("k", event_time=1, now=1)
    assert b.get("k") == 20
    assert not b.in_backoff_since("k", event_time=602, now=602)
    b.next("k", event_time=602, now=602)
    assert b.get("k") == 10


def test_go_duration() -> None:
    assert [go_duration(s) for s in (10, 20, 40, 80, 160, 300)] == [
        "10s", "20s", "40s", "1m20s", "2m40s", "5m0s",
    ]  # fmt: skip
