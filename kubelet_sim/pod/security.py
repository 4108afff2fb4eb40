"""The parts of a pod's security context the kubelet decides itself, before the runtime sees
them: which sysctls it admits (pkg/kubelet/sysctl), whether runAsNonRoot holds for the image's
user (verifyRunAsNonRoot), the supplemental groups (determineEffectiveSecurityContext) and the
seccomp profile (unset is Unconfined: --seccomp-default is off by default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.spec import ContainerView, PodView

SYSCTL_FORBIDDEN = "SysctlForbidden"
NET, IPC = "net", "ipc"
# safe_sysctls.go: namespaced, isolated from the node and other pods
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced": IPC,
    "net.ipv4.ip_local_port_range": NET,
    "net.ipv4.tcp_syncookies": NET,
    "net.ipv4.ping_group_range": NET,
    "net.ipv4.ip_unprivileged_port_start": NET,
    "net.ipv4.ip_local_reserved_ports": NET,
    "net.ipv4.tcp_keepalive_time": NET,
    "net.ipv4.tcp_fin_timeout": NET,
    "net.ipv4.tcp_keepalive_intvl": NET,
    "net.ipv4.tcp_keepalive_probes": NET,
}
SECCOMP_UNCONFINED = "unconfined"
SECCOMP_RUNTIME_DEFAULT = "runtime/default"


def sysctls(pod: PodView) -> list[tuple[str, str]]:
    """The pod's sysctls, names in dotted form (a/b/c is a.b.c, as the kubelet converts it)."""
    context = pod.spec.get("securityContext") or {}
    return [
        (_dotted(str(s.get("name", ""))), str(s.get("value", "")))
        for s in context.get("sysctls") or ()
    ]


def _dotted(name: str) -> str:
    if "/" not in name:
        return name
    return name.replace(".", "\0").replace("/", ".").replace("\0", "/")


def sysctl_rejection(pod: PodView, allowed_unsafe: Sequence[str] = ()) -> str | None:
    """The sysctl admit handler's message for the first sysctl it refuses, if any."""
    for name, _ in sysctls(pod):
        namespace = SAFE_SYSCTLS.get(name) or _allowed_unsafe(name, allowed_unsafe)
        if namespace is None:
            return f'forbidden sysctl: "{name}" not allowlisted'
        if (namespace == IPC and pod.host_ipc) or (namespace == NET and pod.host_network):
            return f'forbidden sysctl: "{name}" not allowed with host {namespace} enabled'
    return None


def _allowed_unsafe(name: str, patterns: Sequence[str]) -> str | None:
    """--allowed-unsafe-sysctls: a name, or a prefix ending in *; the namespace it lives in."""
    for pattern in patterns:
        if pattern == name or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            if name.startswith(("kernel.shm", "kernel.msg", "kernel.sem", "fs.mqueue.")):
                return IPC
            return NET if name.startswith("net.") else "node"
    return None


def _effective(pod: PodView, container: ContainerView, field: str) -> Any:
    context = container.raw.get("securityContext") or {}
    if field in context and context[field] is not None:
        return context[field]
    return (pod.spec.get("securityContext") or {}).get(field)


def checks_image_user(pod: PodView, container: ContainerView) -> bool:
    """runAsNonRoot without a runAsUser: only the image's USER can tell."""
    return bool(_effective(pod, container, "runAsNonRoot")) and (
        _effective(pod, container, "runAsUser") is None
    )


def non_root_problem(pod: PodView, container: ContainerView, image_user: str) -> str | None:
    """verifyRunAsNonRoot: why the container may not run as the image would have it, if so."""
    if not _effective(pod, container, "runAsNonRoot"):
        return None
    who = f'(pod: "{pod.full_name}", container: {container.name})'
    run_as = _effective(pod, container, "runAsUser")
    if run_as is not None:
        return f"container's runAsUser breaks non-root policy {who}" if int(run_as) == 0 else None
    user = image_user.split(":", 1)[0]
    if user == "" or (user.isdigit() and int(user) == 0):
        return f"container has runAsNonRoot and image will run as root {who}"
    if not user.isdigit():
        return (
            f"container has runAsNonRoot and image has non-numeric user ({user}), cannot verify"
            f" user is non-root {who}"
        )
    return None


def supplemental_groups(pod: PodView) -> tuple[int, ...]:
    """fsGroup first, then supplementalGroups, as the kubelet hands them to the runtime."""
    context = pod.spec.get("securityContext") or {}
    groups = [pod.fs_group] if pod.fs_group is not None else []
    groups += [int(g) for g in context.get("supplementalGroups") or ()]
    return tuple(groups)


def seccomp_profile(pod: PodView, container: ContainerView) -> str:
    """The container's profile over the pod's; none is Unconfined (the kubelet's default)."""
    profile = (
        (container.raw.get("securityContext") or {}).get("seccompProfile")
        or (pod.spec.get("securityContext") or {}).get("seccompProfile")
        or {}
    )
    kind = profile.get("type")
    if kind == "RuntimeDefault":
        return SECCOMP_RUNTIME_DEFAULT
    if kind == "Localhost":
        return f"localhost/{profile.get('localhostProfile', '')}"
    return SECCOMP_UNCONFINED


# AppArmor (pkg/security/apparmor): the container's profile, then the deprecated annotation,
# then the pod's. Docker applies a profile with `apparmor=<name>`; runtime/default is its own.
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_REASON = "AppArmor"  # lifecycle.AppArmorNotAdmittedReason
APPARMOR_RUNTIME_DEFAULT = ""
APPARMOR_UNCONFINED = "unconfined"


def apparmor_profile(pod: PodView, container: ContainerView) -> Json | None:
    """GetProfile: the AppArmorProfile (type, localhostProfile) that applies, if any."""
    profile = (container.raw.get("securityContext") or {}).get("appArmorProfile")
    if profile:
        return dict(profile)
    annotations = (pod.raw.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(APPARMOR_ANNOTATION + container.name)
    if value == "runtime/default":
        return {"type": "RuntimeDefault"}
    if value == "unconfined":
        return {"type": "Unconfined"}
    if isinstance(value, str) and value.startswith("localhost/"):
        return {"type": "Localhost", "localhostProfile": value.removeprefix("localhost/")}
    pod_profile = (pod.spec.get("securityContext") or {}).get("appArmorProfile")
    return dict(pod_profile) if pod_profile else None


def apparmor_rejection(pod: PodView, host_enabled: bool) -> str | None:
    """The AppArmor admit handler: a profile other than Unconfined needs AppArmor on the host."""
    if not _apparmor_required(pod):
        return None
    if not host_enabled:
        return "Cannot enforce AppArmor: AppArmor is not enabled on the host"
    for container in pod.all_containers:
        profile = apparmor_profile(pod, container) or {}
        if (
            profile.get("type") == "Localhost"
            and not str(profile.get("localhostProfile") or "").strip()
        ):
            return "Cannot enforce AppArmor: invalid empty AppArmor profile name"
    return None


def apparmor_option(pod: PodView, container: ContainerView) -> str:
    """What the runtime is asked for: "" (its default), "unconfined", or a loaded profile."""
    profile = apparmor_profile(pod, container) or {}
    if profile.get("type") == "Unconfined":
        return APPARMOR_UNCONFINED
    if profile.get("type") == "Localhost":
        return str(profile.get("localhostProfile") or "")
    return APPARMOR_RUNTIME_DEFAULT


def _apparmor_required(pod: PodView) -> bool:
    """isRequired: any profile but Unconfined (the pod's, a container's, or an annotation)."""
    contexts = [pod.spec.get("securityContext") or {}] + [
        c.raw.get("securityContext") or {} for c in pod.all_containers
    ]
    for context in contexts:
        profile = context.get("appArmorProfile")
        if profile and profile.get("type") != "Unconfined":
            return True
    annotations = (pod.raw.get("metadata") or {}).get("annotations") or {}
    return any(
        key.startswith(APPARMOR_ANNOTATION) and value != "unconfined"
        for key, value in annotations.items()
    )


# User namespaces: Docker (like cri-dockerd) offers none, so its runtime handler reports no
# UserNamespaces feature and the kubelet fails the sandbox (usernsManager, v1.33+ wording).
USERNS_UNSUPPORTED = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"


def user_namespace_problem(pod: PodView) -> str | None:
    return USERNS_UNSUPPORTED if pod.spec.get("hostUsers") is False else None


def proc_unmasked(container: ContainerView) -> bool:
    """procMount Unmasked: no masked or read-only /proc paths (ConvertToRuntimeMaskedPaths)."""
    return (container.raw.get("securityContext") or {}).get("procMount") == "Unmasked"
