"""Every delay the node adds to imitate the kubelet's timing, in one place.

The kubelet learns of a start or a death at its PLEG's next relist (every second), and a pod
worker syncs a pod only on a pod cache entry newer than its last sync. A node that knows sooner
may write the same sequence sooner: it waits only where writing sooner would change what is
written. Each wait says which kubelet behaviour it reproduces and which `kubelet-sim compare`
scenarios (kubelet_sim/compare/builtin/) tell a foreign state without it.

Checked on 2026-11-29 with RELIST_LAG and OBSERVE_AFTER both 0 (tests/cli/test_compare_kubelet.py
against the v1.34.9 kubelet, one run each): exit-0-never and oom-kill told a foreign state (the
container terminated beside phase Pending, where the kubelet had told it running and the pod
Running first); the other differences of that run (missing BackOff and Started events of the
reference's) were the load's. Three runs more of each agreed, as the kubelet itself sometimes
shows what ours did: the waits are what makes one run agree. Nothing else waits:
not the sandbox behind a status write (the status manager writes beside the pod workers), not
a pod being terminated (the kubelet's killPod blocks until its containers stopped and its
terminated sync follows at once), not independent pods.
"""

from __future__ import annotations

# A change in Docker reaches the sync of a pod that runs this much later: the kubelet sees a
# change at its PLEG's next relist (up to a second later), by when what follows it in the
# runtime is in too.
# - A container that exits as it starts is told as the kubelet's relist finds it: exit-0-never
#   (seen without the waits; exit-1-never and init-fails-never have the same shape).
# - Docker tells of an OOM kill after the container's death: a sync at the death would tell
#   `Error` where the kubelet's tells `OOMKilled`: oom-kill (seen without the waits).
RELIST_LAG = 0.25

# The least time between the end of a running pod's sync and the start of its next: the pod
# worker waits for a pod cache entry newer than its last sync (podCache.GetNewerThan), which the
# next relist gives. Wakes other than Docker's (our own status write coming back through the
# watch, a probe result) would otherwise read the runtime straight after the sync acted on it,
# and tell a container just started as running: the same scenarios as RELIST_LAG.
OBSERVE_AFTER = 0.3

# A SyncPod that made the sandbox and then pulled: the sandbox's events were taken by this sync,
# where the kubelet's PLEG holds them for a sync of their own after the SyncPod returned (which
# tells the pull's outcome): bad-image-always, bad-image-ifnotpresent (the sandbox's IP comes
# with ErrImagePull, not before).
NEXT_RELIST = 1.0


def relist_lag(running: bool) -> float:
    """RELIST_LAG for a pod that runs; nothing for one being terminated or gone."""
    return RELIST_LAG if running else 0.0


def observe_after(running: bool) -> float:
    """OBSERVE_AFTER for a pod that runs; nothing for one being terminated or gone."""
    return OBSERVE_AFTER if running else 0.0
