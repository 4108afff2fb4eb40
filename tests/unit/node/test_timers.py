"""The shared timers of a process of many nodes: schedule, wake, a failing task, lateness."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import URGENT, Timers
from tests.cluster import wait_for


@pytest.fixture
def timers() -> Iterator[Timers]:
    made = Timers(pool_threads=2, supervisor=Supervisor()).start()
    yield made
    made.stop()


def test_a_task_runs_at_once_then_every_interval_after_it_ended(timers: Timers) -> None:
    runs: list[float] = []
    timers.every("lease", "n1", 0.2, lambda: runs.append(time.monotonic()), jitter=0.0)
    wait_for(lambda: len(runs) >= 3, 5, "three runs")
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.19 for gap in gaps), gaps


def test_a_task_not_sliding_is_due_an_interval_after_its_last_start(timers: Timers) -> None:
    """A Lease renewal whose call takes most of the interval keeps its spacing: the next is due
    from the last one's start, as a renewTime set before a slow call."""
    starts: list[float] = []

    def slow() -> None:
        starts.append(time.monotonic())
        time.sleep(0.3)

    timers.every("lease", "n1", 0.4, slow, jitter=0.0, sliding=False)
    wait_for(lambda: len(starts) >= 4, 5, "four runs")
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(0.38 <= gap < 0.65 for gap in gaps), gaps  # sliding: 0.7 s each


def test_a_task_not_sliding_that_ran_past_its_interval_waits_it_out_after_its_end(
    timers: Timers,
) -> None:
    """A renewal that retried past its interval is not followed at once by another."""
    starts: list[float] = []

    def slower() -> None:
        starts.append(time.monotonic())
        time.sleep(0.4)

    timers.every("lease", "n1", 0.2, slower, jitter=0.0, sliding=False)
    wait_for(lambda: len(starts) >= 3, 5, "three runs")
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.58 for gap in gaps), gaps  # at once after the end: 0.4 s


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
    timers = Timers(pool_threads=1, late_after=0.05, supervisor=Supervisor()).start()
    try:
        block = threading.Event()
        timers.every("slow", "n1", 60.0, lambda: block.wait(0.5))
        timers.every("lease", "n2", 60.0, lambda: None)  # waits behind the one pool thread
        wait_for(lambda: timers.late_runs["lease"] >= 1, 5, "the late renewal counted")
        _, _, count = timers.lateness["lease"].snapshot()
        assert count >= 1
    finally:
        timers.stop()


def test_a_due_lease_renewal_runs_before_other_due_work() -> None:
    """With the pool busy, the tasks due meanwhile queue; the urgent one (a Lease) goes first,
    though it became due last."""
    timers = Timers(pool_threads=1, supervisor=Supervisor()).start()
    try:
        order: list[str] = []
        release = threading.Event()
        timers.every("node-status", "busy", 60.0, lambda: release.wait(5))
        wait_for(lambda: timers.pending() == 0, 5, "the pool's one thread taken")
        for i in range(3):
            timers.every("node-status", f"n{i}", 60.0, lambda i=i: order.append(f"status {i}"))
        timers.every("lease", "n9", 60.0, lambda: order.append("lease"), priority=URGENT)
        wait_for(lambda: timers.pending() == 0, 5, "all four due and queued")
        release.set()
        wait_for(lambda: len(order) == 4, 5, "all four run")
        assert order == ["lease", "status 0", "status 1", "status 2"]
    finally:
        timers.stop()


def test_a_quarter_of_the_pool_waits_for_lease_renewals_alone() -> None:
    """Other tasks that block hold three threads of four at most: a Lease due meanwhile runs
    at once on the fourth, and another task waits for one of theirs."""
    timers = Timers(pool_threads=4, supervisor=Supervisor()).start()
    try:
        release = threading.Event()
        blocked: list[str] = []
        ran: list[str] = []

        def block(name: str) -> None:
            blocked.append(name)
            release.wait(10)

        for i in range(3):
            timers.every("service-proxy", f"n{i}", 60.0, lambda i=i: block(f"n{i}"))
        wait_for(lambda: len(blocked) == 3, 5, "three threads held")
        timers.every("node-status", "n8", 60.0, lambda: ran.append("status"))
        timers.every("lease", "n9", 60.0, lambda: ran.append("lease"), priority=URGENT)
        wait_for(lambda: ran == ["lease"], 5, "the Lease renewed on the fourth thread")
        assert ran == ["lease"], "the node status, due first, waits for a thread of its kind"
        release.set()
        wait_for(lambda: ran == ["lease", "status"], 5, "the node status once one is free")
    finally:
        timers.stop()


def test_a_burst_of_late_runs_is_one_warning_then_one_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("kubelet_sim.loops.timers.LATE_LOG_INTERVAL", 0.3)
    timers = Timers(pool_threads=1, late_after=0.01, supervisor=Supervisor()).start()
    try:
        with capture_logs() as logs:
            release = threading.Event()
            timers.every("node-status", "busy", 60.0, lambda: release.wait(5))
            wait_for(lambda: timers.pending() == 0, 5, "the pool's one thread taken")
            for i in range(5):
                timers.every("lease", f"n{i}", 60.0, lambda: None)
            time.sleep(0.05)  # the five wait behind it: late by this much at least
            release.set()
            wait_for(lambda: timers.late_runs["lease"] == 5, 5, "five late renewals counted")
            time.sleep(0.35)  # past the quiet time: the next run writes the sum
            timers.every("lease", "on-time", 60.0, lambda: None)
            wait_for(
                lambda: any(e["event"] == "periodic tasks ran late" for e in logs), 5, "the sum"
            )
        late = [e for e in logs if e["event"].startswith("periodic task")]
        assert [e["event"] for e in late] == ["periodic task ran late", "periodic tasks ran late"]
        assert (late[1]["runs"], late[1]["nodes"]) == (4, 4)
        assert late[1]["worst_late_seconds"] >= 0.05
    finally:
        timers.stop()


def test_work_that_makes_work_waits_while_lease_renewals_are_behind() -> None:
    """A Lease due while the pool's one thread is held is behind; `wait_caught_up` returns
    only once it has run (the node starter's pacing)."""
    timers = Timers(pool_threads=1, supervisor=Supervisor()).start()
    try:
        release = threading.Event()
        timers.every("service-proxy", "n1", 60.0, lambda: release.wait(10))
        wait_for(lambda: timers.pending() == 0, 5, "the pool's one thread taken")
        renewed = threading.Event()
        timers.every("lease", "n2", 60.0, renewed.set, priority=URGENT)
        wait_for(lambda: timers.behind()[0] > 0.2, 5, "the renewal behind")
        yielded = threading.Event()

        def starter() -> None:
            timers.wait_caught_up(threading.Event(), lag=(0.2, 60.0))
            yielded.set()

        threading.Thread(target=starter, daemon=True).start()
        assert not yielded.wait(0.5), "the starter waits while the renewal is behind"
        release.set()
        assert yielded.wait(5), "the starter goes on once the renewal ran"
        assert renewed.is_set()
    finally:
        timers.stop()


def test_wait_caught_up_returns_on_stop() -> None:
    timers = Timers(pool_threads=1, supervisor=Supervisor()).start()
    try:
        release = threading.Event()
        timers.every("service-proxy", "n1", 60.0, lambda: release.wait(10))
        wait_for(lambda: timers.pending() == 0, 5, "the pool's one thread taken")
        timers.every("lease", "n2", 60.0, lambda: None, priority=URGENT)
        wait_for(lambda: timers.behind()[0] > 0.2, 5, "the renewal behind")
        stop = threading.Event()
        stop.set()
        timers.wait_caught_up(stop, lag=(0.2, 60.0))  # returns: nothing to wait for once stopped
        release.set()
    finally:
        timers.stop()
