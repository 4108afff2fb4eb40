"""What a test cluster whose process died left in Docker: removed by the next one.

A cluster's containers carry the label PROCESS_LABEL, the mark of the process that made it
(linux/processes.py: `<boot id>:<PID namespace>:<pid>:<start time>`). A cluster that starts
removes the containers of every mark made in this boot and this PID namespace whose process is
gone: a session killed before its clean-up (a CI timeout, a kill -9) leaves nothing for long.
A mark of another PID namespace (a CI job in a container sharing the Docker socket), another
boot or an older format is never judged: its pid means nothing in our /proc, and its session
may well be running. The control plane's processes die with their parent anyway (the
parent-death signal).
"""

from __future__ import annotations

import os

from kubelet_sim.linux.processes import ProcessMark
from kubelet_sim.runtime.engine import DockerEngine

PROCESS_LABEL = "io.kubelet-sim.testing.process"


def this_process() -> str:
    """This process's mark ('' where /proc cannot say: then no later session judges it)."""
    return str(ProcessMark.of(os.getpid()) or "")


def remove_dead_clusters(engine: DockerEngine, among: dict[str, str] | None = None) -> int:
    """Remove the containers of test clusters whose process is known to be gone; how many
    went. `among` narrows it to containers that also carry those labels (a test's own)."""
    removed = 0
    for value in engine.label_values(PROCESS_LABEL, among):
        mark = ProcessMark.parse(value)
        if mark is not None and mark.gone():
            removed += engine.remove_owned({PROCESS_LABEL: value, **(among or {})})[0]
    return removed
