"""The histograms behind /metrics and the timers' lateness: Prometheus' cumulative buckets."""

from __future__ import annotations

from kubelet_sim.formats.histogram import Histogram


def test_buckets_are_cumulative_and_bounds_inclusive() -> None:
    histogram = Histogram((1, 0.1, 10))
    for value in (0.05, 0.1, 0.5, 1, 7, 99):
        histogram.observe(value)
    buckets, total, count = histogram.snapshot()
    assert buckets == [(0.1, 2), (1, 4), (10, 5)]  # a value on a bound is in its bucket
    assert (total, count) == (0.05 + 0.1 + 0.5 + 1 + 7 + 99, 6)  # above every bound: +Inf only
