"""The bench's watch carries on when the server ends a stream early: from the last
resourceVersion, or from a new list when that version is gone (410). No API server."""

from __future__ import annotations

import json
import threading
from typing import Any

from bench.kube import ObjectWatch


class _Answer:
    def __init__(self, data: bytes = b"", lines: list[dict[str, Any]] | None = None) -> None:
        self.data = data
        self._lines = lines or []

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        for line in self._lines:
            yield json.dumps(line).encode() + b"\n"

    def close(self) -> None:
        pass


def _lease(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


def test_a_stream_ended_early_is_opened_again_and_a_gone_version_listed_anew() -> None:
    watched: list[str | None] = []
    lists = [
        {"metadata": {"resourceVersion": "10"}, "items": [_lease("a", "9")]},
        {"metadata": {"resourceVersion": "30"}, "items": [_lease("a", "25")]},
    ]
    streams = [
        [{"type": "MODIFIED", "object": _lease("a", "11")}],  # then the server closes it
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410}}],
        [{"type": "MODIFIED", "object": _lease("a", "31")}],
    ]
    done = threading.Event()

    def list_fn(watch: bool = False, resource_version: str | None = None, **_: Any) -> _Answer:
        if not watch:
            return _Answer(json.dumps(lists.pop(0)).encode())
        watched.append(resource_version)
        if not streams:
            done.set()
            return _Answer()
        return _Answer(lines=streams.pop(0))

    seen: list[tuple[str, str]] = []
    watch = ObjectWatch(
        list_fn, lambda kind, obj, _t: seen.append((kind, obj["metadata"]["resourceVersion"])), 60
    )
    assert done.wait(5)
    watch.close()
    assert watched[:3] == ["10", "11", "30"]  # from the list, the last event, the new list
    assert seen[:4] == [("LISTED", "9"), ("MODIFIED", "11"), ("RELISTED", "25"), ("MODIFIED", "31")]
    assert watch.relists == 1
    assert watch.restarts >= 3
    assert watch.error is None
