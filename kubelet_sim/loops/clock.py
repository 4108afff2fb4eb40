"""The one clock: a Protocol for what reads time, and the real clock behind it.

The pod workers and the prober take a Clock at construction (backoffs, grace periods,
deadlines, probe schedules); tests pass one they move by hand (tests/fakeruntime/clock.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...  # Unix seconds: container timestamps, deadlines from the API

    def now(self) -> datetime: ...  # aware, UTC: times written in a status


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()
