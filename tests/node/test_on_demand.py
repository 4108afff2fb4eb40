"""Supervised threads on demand (`Supervisor.on_demand`): a thread only while there is work,
none when idle, no work left behind, and a body that raises restarted as any loop.

No API server or Docker: these run the same in both passes."""

from __future__ import annotations

import threading
import time
from collections import deque

from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import RUNNING, Supervisor
from tests.cluster import wait_for


class Work:
    """Items in a deque under a lock, taken by the on-demand body; what was done, in order."""

    def __init__(self, supervisor: Supervisor, *, limit: int = 1, linger: float = 0.2) -> None:
        self.items: deque[int] = deque()
        self.done: list[int] = []
        self.lock = threading.Lock()
        self.busy = self.most_busy = 0
        self.stop = threading.Event()
        self.loop = supervisor.on_demand("work", self.body, self.stop, limit=limit, linger=linger)
        self.before_each = lambda _item: None

    def add(self, *items: int) -> None:
        with self.lock:
            self.items.extend(items)
        for _ in items:
            self.loop.wake()

    def body(self) -> None:
        while True:
            with self.lock:
                if not self.items:
                    return
                item = self.items.popleft()
                self.busy += 1
                self.most_busy = max(self.most_busy, self.busy)
            try:
                self.before_each(item)
            except BaseException:
                with self.lock:
                    self.busy -= 1
                raise
            with self.lock:
                self.busy -= 1
                self.done.append(item)


def quick() -> Backoff:
    return Backoff(initial=0.05, cap=0.1)


def test_a_thread_exists_only_while_there_is_work() -> None:
    supervisor = Supervisor()
    work = Work(supervisor)
    work.add(1)
    assert work.loop.running() == 0, "no thread before start: the wake is kept"
    work.loop.start()
    wait_for(lambda: work.done == [1], 5, "the item queued before start")
    assert "work" in supervisor.health(), "a supervised loop while its thread lives"
    wait_for(lambda: work.loop.running() == 0, 5, "the thread ends once idle")
    assert "work" not in supervisor.health()
    assert not [t for t in threading.enumerate() if t.name == "work"]
    work.add(2, 3)
    wait_for(lambda: work.done == [1, 2, 3], 5, "later work gets a new thread")
    wait_for(lambda: work.loop.running() == 0, 5, "and it ends again")
    work.loop.stop(1)


def test_a_body_that_raises_on_demand_is_restarted_and_its_work_done() -> None:
    supervisor = Supervisor(backoff=quick)
    work = Work(supervisor, linger=5.0)
    raised: list[int] = []

    def fails_once(item: int) -> None:
        if not raised:
            raised.append(item)
            with work.lock:
                work.items.appendleft(item)  # not done: the restarted body takes it again
            raise RuntimeError("on demand")

    work.before_each = fails_once
    work.loop.start()
    work.add(7)
    wait_for(lambda: 7 in work.done and work.busy == 0, 10, "the item, after a restart")
    health = supervisor.health()["work"]
    assert (health.state, health.restarts, health.last_error) == (
        RUNNING,
        1,
        "RuntimeError: on demand",
    )
    assert raised == [7]
    work.loop.stop(2)
    assert work.loop.running() == 0, "stop ends a lingering thread at once"
    assert "work" not in supervisor.health()


def test_threads_run_in_parallel_up_to_the_limit() -> None:
    """Three items that each wait for the other two end only if three threads run at once."""
    supervisor = Supervisor()
    work = Work(supervisor, limit=3)
    barrier = threading.Barrier(3, timeout=5)
    work.before_each = lambda _item: barrier.wait()
    work.loop.start()
    work.add(1, 2, 3)
    wait_for(lambda: sorted(work.done) == [1, 2, 3], 10, "three items side by side")
    assert not barrier.broken
    names = {t.name for t in threading.enumerate() if t.name.startswith("work-")}
    assert names <= {"work-0", "work-1", "work-2"}
    work.loop.stop(1)


def test_no_wake_is_lost_while_threads_end_and_begin() -> None:
    """Bursts from four producers, with pauses past the linger between them: threads end and
    are made again while work arrives, and every item is done, never more than the limit at
    once."""
    supervisor = Supervisor()
    work = Work(supervisor, limit=3, linger=0.001)
    work.before_each = lambda item: time.sleep(0.0005 * (item % 3))
    work.loop.start()
    total = 0
    for burst in range(10):

        def produce(base: int) -> None:
            for i in range(25):
                work.add(base + i)

        producers = [
            threading.Thread(target=produce, args=(burst * 1000 + p * 100,)) for p in range(4)
        ]
        for p in producers:
            p.start()
        for p in producers:
            p.join()
        total += 100
        wait_for(lambda: len(work.done) == total, 10, f"burst {burst} all done")  # noqa: B023
        time.sleep(0.005)
    assert len(set(work.done)) == total, "each item once"
    assert work.most_busy <= 3
    wait_for(lambda: work.loop.running() == 0, 5, "no thread after the last burst")
    work.loop.stop(1)
