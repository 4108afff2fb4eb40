"""Seconds from the API, bounded where they enter, and how long a timer may sleep at once.

The API server takes any int64 for a grace period: a v1.24 server stores
`terminationGracePeriodSeconds` and a delete's `gracePeriodSeconds` of 10**10 or 2**63 - 1 as
given (and a negative `terminationGracePeriodSeconds` too). Python refuses such waits:
`Condition.wait`, `time.sleep` and socket timeouts raise OverflowError past
`threading.TIMEOUT_MAX` (2**63 ns, about 292 years), and a datetime ends in the year 9999. The
kubelet has no sane answer to copy: killContainer hands the number to the runtime's
StopContainer, where `time.Duration(timeout) * time.Second` overflows int64 nanoseconds past
the same 292 years. A grace period longer than any process lives means "no SIGKILL before the
process ends", and so does any bound far past a process's life.

`MAX_SECONDS` is that bound: 2**31 - 1 s (68 years), the bound the API server itself puts on
`activeDeadlineSeconds` and, being int32, on every probe number. Whatever is below it is kept
exactly; what is above is that; what is not a number at all is the field's default. Every
function here is total: any JSON value in, a bounded int out.
"""

from __future__ import annotations

import math

MAX_SECONDS = 2**31 - 1  # 68 years: activeDeadlineSeconds' own upper bound in the API
# A timer thread sleeps at most this long at once, then looks at its clock again: no wait it
# computes (a deadline far away, a clock that jumped) can reach the platform's limits.
MAX_TIMER_WAIT = 3600.0


def bounded(raw: object, default: int, *, low: int = 0, high: int = MAX_SECONDS) -> int:
    """A number from the API (seconds, a count) as an int in [low, high]; `default` (bounded
    the same way) when `raw` is absent or not a number. A float (no server sends one) is
    rounded up to whole seconds, an infinity saturates."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        value = default
    elif isinstance(raw, float):
        if math.isnan(raw):
            value = default
        elif math.isinf(raw):
            value = high if raw > 0 else low
        else:
            value = math.ceil(raw) if abs(raw) < 2**62 else (high if raw > 0 else low)
    else:
        value = raw
    return max(low, min(high, value))


def optional_seconds(raw: object, *, low: int = 0, high: int = MAX_SECONDS) -> int | None:
    """`bounded` for a field whose absence means something (no deadline): None stays None,
    and so does a value that is not a number."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    if isinstance(raw, float) and math.isnan(raw):
        return None
    return bounded(raw, low, low=low, high=high)


def grace_seconds(raw: object, default: int = 30) -> int:
    """A grace period (the pod's, a deletion's, a probe's): 0 stays 0 (stop at once), a
    negative one is 1 as the kubelet makes it ("no matter what, we always supply a grace
    period of 1", pod_workers.go calculateEffectiveGracePeriod; the API server turns a
    negative delete grace into 1 as well), and one past `MAX_SECONDS` is `MAX_SECONDS`."""
    value = bounded(raw, default, low=-1)
    return 1 if value < 0 else value


def optional_grace_seconds(raw: object) -> int | None:
    """`grace_seconds` for a field whose absence means "use the pod's"."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    if isinstance(raw, float) and math.isnan(raw):
        return None
    return grace_seconds(raw)


def timer_wait(wait: float) -> float:
    """What a timer thread may pass to `Condition.wait` now: never negative, never more than
    `MAX_TIMER_WAIT` (the caller loops and recomputes), and a NaN is a short wait."""
    if math.isnan(wait):
        return 1.0
    return max(0.0, min(wait, MAX_TIMER_WAIT))
