"""What the node remembers about a pod between syncs (lost on restart, as the kubelet's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubelet_sim.pod.admission import Rejection
from kubelet_sim.pod.status import WaitingReason


@dataclass
class PodState:
    # Why each container is not running after the last sync (the kubelet's reasonCache).
    waiting: dict[str, WaitingReason] = field(default_factory=dict)
    # Termination messages read once per exited container id.
    messages: dict[str, str] = field(default_factory=dict)
    admitted: bool = False
    rejection: Rejection | None = None
    # Container ids a Killing event was recorded for, so repeats of a sync don't repeat it.
    killing: set[str] = field(default_factory=set)
    deadline_reported: bool = False
    # The final DELETE was sent; wait for the informer to drop the pod.
    finally_deleted: bool = False
    # The last status write failed (API unreachable); retry soon.
    status_unsent: bool = False
