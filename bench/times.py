"""Times as the bench reads them from logs, Docker and the API: epoch seconds."""

from __future__ import annotations

from datetime import datetime


def parse_time(stamp: str) -> float:
    """An RFC 3339 time (Docker's nanoseconds or structlog's micros) as epoch seconds."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(head + "+00:00").timestamp()
    return seconds + (float("0." + frac) if frac else 0.0)
