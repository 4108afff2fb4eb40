"""What a scale run's agent said about itself in a window: its late periodic runs and its
full garbage collections, read from its JSON log.

A Lease the bench sees renewed late was either started late in the agent (its timers' pool
busy, the interpreter stopped by a collection) or sent on time and answered late; the agent
logs the first kind, so the two can be told apart.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

LATE_ONE, LATE_MANY = "periodic task ran late", "periodic tasks ran late"
GC_PAUSE = "a full garbage collection stopped every thread"


@dataclass
class AgentLog:
    late_runs: dict[str, int] = field(default_factory=dict)  # by kind: started > 1 s late
    worst_late_seconds: dict[str, float] = field(default_factory=dict)  # by kind
    gc_pauses: list[float] = field(default_factory=list)  # seconds, each over 1 s
    warnings: dict[str, int] = field(default_factory=dict)  # every warning/error by event


def read(path: Path, start: float, end: float) -> AgentLog:
    """The log's lines stamped in [start, end] (epoch seconds); lines that are not JSON
    (a traceback) are skipped."""
    runs: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    worst: dict[str, float] = {}
    pauses: list[float] = []
    with path.open(errors="replace") as f:
        for line in f:
            entry = _entry(line)
            if entry is None or not start <= _stamp(entry) <= end:
                continue
            event = str(entry.get("event", ""))
            if entry.get("level") in ("warning", "error", "critical"):
                warnings[event] += 1
            kind = str(entry.get("kind", ""))
            if event == LATE_ONE:
                runs[kind] += 1
                late = float(entry.get("late_seconds", 0.0))
            elif event == LATE_MANY:
                runs[kind] += int(entry.get("runs", 0))
                late = float(entry.get("worst_late_seconds", 0.0))
            else:
                if event == GC_PAUSE:
                    pauses.append(float(entry.get("seconds", 0.0)))
                continue
            worst[kind] = max(worst.get(kind, 0.0), round(late, 3))
    return AgentLog(dict(runs), worst, pauses, dict(warnings.most_common()))


def _entry(line: str) -> dict[str, object] | None:
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _stamp(entry: dict[str, object]) -> float:
    text = str(entry.get("timestamp", ""))
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return -1.0
