"""Which pods may take a warm sandbox from the node's pool, and how the pool is kept. Pure.

A pool sandbox is made before its pod is known (podworkers/pool.py): a pause container on the
sandboxes' network, with IPC shareable, as `runtime/translate.sandbox_body` makes one for an
ordinary pod. Only its hostname is set when a pod claims it; anything else a sandbox is
created with for its pod cannot be given afterwards, so such pods get one made for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubelet_sim import cri
from kubelet_sim.pod.spec import PodView


def pool_refusal(pod: PodView) -> str | None:
    """Why this pod needs a sandbox made for it (the one list), or None if a pooled one fits.

    Not here, because they do not change the sandbox: DNS (/etc/resolv.conf and /etc/hosts are
    the pod's own files, mounted into each container), spec.hostname and subdomain (set at the
    claim), shareProcessNamespace (this node never gives the sandbox a pid namespace to share)
    and the pod's or its containers' security context (the sandbox gets none of it).
    """
    spec = pod.spec
    if pod.host_network:
        return "hostNetwork: the node's network and hostname"
    if pod.host_pid:
        return "hostPID: the node's process namespace"
    if pod.host_ipc:
        return "hostIPC: the node's IPC namespace"
    if (spec.get("securityContext") or {}).get("sysctls"):
        return "sysctls: set as the sandbox is created"
    if any(p.get("hostPort") for c in pod.containers for p in c.raw.get("ports") or []):
        return "hostPort: published as the sandbox is created"
    if spec.get("runtimeClassName"):
        return "runtimeClassName: a runtime setting of its own"
    if spec.get("hostUsers") is False:
        return "hostUsers: false: a user namespace of its own"
    return None


# The default (automatic) size: as many sandboxes as the node started pods that could take one
# in the last RECENT_SECONDS, at most AUTO_CAP; none once that long passed without one.
RECENT_SECONDS = 30.0
AUTO_CAP = 4


def pool_target(size: int | None, recent_starts: int, pods_in_use: int, max_pods: int) -> int:
    """How many sandboxes the pool should hold now: `size` if fixed (--sandbox-pool-size),
    else the recent starts up to AUTO_CAP; never so many that pods and pool together pass the
    node's pod limit (allocatable pods)."""
    wanted = min(AUTO_CAP, recent_starts) if size is None else size
    room = max(0, max_pods - pods_in_use)
    return max(0, min(wanted, room))


def adoption(
    found: Sequence[cri.PooledSandbox], size: int
) -> tuple[list[cri.PooledSandbox], list[cri.PooledSandbox]]:
    """After a (re)start, what Docker holds of the pool: the running ones to keep, oldest
    first (the claim order), at most `size` (0 for the automatic size: a node just started
    has no recent starts); and the rest (stopped, or too many) to remove."""
    running = sorted((s for s in found if s.running), key=lambda s: (s.created, s.id))
    keep = running[:size]
    kept = {s.id for s in keep}
    return keep, [s for s in found if s.id not in kept]
