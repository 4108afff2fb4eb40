"""The pod workers' parts made for one node, in one place: the syncer and what it drives.

The node builder (assembly/build.py) calls this with the node's adapters; the unit tests'
harness calls it with fakes, so both run the same wiring.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.generation import CURRENT, KubeletGeneration
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.podworkers.action_runner import ActionRunner
from kubelet_sim.podworkers.admission import PodAdmitter
from kubelet_sim.podworkers.event_refs import event_ref
from kubelet_sim.podworkers.hooks import HookRunner
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.ports import (
    ContainerCache,
    EventSink,
    ObjectSource,
    PodIndex,
    PodRuntime,
    PodVolumes,
    StatusSink,
    TokenIssuer,
    Wake,
    object_lookup,
)
from kubelet_sim.podworkers.resizer import PodResizer
from kubelet_sim.podworkers.settings import SyncSettings
from kubelet_sim.podworkers.starter import ContainerStarter
from kubelet_sim.podworkers.status_manager import StatusManager
from kubelet_sim.podworkers.stopper import ContainerStopper
from kubelet_sim.podworkers.sync import PodSyncer
from kubelet_sim.prober.manager import ProbeManager


@dataclass(frozen=True)
class SyncerPorts:
    """What the node gives its pod workers: the adapters behind the ports."""

    runtime: PodRuntime
    watcher: ContainerCache
    status: StatusSink
    events: EventSink
    objects: ObjectSource
    final_delete: Callable[[str, str, str], None]
    pods: PodIndex
    volumes: PodVolumes
    tokens: TokenIssuer
    wake: Wake
    services: Callable[[], list[Json] | None] = lambda: []
    network: Callable[[cri.ObservedContainer], None] | None = None
    pool: SandboxPool | None = None
    generation: Callable[[], KubeletGeneration] = lambda: CURRENT
    node: Callable[[], Json | None] = lambda: None  # our Node as last seen, for admission
    # Held while a sandbox is made, stopped or removed: the process's slot, once its
    # heartbeats are on time.
    pace: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext


def pod_syncer(
    settings: SyncSettings,
    ports: SyncerPorts,
    supervisor: Supervisor,
    clock: Clock = SYSTEM_CLOCK,
    *,
    status_thread: bool = True,
) -> PodSyncer:
    """`wake` queues a pod for its worker again (work finished off the workers: pulls, hooks,
    probes, stops); `services` lists the Services for service-link variables (None until
    first listed). `status_thread=False`: statuses are written only at the status manager's
    `flush()` (the unit tests' harness)."""
    p = ports
    watcher = p.watcher

    def journal(uid: str, step: str, **fields: object) -> None:
        syncer.journal(uid, step, **fields)  # called only once the node runs

    status = StatusManager(
        p.status,
        p.final_delete,
        journal=journal,
        supervisor=supervisor,
        node=settings.node_name,
        clock=clock,
        threaded=status_thread,
    )

    def probe_event(
        view: PodView, container: ContainerView, kind: str, reason: str, message: str
    ) -> None:
        p.events.event(event_ref(view, container), kind, reason, message)

    resizer = PodResizer(
        p.runtime,
        watcher,
        p.events,
        p.pods,
        settings.allocatable,
        clock=clock,
        enabled=lambda: p.generation().in_place_resize,
    )
    admitter = PodAdmitter(
        settings,
        p.pods.pods,
        has_containers=lambda uid: bool(watcher.pod_containers(uid)),
        has_running=lambda uid: any(
            c.state is cri.ContainerState.RUNNING for c in watcher.pod_containers(uid)
        ),
        node=p.node,
        as_allocated=resizer.as_allocated,
    )
    hooks = HookRunner(p.runtime, p.events, settings.node_ip, node=settings.node_name)
    stopper = ContainerStopper(
        p.runtime,
        watcher,
        p.events,
        hooks,
        supervisor=supervisor,
        wake=p.wake,
        clock=clock,
        pace=p.pace,
    )
    starter = ContainerStarter(
        settings,
        p.runtime,
        watcher,
        p.events,
        status,
        stopper,
        object_lookup(p.objects),
        hooks,
        network=p.network,
        wake=p.wake,
        services=p.services,
        clock=clock,
        pool=p.pool,
        pace=p.pace,
    )
    prober = ProbeManager(
        p.runtime,
        probe_event,
        node=settings.node_name,
        supervisor=supervisor,
        wake=p.wake,
        clock=clock,
    )
    syncer = PodSyncer(
        settings,
        p.runtime,
        watcher,
        status,
        p.events,
        p.objects,
        p.pods,
        p.volumes,
        p.tokens,
        admitter=admitter,
        hooks=hooks,
        stopper=stopper,
        starter=starter,
        prober=prober,
        resizer=resizer,
        runner=ActionRunner(stopper, starter),
        clock=clock,
        generation=p.generation,
    )
    return syncer
