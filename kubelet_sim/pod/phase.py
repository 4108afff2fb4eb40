"""The pod's phase as the kubelet decides it (kubelet_pods.go getPhase), whether a container is
restarted (ShouldContainerBeRestarted), and a terminal phase held back while the pod is not
yet terminated (the status manager's mergePodStatus).

Pure: pod/status.py writes the phase into the status, pod/actions.py restarts by it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.attempts import latest_sandbox
from kubelet_sim.pod.spec import ContainerView, PodView

TERMINAL_PHASES = ("Failed", "Succeeded")


def hold_terminal_phase(status: Json, api_status: Json) -> Json:
    """status_manager.go mergePodStatus (`transitioningToTerminalPhase` while
    `couldHaveRunningContainers`): a status that would move the API's phase from Pending or
    Running to Succeeded or Failed, written while the pod worker has not finished terminating
    the pod, carries the API's phase, reason and message instead. Everything else is written
    as generated (the conditions too: `Ready: False/PodFailed` beside `phase: Running`).
    The caller applies it by the kubelet's version (KubeletGeneration.
    terminal_phase_after_termination) and only before the pod is terminated."""
    api_phase = api_status.get("phase")
    if status.get("phase") not in TERMINAL_PHASES or api_phase in TERMINAL_PHASES:
        return status
    held = dict(status)
    held["phase"] = api_phase or "Pending"
    for key in ("reason", "message"):
        held.pop(key, None)
        if api_status.get(key):
            held[key] = api_status[key]
    return held


def get_phase(
    pod: PodView, statuses: Sequence[Json], is_terminal: bool, initialized: bool = False
) -> str:
    """getPhase from kubelet_pods.go. `initialized`: an app container of the current sandbox
    has started (HasAnyActiveRegularContainerStarted), so restarting sidecars do not put the
    pod back into Pending."""
    by_name = {s["name"]: s for s in statuses}
    pending_init = failed_init = 0
    for container in pod.init_containers:
        if container.is_sidecar:
            continue  # counted with the app containers below
        kind, code = _phase_state(by_name.get(container.name))
        if kind in ("terminated", "restarting"):
            failed_init += code != 0
        else:
            pending_init += 1
    unknown = running = waiting = stopped = succeeded = pending_sidecars = 0
    for container in pod.sidecars:  # a stopped sidecar counts for nothing
        st = by_name.get(container.name)
        kind, _ = _phase_state(st)
        running += kind == "running"
        waiting += kind == "waiting"
        unknown += kind in ("missing", "unknown")
        pending_sidecars += kind in ("waiting", "unknown") or (
            kind == "running" and not (st or {}).get("started")
        )
    for container in pod.containers:
        kind, code = _phase_state(by_name.get(container.name))
        running += kind == "running"
        waiting += kind == "waiting"
        unknown += kind in ("missing", "unknown")
        stopped += kind in ("terminated", "restarting")
        succeeded += kind == "terminated" and code == 0
    if failed_init > 0 and pod.restart_policy == "Never":
        return "Failed"
    if pending_init > 0 or (pending_sidecars > 0 and not initialized) or waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        return _all_stopped_phase(pod, is_terminal, all_succeeded=stopped == succeeded)
    return "Pending"


def _all_stopped_phase(pod: PodView, is_terminal: bool, *, all_succeeded: bool) -> str:
    """getPhase once every app container has stopped: they may still be restarted."""
    if is_terminal:
        return "Succeeded" if all_succeeded else "Failed"
    if pod.restart_policy == "Always":
        return "Running"
    if all_succeeded:
        return "Succeeded"
    if pod.restart_policy == "Never":
        return "Failed"
    return "Running"


def _phase_state(st: Json | None) -> tuple[str, int | None]:
    """A container status as getPhase sorts it, with the exit code of its (last) end:
    missing, running, terminated, restarting (waiting after an end), waiting, or unknown."""
    if st is None:
        return "missing", None
    state, last = st.get("state") or {}, st.get("lastState") or {}
    if "running" in state:
        return "running", None
    if "terminated" in state:
        return "terminated", state["terminated"].get("exitCode")
    if "waiting" in state and "terminated" in last:
        return "restarting", last["terminated"].get("exitCode")
    if "waiting" in state:
        return "waiting", None
    return "unknown", None


def active_app_started(pod: PodView, observed: Sequence[ObservedContainer]) -> bool:
    """HasAnyActiveRegularContainerStarted: an app container of the newest sandbox exists."""
    sandbox = latest_sandbox(observed)
    if sandbox is None:
        return False
    apps = {c.name for c in pod.containers}
    return any(
        c.name in apps
        and (
            sandbox.created_at is None or c.created_at is None or c.created_at >= sandbox.created_at
        )
        for c in observed
        if not c.is_sandbox
    )


def should_restart(
    container: ContainerView, pod: PodView, latest: ObservedContainer | None
) -> bool:
    """ShouldContainerBeRestarted (kubecontainer/helpers.go)."""
    if pod.being_deleted:
        return False
    if latest is None:
        return True
    if latest.state is ContainerState.RUNNING:
        return False
    if latest.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    if container.is_sidecar:
        return True  # its own restartPolicy, Always, overrides the pod's
    if pod.restart_policy == "Never":
        return False
    return not (pod.restart_policy == "OnFailure" and latest.exit_code == 0)
