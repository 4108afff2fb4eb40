"""One runtime probe for every node of a process: the engine is the same for all of them.

Each node's status update asks whether the runtime answers, its version and its images. A
thousand nodes asking every 10 s would be 200 Docker calls a second for one answer; the
kubelet itself refreshes its runtime state every 5 s (updateRuntimeUp), so an answer this
young is what every node of the set reports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kubelet_sim import cri
from kubelet_sim.node.status import IMAGE_LIST_PERIOD, RuntimeProbe

PING_TTL = 2.0  # seconds an answer (or a failure) stands for every node

T = TypeVar("T")


class SharedProbe:
    """A RuntimeProbe that asks the real one at most once per TTL; a failure is shared too
    (raised again to each caller within the TTL), so a dead engine costs no call per node.

    While one caller asks again, the others take the last answer at once: a slow engine must
    not hold every thread of the process's timers (and the Lease renewals queued behind them)
    waiting on one call. Only a first answer is waited for."""

    def __init__(self, probe: RuntimeProbe, *, clock: Callable[[], float] = time.monotonic):
        self._probe = probe
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._answers: dict[str, tuple[float, object, BaseException | None]] = {}
        self._asking: set[str] = set()  # keys a caller is asking the engine for now

    def ping(self) -> bool:
        return self._cached("ping", PING_TTL, self._probe.ping)

    def version(self) -> str:
        return self._cached("version", PING_TTL, self._probe.version)

    def list_images(self) -> list[cri.ImageSummary]:
        return self._cached("images", IMAGE_LIST_PERIOD, self._probe.list_images)

    def _cached(self, key: str, ttl: float, call: Callable[[], T]) -> T:
        with self._cond:
            self._cond.wait_for(lambda: key in self._answers or key not in self._asking)
            known = self._answers.get(key)
            now = self._clock()
            ask = key not in self._asking and (known is None or now - known[0] >= ttl)
            if ask:
                self._asking.add(key)
        if ask:
            try:
                known = (now, call(), None)
            except Exception as exc:
                known = (now, None, exc)
            finally:
                with self._cond:
                    self._asking.discard(key)
                    if known is not None:
                        self._answers[key] = known
                    self._cond.notify_all()
        assert known is not None
        _, value, error = known
        if error is not None:
            raise error
        return value  # type: ignore[return-value]
