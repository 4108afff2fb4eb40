"""What a pod sync must do next: the kubelet's computePodActions, as a pure function.

Inputs are the pod and every container the runtime has for it; the answer says whether to
(re)create the sandbox, which init container or app containers to start, which running
containers to kill, and whether the whole pod is done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.pod.attempts import latest_attempt, latest_sandbox
from kubelet_sim.pod.phase import should_restart
from kubelet_sim.pod.probes import ProbeKind, ProbeResults, Result, probe_grace
from kubelet_sim.pod.spec import ContainerView, PodView


@dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_attempt: int = 0
    # In spec order: the next init container, and sidecars (restartable init containers) to
    # (re)start; several at once once a sidecar has started.
    init_to_start: list[ContainerView] = field(default_factory=list)
    containers_to_start: list[ContainerView] = field(default_factory=list)
    containers_to_kill: list[tuple[ObservedContainer, str]] = field(default_factory=list)
    # Killed for a failed liveness/startup probe, by container id: the probe's own grace period
    # (None: the pod's). Unlike a changed definition, the restart policy decides what follows.
    probe_kills: dict[str, int | None] = field(default_factory=dict)
    init_failed: bool = False
    ephemeral_to_start: list[ContainerView] = field(default_factory=list)


def compute_actions(
    pod: PodView,
    observed: Sequence[ObservedContainer],
    spec_hash: Callable[[ContainerView], str],
    probes: ProbeResults | None = None,
) -> PodActions:
    sandbox = latest_sandbox(observed)
    actions = PodActions()
    if sandbox is None or sandbox.state is not ContainerState.RUNNING:
        actions.create_sandbox = True
        actions.kill_pod = sandbox is not None
        actions.sandbox_attempt = 0 if sandbox is None else sandbox.attempt + 1
        ran_before = any(not c.is_sandbox for c in observed)
        if pod.restart_policy == "Never" and actions.sandbox_attempt != 0 and ran_before:
            actions.create_sandbox = False  # never restart a pod that has run
            return actions
        to_start = [
            c
            for c in pod.containers
            if not (pod.restart_policy == "OnFailure" and _succeeded(c, observed))
        ]
        if not to_start and _any_regular_created(pod, observed):
            actions.create_sandbox = False  # initialized, and nothing is left to run
            return actions
        if pod.init_containers:
            actions.init_to_start = [pod.init_containers[0]]
            return actions
        actions.containers_to_start = to_start
        return actions
    # Ephemeral containers may start before initialization completes, and never again.
    actions.ephemeral_to_start = [
        c for c in pod.ephemeral_containers if latest_attempt(observed, c.name) is None
    ]
    initialized = _init_actions(pod, observed, actions, spec_hash, probes)
    if actions.init_failed or not initialized:
        return actions
    keep = 0
    for container in pod.containers:
        latest = latest_attempt(observed, container.name)
        if latest is None or latest.state is not ContainerState.RUNNING:
            if should_restart(container, pod, latest):
                actions.containers_to_start.append(container)
            continue
        if latest.spec_hash and latest.spec_hash != spec_hash(container):
            message = f"Container {container.name} definition changed, will be restarted"
            actions.containers_to_kill.append((latest, message))
            actions.containers_to_start.append(container)
            continue
        failed = probes.failed(latest.id) if probes is not None else None
        if failed is not None:  # computePodActions: kill it, restart unless the policy is Never
            message = f"Container {container.name} failed {failed.value.lower()} probe"
            if pod.restart_policy != "Never":
                message += ", will be restarted"
                actions.containers_to_start.append(container)
            actions.containers_to_kill.append((latest, message))
            actions.probe_kills[latest.id] = probe_grace(container, failed)
            continue
        keep += 1
    if keep == 0 and not actions.containers_to_start:
        actions.kill_pod = True
        actions.init_to_start = []  # sidecars do not keep a finished pod alive
    return actions


def _succeeded(container: ContainerView, observed: Sequence[ObservedContainer]) -> bool:
    latest = latest_attempt(observed, container.name)
    return latest is not None and latest.state is ContainerState.EXITED and latest.exit_code == 0


def _any_regular_created(pod: PodView, observed: Sequence[ObservedContainer]) -> bool:
    """hasAnyRegularContainerCreated: an app container was created, so the pod initialized."""
    return any(latest_attempt(observed, c.name) is not None for c in pod.containers)


def _init_actions(  # noqa: PLR0912 (computeInitContainerActions' cases, in its order)
    pod: PodView,
    observed: Sequence[ObservedContainer],
    actions: PodActions,
    spec_hash: Callable[[ContainerView], str],
    probes: ProbeResults | None,
) -> bool:
    """computeInitContainerActions: True once the pod has initialized.

    Init containers run one at a time, in order, each to success; a sidecar counts as done
    once it runs (and its startup probe succeeded), and is restarted whenever it stops, whatever
    the pod's restart policy. Read backwards from the last init container that left a trace,
    since finished ones may have been removed.
    """
    inits = pod.init_containers
    if not inits:
        return True
    # An app container created or running: initialized before (exited ones may be left from
    # an earlier sandbox, as after a reboot).
    initialized = any(
        (latest := latest_attempt(observed, c.name)) is not None
        and latest.state in (ContainerState.CREATED, ContainerState.RUNNING)
        for c in pod.containers
    )
    previously = initialized
    starts: list[int] = []
    for i in reversed(range(len(inits))):
        container = inits[i]
        latest = latest_attempt(observed, container.name)
        if latest is None:
            if previously and container.is_sidecar:
                starts.append(i)  # gone without a trace: a sidecar is started again
            continue
        if previously and not container.is_sidecar:
            continue  # after initialization only sidecars are kept running
        if latest.state is ContainerState.CREATED:
            starts.append(i)  # created but never started: start it again
        elif latest.state is ContainerState.RUNNING:  # a regular one: wait for it to end
            if container.is_sidecar and _sidecar_started(
                i, container, latest, actions, starts, probes
            ):
                if i == len(inits) - 1:
                    initialized = True
                elif not previously:
                    starts.append(i + 1)  # started for the first time: on to the next one
                _keep_sidecar(i, container, latest, actions, starts, spec_hash, probes)
        elif latest.state is ContainerState.EXITED and (
            container.is_sidecar or latest.exit_code != 0
        ):
            if not container.is_sidecar and pod.restart_policy == "Never":
                actions.init_failed = actions.kill_pod = True
                actions.init_to_start = []
                return False
            starts.append(i)
        elif latest.state is ContainerState.EXITED:  # succeeded: the next one, or done
            if i == len(inits) - 1:
                initialized = True
            else:
                starts.append(i + 1)
        else:  # unknown: kill what may be left of it, and start it again
            if not container.is_sidecar and pod.restart_policy == "Never":
                actions.init_failed = actions.kill_pod = True
                actions.init_to_start = []
                return False
            message = (
                f'Init container is in "{latest.state.value}" state, try killing it before restart'
            )
            actions.containers_to_kill.append((latest, message))
            starts.append(i)
        previously = True
    if not previously:
        starts.append(0)
    ordered = sorted(set(starts))
    actions.init_to_start = [inits[i] for i in ordered]
    return initialized


def _sidecar_started(
    i: int,
    container: ContainerView,
    latest: ObservedContainer,
    actions: PodActions,
    starts: list[int],
    probes: ProbeResults | None,
) -> bool:
    """Whether a running sidecar counts as started: its startup probe (if any) succeeded.
    A failed startup probe restarts it."""
    if not container.has_startup_probe:
        return True
    results = probes.of(latest.id) if probes is not None else None
    startup = results.startup if results is not None else None
    if startup is Result.FAILURE:
        actions.containers_to_kill.append(
            (latest, f"Init container {container.name} failed startup probe")
        )
        actions.probe_kills[latest.id] = probe_grace(container, ProbeKind.STARTUP)
        starts.append(i)
    return startup is Result.SUCCESS


def _keep_sidecar(
    i: int,
    container: ContainerView,
    latest: ObservedContainer,
    actions: PodActions,
    starts: list[int],
    spec_hash: Callable[[ContainerView], str],
    probes: ProbeResults | None,
) -> None:
    """A started sidecar is replaced when its definition changed, restarted when its liveness
    probe failed (which never holds up the next init container)."""
    if latest.spec_hash and latest.spec_hash != spec_hash(container):
        message = f"Init container {container.name} definition changed"
        actions.containers_to_kill.append((latest, message))
        starts.append(i)
        return
    results = probes.of(latest.id) if probes is not None else None
    if results is not None and results.liveness is Result.FAILURE:
        message = f"Init container {container.name} failed liveness probe"
        actions.containers_to_kill.append((latest, message))
        actions.probe_kills[latest.id] = probe_grace(container, ProbeKind.LIVENESS)
        starts.append(i)
