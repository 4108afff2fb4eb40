"""bench/agentlog: the agent's own account of a scale run's idle window."""

from __future__ import annotations

import json
from pathlib import Path

from bench import agentlog


def _line(at: str, event: str, level: str = "warning", **kw: object) -> str:
    return json.dumps({"timestamp": at, "event": event, "level": level, **kw}) + "\n"


def test_late_runs_and_pauses_in_the_window_only(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(
        _line("2026-11-29T10:00:00.000000Z", agentlog.LATE_ONE, kind="lease", late_seconds=9.0)
        + "Traceback (most recent call last):\n"
        + _line("2026-11-29T10:01:00.000000Z", agentlog.LATE_ONE, kind="lease", late_seconds=1.5)
        + _line(
            "2026-11-29T10:01:10.000000Z",
            agentlog.LATE_MANY,
            kind="lease",
            runs=40,
            nodes=40,
            worst_late_seconds=3.25,
        )
        + _line("2026-11-29T10:01:20.000000Z", agentlog.GC_PAUSE, seconds=1.8)
        + _line("2026-11-29T10:01:30.000000Z", "node registered", level="info")
        + _line("2026-11-29T10:09:00.000000Z", agentlog.GC_PAUSE, seconds=2.0)
    )
    start = 1_795_946_430.0  # 2026-11-29T10:00:30Z
    said = agentlog.read(log, start, start + 120)
    assert said.late_runs == {"lease": 41}
    assert said.worst_late_seconds == {"lease": 3.25}
    assert said.gc_pauses == [1.8]
    assert said.warnings == {agentlog.LATE_MANY: 1, agentlog.LATE_ONE: 1, agentlog.GC_PAUSE: 1}
