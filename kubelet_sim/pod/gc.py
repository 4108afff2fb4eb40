"""Which dead containers the kubelet's container GC removes (kuberuntime_gc.go).

Defaults of the kubelet: MaxPerPodContainer 1 and MinAge 0, so for each container of a pod only
the newest dead attempt stays (its exit is the status's lastState); older sandboxes that are no
longer running go too. Containers of pods that are gone are removed by the pod workers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.pod.attempts import newest_first

MAX_PER_POD_CONTAINER = 1


def garbage(
    containers: Sequence[ObservedContainer], keep: int = MAX_PER_POD_CONTAINER
) -> list[ObservedContainer]:
    """The dead containers to remove: all but the newest `keep` per (pod, container name)."""
    groups: dict[tuple[str, str], list[ObservedContainer]] = defaultdict(list)
    for c in containers:
        groups[(c.pod.uid, c.name)].append(c)
    doomed: list[ObservedContainer] = []
    for (_, name), group in groups.items():
        if name == "POD":  # sandboxes: only the newest one may stay, running or not
            doomed += [c for c in newest_first(group)[1:] if c.state is not ContainerState.RUNNING]
            continue
        dead = [c for c in newest_first(group) if c.state is ContainerState.EXITED]
        doomed += dead[keep:]
    return doomed
