"""The one polling loop of the tests: a condition asked again, more slowly, until a deadline.

`tests.cluster.wait_for` fails the test at its deadline; the session's probes of what a cluster
has (`tests/server_probes.py`, `tests/node_certs.py`) turn a missed deadline into a skip reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(predicate: Callable[[], Any], seconds: float) -> Any:
    """`predicate()`'s first truthy value within `seconds`, else None.

    Polls often at first, then every 0.25 s: a predicate often reads the API, and reading it
    50 times a second took CPU from the agent and the API server the test was waiting for.
    """
    deadline = time.monotonic() + seconds
    pause = 0.02
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)
