"""Ordering a pod's observed containers: newest attempt first, per container name."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from kubelet_sim.cri import ObservedContainer

_EPOCH = datetime.min.replace(tzinfo=UTC)


def newest_first(containers: Sequence[ObservedContainer]) -> list[ObservedContainer]:
    """By restart count, then creation time: the order the kubelet reads attempts in."""
    return sorted(containers, key=lambda c: (c.attempt, c.created_at or _EPOCH), reverse=True)


def attempts_of(containers: Sequence[ObservedContainer], name: str) -> list[ObservedContainer]:
    """One container's attempts (never the sandbox's), newest first."""
    return newest_first([c for c in containers if c.name == name and not c.is_sandbox])


def latest_attempt(containers: Sequence[ObservedContainer], name: str) -> ObservedContainer | None:
    attempts = attempts_of(containers, name)
    return attempts[0] if attempts else None


def latest_sandbox(containers: Sequence[ObservedContainer]) -> ObservedContainer | None:
    sandboxes = newest_first([c for c in containers if c.is_sandbox])
    return sandboxes[0] if sandboxes else None


def pod_address(host_network: bool, containers: Sequence[ObservedContainer], node_ip: str) -> str:
    """Where a probe or hook reaches the pod by default: the node's IP for a hostNetwork pod,
    else its sandbox's ("" before it has one)."""
    if host_network:
        return node_ip
    sandbox = latest_sandbox(containers)
    return sandbox.ip if sandbox is not None else ""
