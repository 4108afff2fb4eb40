"""Pod status as the kubelet generates it (kubelet_pods.go generateAPIPodStatus,
convertToAPIContainerStatuses): the container statuses here, the phase by phase.py (getPhase),
the conditions by conditions.py (status/generate.go).

Pure: the observed containers, the reasons a sync left behind and the previous status go in;
the status dict that is written to `pods/status` comes out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.attempts import attempts_of, latest_attempt, latest_sandbox
from kubelet_sim.pod.conditions import OWNED_CONDITIONS, pod_conditions
from kubelet_sim.pod.generation import CURRENT, KubeletGeneration
from kubelet_sim.pod.phase import TERMINAL_PHASES, active_app_started, get_phase, should_restart
from kubelet_sim.pod.probes import ProbeResults, Result
from kubelet_sim.pod.spec import ContainerView, PodView

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
STATUS_UNKNOWN = "ContainerStatusUnknown"


@dataclass(frozen=True)
class WaitingReason:
    """Why a container is not running after the last sync (the kubelet's reasonCache)."""

    reason: str
    message: str = ""


@dataclass(frozen=True)
class StatusInput:
    pod: PodView
    containers: Sequence[ObservedContainer]
    host_ip: str
    now: datetime
    waiting: Mapping[str, WaitingReason] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)  # by container id
    is_terminal: bool = False
    previous: Json | None = None  # the status last written; None: the API's
    evicted: WaitingReason | None = None  # e.g. DeadlineExceeded: phase Failed with this
    # The node finished terminating the pod (the kubelet's TerminatePod): containers without a
    # terminated state get ContainerStatusUnknown and the phase becomes terminal.
    finished: bool = False
    probes: ProbeResults = field(default_factory=ProbeResults)  # the prober's results
    # Containers (by id) whose start has not returned: their postStart hook runs (or failed and
    # they are being killed). The kubelet runs the hook inside startContainer, so every status
    # it writes meanwhile was generated before that start: such a container is not seen, and
    # its status says waiting (ContainerCreating, or PodInitializing in a pod with init
    # containers) until the hook ends.
    starting: frozenset[str] = frozenset()
    # Whose rules: the kubelet of the API server's version (pod/generation.py).
    generation: KubeletGeneration = CURRENT
    # In-place resize (podworkers/resizer.py): each container's resources as given, by name
    # (None: the spec's), and the PodResizePending/PodResizeInProgress conditions to write.
    resources: Mapping[str, Json] | None = None
    resize_conditions: Sequence[Json] = ()


def format_time(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_precise(ts: datetime) -> str:
    """RFC 3339 with microseconds (the API's MicroTime), for what happens within a second."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def generate_status(inp: StatusInput) -> Json:
    starting: frozenset[str] = frozenset()
    if inp.starting:
        starting = frozenset(c.name for c in inp.containers if c.id in inp.starting)
        inp = replace(inp, containers=[c for c in inp.containers if c.id not in inp.starting])
    pod = inp.pod
    old: Json = inp.previous if inp.previous is not None else pod.status
    has_init = bool(pod.init_containers)
    sandbox = latest_sandbox(inp.containers)
    status: Json = _pod_ips(inp, sandbox, old)
    if pod.status.get("qosClass"):
        status["qosClass"] = pod.status["qosClass"]
    status["containerStatuses"] = _container_statuses(
        inp, pod.containers, old, has_init, False, starting=starting
    )
    if has_init:
        status["initContainerStatuses"] = _container_statuses(
            inp, pod.init_containers, old, has_init, True, starting=starting
        )
    if pod.ephemeral_containers:
        status["ephemeralContainerStatuses"] = _container_statuses(
            inp, pod.ephemeral_containers, old, has_init, False, EPHEMERAL_KEY, starting
        )
    # TerminatePod gives every container an end; from v1.27 the phase follows from them,
    # before it the phase stayed what it was (a pod deleted before it started stays Pending).
    keeps_phase = inp.finished and not inp.generation.terminal_phase
    if inp.finished and not keeps_phase:
        default_unknown_states(pod, status, inp.generation)
    _update_probe_results(inp, status)  # a sidecar's `started` decides the phase
    status["phase"] = _phase_with_reason(inp, status, old)
    if keeps_phase:
        default_unknown_states(pod, status, inp.generation)
    status["conditions"] = pod_conditions(
        pod,
        status,
        old,
        sandbox_ready=sandbox is not None and sandbox.state is ContainerState.RUNNING,
        generation=inp.generation,
        now=format_time(inp.now),
        resize_conditions=inp.resize_conditions,
    )
    _add_observed_generation(pod, status)
    status["hostIP"] = inp.host_ip
    status["hostIPs"] = [{"ip": inp.host_ip}]
    status["startTime"] = old.get("startTime") or format_time(inp.now)
    return status


def _pod_ips(inp: StatusInput, sandbox: ObservedContainer | None, old: Json) -> Json:
    """podIP and podIPs: the node's with hostNetwork, else the sandbox's, else those written
    before (a sandbox gone keeps its pod's IP)."""
    if inp.pod.host_network and inp.host_ip:  # the kubelet reports the node's IPs
        return {"podIP": inp.host_ip, "podIPs": [{"ip": inp.host_ip}]}
    if sandbox is not None and sandbox.ip:
        return {"podIP": sandbox.ip, "podIPs": [{"ip": sandbox.ip}]}
    if old.get("podIP"):
        return {"podIP": old["podIP"], "podIPs": old.get("podIPs") or [{"ip": old["podIP"]}]}
    return {}


def _phase_with_reason(inp: StatusInput, status: Json, old: Json) -> str:
    """The pod's phase from its container statuses (getPhase), never leaving a terminal one;
    with the reason and message it keeps (or an eviction's) written into `status`."""
    pod = inp.pod
    all_statuses = status["containerStatuses"] + status.get("initContainerStatuses", [])
    terminal = inp.generation.terminal_phase  # before v1.27 a deleted pod kept its phase
    started = active_app_started(pod, inp.containers)
    phase = get_phase(pod, all_statuses, inp.is_terminal and terminal, started)
    if inp.finished and terminal and phase in ("Pending", "Running"):
        phase = "Failed"  # TerminatePod: every pod the node finished with ends terminal
    api_phase = pod.api_phase
    if phase not in TERMINAL_PHASES:
        if old.get("phase") in TERMINAL_PHASES:
            phase = old["phase"]
        elif api_phase in TERMINAL_PHASES:
            phase = api_phase
    if phase == old.get("phase"):
        for key in ("reason", "message"):
            value = old.get(key) or pod.status.get(key)
            if value:
                status[key] = value
    if inp.evicted is not None:
        phase = "Failed"
        status["reason"], status["message"] = inp.evicted.reason, inp.evicted.message
    if api_phase in TERMINAL_PHASES and phase != api_phase:
        phase = api_phase  # terminal phases never change
    return str(phase)


def _add_observed_generation(pod: PodView, status: Json) -> None:
    """PodObservedGenerationTracking (v1.33+ servers count a pod's generations): the pod's and
    that of each condition the kubelet owns."""
    generation = (pod.raw.get("metadata") or {}).get("generation")
    if generation:
        status["observedGeneration"] = generation
        for condition in status["conditions"]:
            if condition["type"] in OWNED_CONDITIONS:
                condition["observedGeneration"] = generation


EPHEMERAL_KEY = "ephemeralContainerStatuses"

UNKNOWN_STATE = {
    "terminated": {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": "The container could not be located when the pod was terminated",
    }
}


def default_unknown_states(
    pod: PodView, status: Json, generation: KubeletGeneration = CURRENT
) -> None:
    """status_manager.TerminatePod: a container that never reported an end gets one, so that a
    pod is never described as successful by what it did not run. Before the pod initialized,
    only init containers up to the last one that ended (at least the first) are defaulted
    (before v1.27, every container was)."""
    inits = status.get("initContainerStatuses") or []
    apps = status.get("containerStatuses") or []
    if not generation.terminal_phase:
        for st in [*apps, *inits]:
            if "terminated" not in (st.get("state") or {}):
                st["state"] = copy.deepcopy(UNKNOWN_STATE)
                st["ready"] = False
        return
    regular = [
        s for s, c in zip(inits, pod.init_containers, strict=False) if c.restart_policy != "Always"
    ]
    initialized = all(_exit_code(s) == 0 for s in regular) or any(
        "running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {}) for s in apps
    )
    if initialized:
        doomed = [*inits, *apps]
    else:
        ended = [i for i, s in enumerate(inits) if "terminated" in (s.get("state") or {})]
        doomed = inits[: max(ended, default=0) + 1]
    for st in doomed:
        if "terminated" not in (st.get("state") or {}):
            st["state"] = copy.deepcopy(UNKNOWN_STATE)
            st["ready"] = False
            st["started"] = False


def _exit_code(st: Json) -> int | None:
    terminated = (st.get("state") or {}).get("terminated")
    return None if terminated is None else int(terminated.get("exitCode", -1))


def _container_statuses(
    inp: StatusInput,
    containers: Sequence[ContainerView],
    old: Json,
    has_init: bool,
    is_init: bool,
    key: str = "",
    starting: frozenset[str] = frozenset(),
) -> list[Json]:
    """`starting`: names of containers whose start has not returned (see StatusInput), left
    waiting in the default state (ContainerCreating; PodInitializing in a pod with init
    containers) after the last attempt the kubelet had seen."""
    old_key = key or ("initContainerStatuses" if is_init else "containerStatuses")
    old_by_name = {s["name"]: s for s in old.get(old_key) or []}
    default_reason = POD_INITIALIZING if has_init else CONTAINER_CREATING
    statuses = {
        c.name: _observed_status(inp, c, old_by_name.get(c.name), default_reason)
        for c in containers
    }
    for container in containers:
        reason = _waiting_to_tell(inp, container, statuses, is_init, starting, default_reason)
        if reason is None:
            continue
        st = statuses[container.name]
        if "terminated" in st["state"]:
            st["lastState"] = st["state"]
        waiting: Json = {"reason": reason.reason}
        if reason.message:
            waiting["message"] = reason.message
        st["state"] = {"waiting": waiting}
    if is_init:
        return [statuses[c.name] for c in containers]
    return [statuses[name] for name in sorted(statuses)]


def _observed_status(
    inp: StatusInput, container: ContainerView, previous: Json | None, default_reason: str
) -> Json:
    """A container's status from its last two attempts (the latest and lastState), or from what
    was written before when the runtime has none."""
    st: Json = {
        "name": container.name,
        "image": container.image,
        "imageID": "",
        "state": {"waiting": {"reason": default_reason}},
        "lastState": {},
        "ready": False,
        "restartCount": 0,
    }
    if previous is not None:
        if "terminated" in (previous.get("state") or {}):
            st = copy.deepcopy(previous)
        else:
            st["restartCount"] = previous.get("restartCount", 0)
            st["lastState"] = copy.deepcopy(previous.get("lastState") or {})
    _add_volume_mounts(st, container)
    attempts = attempts_of(inp.containers, container.name)
    if not attempts:
        _infer_vanished_container(st, previous, default_reason, inp.pod)
    for i, observed in enumerate(attempts[:2]):
        converted = _convert(observed, previous, inp.messages)
        if i == 0:
            converted["image"] = container.image
            _add_volume_mounts(converted, container)
            _add_resources(converted, container, inp.resources)
            st = converted
        else:
            st["lastState"] = converted["state"]
    return st


def _waiting_to_tell(
    inp: StatusInput,
    container: ContainerView,
    statuses: Json,
    is_init: bool,
    starting: frozenset[str],
    default_reason: str,
) -> WaitingReason | None:
    """The waiting reason a container's status tells, if any: the default one while its start
    has not returned, else the one the last sync learned, for a container to be (re)started."""
    if container.name in starting:  # convertToAPIContainerStatuses' default state
        return WaitingReason(default_reason)
    latest = latest_attempt(inp.containers, container.name)
    init_succeeded = (
        latest is not None and latest.state is ContainerState.EXITED and latest.exit_code == 0
    )
    if (
        (is_init and init_succeeded)
        or (is_init and latest is None and _initialized_without(container, inp, statuses))
        or not should_restart(container, inp.pod, latest)
    ):
        return None
    return inp.waiting.get(container.name)


def _initialized_without(container: ContainerView, inp: StatusInput, statuses: Json) -> bool:
    """A regular init container the runtime no longer has, in a pod whose app containers were
    created: it must have succeeded (convertToAPIContainerStatuses says so in its message)."""
    st = statuses[container.name]
    apps = {c.name for c in inp.pod.containers}
    created = any(c.name in apps for c in inp.containers if not c.is_sandbox)
    if container.is_sidecar or not created or "waiting" not in st["state"]:
        return False
    st["state"] = {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "message": "Unable to get init container status from container runtime and pod has"
            " been initialized, treat it as exited normally",
            "startedAt": None,
            "finishedAt": None,
        }
    }
    return True


def _infer_vanished_container(
    st: Json, previous: Json | None, default_reason: str, pod: PodView
) -> None:
    """A container that was running and is gone without a trace ran and stopped (137)."""
    if previous is None or "running" not in (previous.get("state") or {}):
        return
    if (st["state"].get("waiting") or {}).get("reason") != default_reason:
        return
    if "terminated" in st["lastState"]:
        return
    st["lastState"] = {
        "terminated": {
            "exitCode": 137,
            "reason": STATUS_UNKNOWN,
            "message": "The container could not be located when the pod was deleted."
            "  The container used to be Running",
        }
    }
    if not pod.being_deleted:
        st["restartCount"] += 1


def _convert(
    observed: ObservedContainer, previous: Json | None, messages: Mapping[str, str]
) -> Json:
    container_id = f"docker://{observed.id}"
    st: Json = {
        "name": observed.name,
        "image": observed.image,
        "imageID": observed.image_id,
        "containerID": container_id,
        "restartCount": observed.attempt,
        "lastState": {},
        "ready": False,
    }
    if observed.state is ContainerState.RUNNING:
        st["state"] = {"running": {"startedAt": format_time(observed.started_at)}}
    elif observed.state is ContainerState.CREATED:
        st["state"] = {"waiting": {}}
    elif observed.state is ContainerState.EXITED:
        st["state"] = {"terminated": _terminated(observed, messages.get(observed.id, ""))}
    elif previous is not None and "running" in (previous.get("state") or {}):
        st["state"] = {
            "terminated": {
                "exitCode": 137,
                "reason": STATUS_UNKNOWN,
                "message": "The container could not be located when the pod was terminated",
            }
        }
        st["restartCount"] = int(previous.get("restartCount", 0)) + 1
    else:
        st["state"] = {"waiting": {}}
    return st


def _terminated(observed: ObservedContainer, termination_message: str) -> Json:
    exit_code = observed.exit_code if observed.exit_code is not None else -1
    if observed.oom_killed:
        reason = "OOMKilled"
    elif observed.error:
        reason = "ContainerCannotRun"  # dockershim's reason for a start Docker refused
    else:
        reason = "Completed" if exit_code == 0 else "Error"
    message = observed.error
    if termination_message:
        message = f"{message}: {termination_message}" if message else termination_message
    terminated: Json = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": format_time(observed.started_at),
        "finishedAt": format_time(observed.finished_at),
        "containerID": f"docker://{observed.id}",
    }
    if message:
        terminated["message"] = message
    return terminated


def _add_resources(st: Json, container: ContainerView, given: Mapping[str, Json] | None) -> None:
    """InPlacePodVerticalScaling (on by default since v1.33): a container the runtime has
    reports the resources it was given (`given`, by name, once a resize was applied; else the
    spec's, which the pod view holds as allocated), and its requests as allocated."""
    resources = container.raw.get("resources") or {}
    st["resources"] = copy.deepcopy((given or {}).get(container.name, resources))
    if resources.get("requests"):
        st["allocatedResources"] = copy.deepcopy(resources["requests"])


def _add_volume_mounts(st: Json, container: ContainerView) -> None:
    """RecursiveReadOnlyMounts (on by default) reports each mount in the container status."""
    if not container.volume_mounts:
        return
    mounts = []
    for m in container.volume_mounts:
        entry: Json = {"name": m.name, "mountPath": m.mount_path}
        if m.read_only:
            entry["readOnly"] = True
            entry["recursiveReadOnly"] = "Disabled"
        mounts.append(entry)
    st["volumeMounts"] = mounts


def _update_probe_results(inp: StatusInput, status: Json) -> None:
    """What the prober manager adds (UpdatePodStatus): `started` and `ready` per container.

    A running container without probes is started and ready; a startup probe holds `started`
    until it succeeds, a readiness probe holds `ready` until it succeeds (and only once started).
    """
    specs = {c.name: c for c in inp.pod.containers}
    for st in status["containerStatuses"]:
        st["started"], st["ready"] = _started_and_ready(inp, specs[st["name"]], st)
    inits = {c.name: c for c in inp.pod.init_containers}
    for st in status.get("initContainerStatuses", []):
        if inits[st["name"]].is_sidecar:
            st["started"], st["ready"] = _started_and_ready(inp, inits[st["name"]], st)
            continue
        terminated = st["state"].get("terminated") or {}
        st["started"] = "running" in st["state"]
        if not inp.generation.sidecars:
            del st["started"]
        st["ready"] = bool(terminated) and terminated.get("exitCode") == 0
    for st in status.get(EPHEMERAL_KEY, []):  # never ready: they take no traffic
        st["started"] = "running" in st["state"]
        st["ready"] = False


def _started_and_ready(inp: StatusInput, spec: ContainerView, st: Json) -> tuple[bool, bool]:
    latest = latest_attempt(inp.containers, st["name"])
    probes = inp.probes.of(latest.id) if latest is not None else None
    running = "running" in st["state"]
    started = running and (not spec.has_startup_probe or (probes is not None and probes.started))
    ready = started and (
        not spec.has_readiness_probe or (probes is not None and probes.readiness is Result.SUCCESS)
    )
    return started, ready
