"""The shared timers of a process of many nodes: schedule, wake, a failing task, lateness."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

from kubelet_sim.timers import Timers
from tests.cluster import wait_for


@pytest.fixture
def timers() -> Iterator[Timers]:
    made = Timers(pool_threads=2).start()
    yield made
    made.stop()


def test_a_task_runs_at_once_then_every_interval_after_it_ended(timers: Timers) -> None:
    runs: list[float] = []
    timers.every("lease", "n1", 0.2, lambda: runs.append(time.monotonic()), jitter=0.0)
    wait_for(lambda: len(runs) >= 3, 5, "three runs")
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.19 for gap in gaps), gaps


def test_wake_runs_a_task_before_its_interval(timers: Timers) -> None:
    runs: list[float] = []
    timer = timers.every("node-status", "n1", 60.0, lambda: runs.append(time.monotonic()))
    wait_for(lambda: len(runs) == 1, 5, "the first run")
    timer.wake()
    wait_for(lambda: len(runs) == 2, 5, "a run soon after wake, not 60 s on")


def test_a_task_woken_while_it_runs_runs_once_more_and_never_twice_at_once(
    timers: Timers,
) -> None:
    inside, most, runs = [0], [0], [0]
    release = threading.Event()
    lock = threading.Lock()

    def body() -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            runs[0] += 1
        if runs[0] == 1:
            release.wait(5)
        with lock:
            inside[0] -= 1

    timer = timers.every("proxy", "n1", 60.0, body)
    wait_for(lambda: runs[0] == 1, 5, "the first run")
    timer.wake()
    timer.wake()
    release.set()
    wait_for(lambda: runs[0] == 2, 5, "one more run after the wakes")
    assert most[0] == 1


def test_a_task_that_raises_keeps_its_schedule(timers: Timers) -> None:
    calls = [0]

    def body() -> None:
        calls[0] += 1
        raise RuntimeError("a bug")

    timers.every("gc", "n1", 0.05, body)
    wait_for(lambda: calls[0] >= 3, 5, "runs after the failure")
    assert timers.failures >= 3


def test_cancel_ends_a_task(timers: Timers) -> None:
    calls = [0]
    timer = timers.every("lease", "n1", 0.05, lambda: calls.__setitem__(0, calls[0] + 1))
    wait_for(lambda: calls[0] >= 1, 5, "a run")
    timer.cancel()
    seen = calls[0]
    other = [0]
    timers.every("lease", "n2", 0.05, lambda: other.__setitem__(0, other[0] + 1))
    wait_for(lambda: other[0] >= 4, 5, "another task's runs, over several intervals")
    assert calls[0] <= seen + 1  # at most the run already handed to the pool


def test_a_run_later_than_the_limit_is_counted_per_kind() -> None:
    timers = Timers(pool_threads=1, late_after=0.05).start()
    try:
        block = threading.Event()
        timers.every("slow", "n1", 60.0, lambda: block.wait(0.5))
        timers.every("lease", "n2", 60.0, lambda: None)  # waits behind the one pool thread
        wait_for(lambda: timers.late_runs["lease"] >= 1, 5, "the late renewal counted")
        _, _, count = timers.lateness["lease"].snapshot()
        assert count >= 1
    finally:
        timers.stop()
