"""Lease renewals as the API server holds them: how late each node's heartbeat came.

The node controller judges a node by its Lease's `renewTime` against its grace period; the
kubelet renews every quarter of the lease duration (10 s of the default 40 s; the agent's
--node-lease-duration-seconds sets it). The bench watches the Leases in kube-node-lease (its
own client, not the agent's word) and, per node, takes the intervals between consecutive
renewTimes minus the renew interval: that is the lateness. A node whose last renewal is older
than the interval at the end of the window is late too (a stalled heartbeat shows up there,
not as an interval).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.kube import ObjectWatch
from bench.report import percentile
from bench.times import parse_time
from kubelet_sim.formats.jsontypes import Json

LEASE_NAMESPACE = "kube-node-lease"
RENEW_INTERVAL = 10.0  # the kubelet's: a quarter of the 40 s lease duration
LATE = 1.0  # the bound: renewed within 10 ± 1 s
LEASE_OPTION = "--node-lease-duration-seconds"
LEASE_ENV = "KUBELET_SIM_NODE_LEASE_DURATION_SECONDS"
RENEW_FRACTION = 0.25  # the kubelet's nodeLeaseRenewIntervalFraction


def renew_interval(agent_args: Sequence[str], env: Mapping[str, str]) -> float:
    """The renew interval the agent runs with: a quarter of its lease duration, from its
    command line (`--node-lease-duration-seconds N` or `=N`), else its environment, else 40 s."""
    duration: str | None = env.get(LEASE_ENV)
    for i, arg in enumerate(agent_args):
        if arg == LEASE_OPTION and i + 1 < len(agent_args):
            duration = agent_args[i + 1]
        elif arg.startswith(LEASE_OPTION + "="):
            duration = arg.partition("=")[2]
    return RENEW_INTERVAL if duration is None else float(duration) * RENEW_FRACTION


def late_bound(interval: float) -> float:
    """How late a renewal may come: the issue's 1 s at the kubelet's 10 s, in proportion for
    a longer interval (whose jitter, 4 % of it, alone reaches 1.2 s at 30 s)."""
    return LATE * interval / RENEW_INTERVAL


@dataclass
class Lateness:
    """Per-interval lateness in seconds over a window, for the nodes asked about."""

    interval: float = RENEW_INTERVAL  # the renew interval the lateness is measured against
    late_after: float = LATE  # lateness above this is late
    intervals: int = 0
    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    late: int = 0  # intervals more than late_after over the renew interval
    overdue_at_end: int = 0  # nodes whose last renewal was more than interval + late_after old
    never_renewed: int = 0  # nodes with no renewal at all in the window
    late_nodes: list[str] = field(default_factory=list)  # a few of them, for the log


def lateness(
    renewals: dict[str, list[float]],
    nodes: list[str],
    since: float,
    until: float,
    interval: float = RENEW_INTERVAL,
) -> Lateness:
    """Lateness of the renewals of `nodes` whose later end falls in [since, until].

    `renewals`: node → renew times (epoch seconds, any order, duplicates allowed). An interval
    counts when its second renewal lies in the window; the first may lie before it. Late is
    more than `late_bound(interval)` over the interval.
    """
    values: list[float] = []
    bound = late_bound(interval)
    out = Lateness(interval=interval, late_after=bound)
    late_nodes: set[str] = set()
    for node in nodes:
        times = sorted(set(renewals.get(node, [])))
        before = [t for t in times if t < since]
        inside = [t for t in times if since <= t <= until]
        if not inside:
            out.never_renewed += 1
            late_nodes.add(node)
        chain = before[-1:] + inside
        for prev, cur in itertools.pairwise(chain):
            values.append(cur - prev - interval)
            if cur - prev - interval > bound:
                late_nodes.add(node)
        last = chain[-1] if chain else None
        if last is not None and until - last - interval > bound:
            out.overdue_at_end += 1
            late_nodes.add(node)
    out.intervals = len(values)
    if values:
        out.p50 = percentile(values, 50)
        out.p99 = percentile(values, 99)
        out.max = max(values)
        out.late = sum(1 for v in values if v > bound)
    out.late_nodes = sorted(late_nodes)[:10]
    return out


class LeaseRecorder:
    """Watches kube-node-lease; keeps, per Lease, each distinct renewTime and when the bench
    received it."""

    def __init__(self, coordination: Any, timeout: float) -> None:
        self._lock = threading.Lock()
        self.renew: dict[str, list[float]] = {}  # lease name → renewTime values
        self.received: dict[str, list[float]] = {}  # lease name → receipt of a new renewTime
        self._last: dict[str, str] = {}
        self.watch = ObjectWatch(
            coordination.list_namespaced_lease,
            self._on_event,
            timeout,
            namespace=LEASE_NAMESPACE,
        )

    def _on_event(self, kind: str, lease: Json, received: float) -> None:
        if kind not in ("ADDED", "MODIFIED", "RELISTED"):
            return  # LISTED: Leases of earlier runs; DELETED: the end of one
        name = str((lease.get("metadata") or {}).get("name", ""))
        stamp = (lease.get("spec") or {}).get("renewTime")
        if not stamp:
            return
        with self._lock:
            if self._last.get(name) == stamp:
                return
            self._last[name] = stamp
            self.renew.setdefault(name, []).append(parse_time(str(stamp)))
            self.received.setdefault(name, []).append(received)

    def snapshot(self) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        with self._lock:
            return (
                {k: list(v) for k, v in self.renew.items()},
                {k: list(v) for k, v in self.received.items()},
            )

    def close(self) -> None:
        self.watch.close()
