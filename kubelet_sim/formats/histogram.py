"""A Prometheus histogram: counts per upper bound, a sum and a count (thread-safe, no I/O).

The pod workers observe into them; the kubelet API's `/metrics` renders them.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Sequence

# The kubelet's own buckets for these two (pkg/kubelet/metrics/metrics.go).
POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480,
                     600, 900, 1200, 1800, 2700, 3600)  # fmt: skip
WORKER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(sorted(buckets))
        self._counts = [0] * len(self.bounds)  # per bucket, made cumulative by `snapshot`
        self._sum = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Cheap: a process of thousands of nodes observes every heartbeat's lateness."""
        first = bisect.bisect_left(self.bounds, value)  # the first bound >= value
        with self._lock:
            self._sum += value
            self._count += 1
            if first < len(self._counts):
                self._counts[first] += 1

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """Cumulative (bound, count) pairs, the sum and the count."""
        with self._lock:
            cumulative = itertools.accumulate(self._counts)
            return list(zip(self.bounds, cumulative, strict=True)), self._sum, self._count
