"""The suite's one builder of a container as the runtime saw it (`cri.ObservedContainer`): the
pure pod logic's tests, the stopper's, the garbage collector's and the handoff stream's each set
only what they are about."""

from __future__ import annotations

from typing import Any

from kubelet_sim import cri

REF = cri.PodRef("n", "p", "ns", "u")


def observed_container(
    name: str = "c",
    attempt: int = 0,
    state: cri.ContainerState = cri.ContainerState.RUNNING,
    *,
    pod: cri.PodRef = REF,
    container_id: str | None = None,
    image: str = "i:1",
    **fields: Any,
) -> cri.ObservedContainer:
    """Container `name`'s `attempt`, its id `<name><attempt>` unless given."""
    return cri.ObservedContainer(
        id=f"{name}{attempt}" if container_id is None else container_id,
        pod=pod,
        name=name,
        attempt=attempt,
        state=state,
        image=image,
        **fields,
    )
