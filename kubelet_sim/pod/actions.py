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
from kubelet_sim.pod.probes import ProbeResults, probe_grace
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.status import should_restart


@dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_attempt: int = 0
    init_to_start: ContainerView | None = None
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
        if pod.init_containers:
            actions.init_to_start = pod.init_containers[0]
            return actions
        actions.containers_to_start = [
            c
            for c in pod.containers
            if not (pod.restart_policy == "OnFailure" and _succeeded(c, observed))
        ]
        return actions
    # Ephemeral containers may start before initialization completes, and never again.
    actions.ephemeral_to_start = [
        c for c in pod.ephemeral_containers if latest_attempt(observed, c.name) is None
    ]
    initialized = _init_actions(pod, observed, actions)
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
    return actions


def _succeeded(container: ContainerView, observed: Sequence[ObservedContainer]) -> bool:
    latest = latest_attempt(observed, container.name)
    return latest is not None and latest.state is ContainerState.EXITED and latest.exit_code == 0


def _init_actions(pod: PodView, observed: Sequence[ObservedContainer], actions: PodActions) -> bool:
    """Init containers one at a time, in order, each to success; True once all succeeded."""
    for container in pod.init_containers:
        latest = latest_attempt(observed, container.name)
        if latest is None:
            actions.init_to_start = container
            return False
        if latest.state is ContainerState.RUNNING:
            return False
        if latest.state is ContainerState.EXITED and latest.exit_code == 0:
            continue
        if latest.state is ContainerState.EXITED and pod.restart_policy == "Never":
            actions.init_failed = True
            actions.kill_pod = True
            return False
        actions.init_to_start = container
        return False
    return True
