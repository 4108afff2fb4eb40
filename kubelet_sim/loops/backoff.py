"""Jittered exponential backoff, as client-go's wait.Backoff uses for watches and heartbeats."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delay that doubles per failure up to a cap, with jitter so many clients don't sync up.

    `reset()` after a success; `next_delay()` after each failure.
    """

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    _current: float = field(default=0.0, init=False)
    _rng: random.Random = field(default_factory=random.Random, init=False, repr=False)

    def next_delay(self) -> float:
        self._current = (
            self.initial if self._current == 0 else min(self._current * self.factor, self.cap)
        )
        return self._current * (1 + self.jitter * self._rng.random())

    def reset(self) -> None:
        self._current = 0.0
