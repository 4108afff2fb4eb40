"""The garbage collector of a process of many nodes: full collections measured, the start's
objects frozen out of later ones."""

from __future__ import annotations

import gc
import itertools

from kubelet_sim.loops.collector import GarbageCollector


def test_each_full_collection_is_measured_while_watched() -> None:
    ticks = itertools.count(0, 3)  # every collection takes 3 s on this clock
    collector = GarbageCollector(clock=lambda: float(next(ticks)))
    collector.watch()
    try:
        gc.collect(0)  # a young collection: not a pause of the whole heap
        gc.collect()
        gc.collect()
    finally:
        collector.unwatch()
    gc.collect()  # no longer watched
    buckets, total, count = collector.pauses.snapshot()
    assert (count, total) == (2, 6.0)
    assert dict(buckets)[2] == 0
    assert dict(buckets)[5] == 2


def test_settle_freezes_what_survived_the_start() -> None:
    collector = GarbageCollector()
    kept = [{"node": i} for i in range(1000)]
    try:
        collector.settle()
        # At least what the test keeps (other threads of a test process free frozen objects too).
        assert collector.frozen >= len(kept)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
