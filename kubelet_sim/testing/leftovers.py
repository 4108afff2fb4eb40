"""What a test cluster whose process died left in Docker: removed by the next one.

A cluster's containers carry the label PROCESS_LABEL, `<pid>-<start time>` of the process that
made it (the start time, so a reused pid is not taken for it). A cluster that starts removes
every container whose process is gone: a session killed before its clean-up (a CI timeout, a
kill -9) leaves nothing for long. The control plane's processes die with their parent anyway
(the parent-death signal).
"""

from __future__ import annotations

import os
from pathlib import Path

from kubelet_sim.runtime.engine import DockerEngine

PROCESS_LABEL = "io.kubelet-sim.testing.process"


def _started(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command's ")"


def this_process() -> str:
    return f"{os.getpid()}-{_started(os.getpid())}"


def _alive(mark: str) -> bool:
    pid, _, started = mark.partition("-")
    return pid.isdigit() and _started(int(pid)) == started


def remove_dead_clusters(engine: DockerEngine) -> int:
    """Remove the containers of test clusters whose process is gone; how many went."""
    removed = 0
    for mark in engine.label_values(PROCESS_LABEL):
        if not _alive(mark):
            removed += engine.remove_owned({PROCESS_LABEL: mark})[0]
    return removed
