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


def test_gc_drops_entries_idle_for_twice_the_maximum() -> None:
    b = KeyedBackoff(initial=10, maximum=300)
    b.next("old", event_time=0, now=0)
    b.next("recent", event_time=500, now=500)
    assert b.gc(now=600) == 0, "idle for exactly 2 x max: kept"
    assert b.gc(now=601) == 1
    assert len(b) == 1
    assert b.get("old") == 0
    assert b.get("recent") == 10


def test_a_gone_pods_entries_are_forgotten_by_prefix_or_by_uid() -> None:
    b = KeyedBackoff()
    b.next("uid1_image:1", event_time=0, now=0)  # image pulls: <uid>_<image>
    b.next("p_ns_uid1_c", event_time=0, now=0)  # crash loops: <name>_<ns>_<uid>_<container>
    b.next("p_ns_uid2_c", event_time=0, now=0)
    b.forget_prefix("uid1_")
    b.forget_containing("_uid1_")
    assert len(b) == 1
    assert b.get("p_ns_uid2_c") == 10
