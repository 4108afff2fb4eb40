"""What a pod asks of the host, and the one switch (--allow-privileged) that lets it.

Until v1.15 the kubelet refused privileged containers unless started with --allow-privileged
(canRunPod, then privilegeAdmitHandler); today Pod Security admission gates such requests at the
API server. A virtual node runs on the user's own machine and cannot count on Pod Security, so
kubelet-sim gates, with that one switch, everything in a pod that reaches the host:

- the pod's own requests (host namespaces, hostPath volumes), once, at admission;
- each container's (privileged, added capabilities beyond those it has anyway, host ports
  below 1024, procMount Unmasked, AppArmor Unconfined by field or annotation, its own or the
  pod's), with one rule set for every kind of container: at
  admission for init and app containers, and again wherever a container is created. That
  second place is the only one an ephemeral container (added through pods/ephemeralcontainers,
  e.g. `kubectl debug --profile=sysadmin`, long after admission) ever passes.

The messages are canRunPod's: `pod with UID "<uid>" specified <what>, but is disallowed`.
"""

from __future__ import annotations

from kubelet_sim.pod.security import APPARMOR_UNCONFINED, apparmor_option, proc_unmasked
from kubelet_sim.pod.spec import ContainerKind, ContainerView, PodView

# Host ports below this need CAP_NET_BIND_SERVICE on the host: they are the host's services'.
FIRST_UNPRIVILEGED_PORT = 1024

# Pod Security's baseline list: Docker's default capabilities but NET_RAW. A container has them
# anyway, so adding one (as `drop: [ALL], add: [NET_BIND_SERVICE]` does) asks nothing more.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)

_NOUN = {
    ContainerKind.APP: "container",
    ContainerKind.INIT: "init container",
    ContainerKind.EPHEMERAL: "ephemeral container",
}


def disallowed(pod: PodView, what: str) -> str:
    return f'pod with UID "{pod.uid}" specified {what}, but is disallowed'


def host_requests(pod: PodView, container: ContainerView, kind: ContainerKind) -> list[str]:
    """What the container's own spec asks of the host, each as the refusal names it.

    Privileged keeps canRunPod's words for the kinds it knew ("privileged container",
    "privileged init container"); an ephemeral container, which it never saw and which is
    added one at a time, is named. Every other request names its container.
    """
    noun = _NOUN[kind]
    named = f'{noun} "{container.name}"'
    asked: list[str] = []
    if privileged(container):
        asked.append(f"privileged {named if kind is ContainerKind.EPHEMERAL else noun}")
    added = added_capabilities(container)
    if added:
        asked.append(f"added capabilities [{' '.join(added)}] for {named}")
    asked += [f"host port {port} for {named}" for port in privileged_host_ports(container)]
    if proc_unmasked(container):
        asked.append(f"procMount Unmasked for {named}")
    if apparmor_option(pod, container) == APPARMOR_UNCONFINED:  # without Docker's profile
        asked.append(f"AppArmor profile Unconfined for {named}")
    return asked


def container_refusal(
    pod: PodView, container: ContainerView, *, allow_privileged: bool
) -> str | None:
    """The gate where any container is created: why it may not be, if it may not."""
    if allow_privileged:
        return None
    asked = host_requests(pod, container, pod.kind_of(container))
    return disallowed(pod, asked[0]) if asked else None


def forbidden_message(pod: PodView) -> str | None:
    """At admission: the first request of the pod that reaches the host, if any.

    canRunPod's order: the containers' requests (app containers, then init containers), then
    the pod's own. Ephemeral containers are not the pod's to answer for: each one is refused
    alone, where it would be created, and the pod runs on.
    """
    asked = [
        *(what for c in pod.containers for what in host_requests(pod, c, ContainerKind.APP)),
        *(what for c in pod.init_containers for what in host_requests(pod, c, ContainerKind.INIT)),
        *(
            what
            for wanted, what in (
                (pod.host_network, "host networking"),
                (pod.host_pid, "host PID"),
                (pod.host_ipc, "host ipc"),
            )
            if wanted
        ),
        *(f'hostPath volume "{name}"' for name in _host_path_volumes(pod)),
    ]
    return disallowed(pod, asked[0]) if asked else None


def privileged(container: ContainerView) -> bool:
    """securitycontext.HasPrivilegedRequest."""
    return bool((container.raw.get("securityContext") or {}).get("privileged"))


def added_capabilities(container: ContainerView) -> list[str]:
    """securityContext.capabilities.add beyond the baseline list, as asked (Docker reads
    `sys_admin`, `SYS_ADMIN` and `CAP_SYS_ADMIN` alike; `ALL` is every one)."""
    security = container.raw.get("securityContext") or {}
    added = [str(c) for c in (security.get("capabilities") or {}).get("add") or ()]
    return [c for c in added if c.upper().removeprefix("CAP_") not in BASELINE_CAPABILITIES]


def privileged_host_ports(container: ContainerView) -> list[int]:
    ports = [int(p.get("hostPort") or 0) for p in container.raw.get("ports") or []]
    return [port for port in ports if 0 < port < FIRST_UNPRIVILEGED_PORT]


def _host_path_volumes(pod: PodView) -> list[str]:
    return [str(v.get("name", "")) for v in pod.spec.get("volumes") or [] if "hostPath" in v]
