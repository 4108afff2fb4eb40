"""The de-duplicating work queue: one worker per key at a time, and no change lost."""

from __future__ import annotations

import threading

import pytest

from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.workqueue import ShutDown, WorkQueue


def test_key_added_twice_is_processed_once() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_key_added_while_processing_comes_back_after_done_not_before() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")
    assert queue.get(0) is None, "a second worker must not get a key that is being processed"
    queue.done("a")
    assert queue.get(0) == "a"
    queue.done("a")
    assert queue.get(0) is None


def test_an_idle_key_waits_behind_every_other_key() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add_idle("gone")
    queue.add("a")
    queue.add("b")
    queue.add_idle("a")  # already queued: keeps its place
    assert [queue.get(0), queue.get(0)] == ["a", "b"]
    queue.add("c")  # added after the idle key, taken before it
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["c", "gone", None]
    assert len(queue) == 0
    queue.shut_down()
    with pytest.raises(ShutDown):
        queue.get(0)


def test_add_after_delivers_later() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add_after("a", 0.05)
    assert queue.get(0) is None
    assert queue.get(2.0) == "a"


def test_shut_down_wakes_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    raised = threading.Event()

    def worker() -> None:
        with pytest.raises(ShutDown):
            queue.get()
        raised.set()

    thread = threading.Thread(target=worker)
    thread.start()
    queue.shut_down()
    thread.join(2)
    assert raised.is_set()


def test_delayed_adds_keep_one_entry_per_key_at_the_earliest_time() -> None:
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add_after("a", 60)
    queue.add_after("a", 60)
    queue.add_after("a", 0.05)
    queue.add_after("b", 60)
    assert queue.pending_delayed() == 2
    assert queue.get(2.0) == "a"
    assert queue.get(0.1) is None, "the later entries for the key were superseded"
    queue.shut_down()


def test_a_delay_past_any_timer_holds_up_no_other_key() -> None:
    """The delay thread serves every key: 10**10 s or an infinity waits (bounded), a NaN is
    no delay, and a short one next to them comes on time."""
    supervisor = Supervisor()
    queue: WorkQueue[str] = WorkQueue(supervisor)
    queue.add_after("far", 10**10)
    queue.add_after("farther", float("inf"))
    queue.add_after("nan", float("nan"))
    queue.add_after("soon", 0.05)
    assert queue.get(0) == "nan"
    assert queue.get(5.0) == "soon"
    assert queue.pending_delayed() == 2
    assert supervisor.healthy
    assert all(h.restarts == 0 for h in supervisor.health().values())
    queue.shut_down()


def test_delayed_keys_come_in_the_order_of_their_times_whatever_order_they_were_added() -> None:
    """A later key added behind an earlier one does not wake the delay thread (it wakes for
    the earlier one anyway); an earlier one added behind a later one does."""
    queue: WorkQueue[str] = WorkQueue(Supervisor())
    queue.add_after("second", 0.2)
    queue.add_after("third", 0.4)
    queue.add_after("first", 0.05)
    got = []
    for _ in range(3):
        key = queue.get(5.0)
        assert key is not None
        got.append(key)
        queue.done(key)
    assert got == ["first", "second", "third"]
    queue.shut_down()
