"""What to ask the runtime to create for a pod: its sandbox and each container's config.

A port of the parts of the kubelet that turn a pod spec into CRI requests: generatePodSandboxConfig
(hostname, host ports, host namespaces), makeEnvironmentVariables (envFrom, env, downward API,
ConfigMap and Secret keys, `$(VAR)` expansion), ExpandContainerCommandAndArgs, the Linux resource
knobs (milliCPUToShares/milliCPUToQuota) and the effective security context. Pure: ConfigMaps and
Secrets come through an `ObjectLookup` the caller backs with its watch cache.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import milli_value, value
from kubelet_sim.linux.safe_paths import bind_target_problem
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.resource_fields import ResourceFieldError, env_resource_value
from kubelet_sim.pod.security import (
    apparmor_option,
    proc_unmasked,
    seccomp_profile,
    supplemental_groups,
    sysctls,
)
from kubelet_sim.pod.spec import ContainerView, PodView

ObjectLookup = Callable[[str, str, str], Json | None]
"""(kind "ConfigMap"/"Secret", namespace, name) -> the object as the API returns it, or None."""

CONFIG_MAP, SECRET = "ConfigMap", "Secret"
_NOT_FOUND_RESOURCE = {CONFIG_MAP: "configmap", SECRET: "secret"}  # apierrors.NewNotFound names

HOSTNAME_MAX_LEN = 63
QUOTA_PERIOD = 100_000  # µs: the CFS period the kubelet uses unless CPUCFSQuotaPeriod is tuned
MIN_QUOTA_PERIOD = 1_000
# The kernel's largest CFS quota (max_cfs_runtime: 2**44 - 1 µs, kernel/sched/core.c); a larger
# one fails the container's start (runc: "invalid argument"). A limit past it, 175 million
# CPUs at the 100 ms period, limits nothing: it is that quota.
MAX_QUOTA = 2**44 - 1
MIN_SHARES, MAX_SHARES, SHARES_PER_CPU = 2, 262_144, 1024

# validation.IsEnvVarName: what envFrom keys must look like to be kept.
_ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _termination_message_path(raw: Json) -> str:
    path = str(raw.get("terminationMessagePath") or "/dev/termination-log")
    problem = bind_target_problem(path)  # it becomes a bind mount of the message file
    if problem:
        raise ContainerConfigError(f"invalid terminationMessagePath {path!r}: {problem}")
    return path


class ContainerConfigError(Exception):
    """The kubelet's CreateContainerConfigError; the message is the container's waiting message."""


def pod_ref(pod: PodView, node: str) -> cri.PodRef:
    return cri.PodRef(node=node, name=pod.name, namespace=pod.namespace, uid=pod.uid)


# --- sandbox ---------------------------------------------------------------------------------


def sandbox_config(pod: PodView, *, node: str, attempt: int, pause_image: str) -> cri.SandboxConfig:
    """generatePodSandboxConfig: the sandbox owns hostname, published host ports and namespaces."""
    return cri.SandboxConfig(
        pod=pod_ref(pod, node),
        attempt=attempt,
        image=pause_image,
        hostname=pod_hostname(pod),
        port_mappings=port_mappings(pod),
        host_network=pod.host_network,
        host_pid=pod.host_pid,
        host_ipc=pod.host_ipc,
        sysctls=tuple(sysctls(pod)),
    )


def pod_hostname(pod: PodView) -> str:
    """spec.hostname or the pod name, cut to 63 characters without a trailing '-' or '.'.

    As GeneratePodHostNameAndDomain/truncatePodHostnameIfNeeded; pod names are DNS subdomains,
    so the trimmed name is never empty.
    """
    hostname = str(pod.spec.get("hostname") or pod.name)
    if len(hostname) <= HOSTNAME_MAX_LEN:
        return hostname
    return hostname[:HOSTNAME_MAX_LEN].rstrip("-.")


def port_mappings(pod: PodView) -> tuple[cri.PortMapping, ...]:
    """Ports of app containers that ask for a hostPort (others are not published on the node)."""
    mappings: list[cri.PortMapping] = []
    for container in pod.containers:
        for port in container.raw.get("ports") or []:
            host_port = int(port.get("hostPort") or 0)
            if host_port:
                mappings.append(
                    cri.PortMapping(
                        container_port=int(port["containerPort"]),
                        host_port=host_port,
                        protocol=str(port.get("protocol") or "TCP"),
                        host_ip=str(port.get("hostIP") or ""),
                    )
                )
    return tuple(mappings)


# --- container -------------------------------------------------------------------------------


def container_config(
    pod: PodView,
    container: ContainerView,
    *,
    node: str,
    attempt: int,
    host_ip: str,
    pod_ip: str,
    lookup: ObjectLookup,
    allocatable: Allocatable,
    mounts: Sequence[cri.Mount] = (),
    services: Mapping[str, str] | None = None,
) -> cri.ContainerConfig:
    """The CRI ContainerConfig for one app or init container (generateContainerConfig).

    Raises ContainerConfigError with the kubelet's message when a referenced ConfigMap, Secret or
    key is missing and the reference is not optional. `services` are the service-link
    variables (pod/service_env.py); `allocatable` is the node's, what the downward API reads for
    an unset limit.
    """
    env = environment(
        pod,
        container,
        node=node,
        host_ip=host_ip,
        pod_ip=pod_ip,
        lookup=lookup,
        allocatable=allocatable,
        services=services or {},
    )
    env_map = dict(env)
    raw = container.raw
    return cri.ContainerConfig(
        pod=pod_ref(pod, node),
        name=container.name,
        attempt=attempt,
        image=container.image,
        spec_hash=spec_hash(container),
        entrypoint=_expand_all(raw.get("command"), env_map),
        cmd=_expand_all(raw.get("args"), env_map),
        env=tuple(env),
        working_dir=str(raw["workingDir"]) if raw.get("workingDir") else None,
        mounts=tuple(mounts),
        resources=container_resources(container),
        security=security_config(pod, container),
        tty=bool(raw.get("tty")),
        stdin=bool(raw.get("stdin")),
        stdin_once=bool(raw.get("stdinOnce")),
        termination_message_path=_termination_message_path(raw),
        termination_message_policy=container.termination_message_policy,
        termination_grace_period=pod.termination_grace_period,
    )


def spec_hash(container: ContainerView) -> str:
    """FNV-1a/32 of the container's canonical JSON, in hex (kubecontainer.HashContainer).

    Only a changed spec (in practice: a new image) changes it, so it is safe to store in a label
    and compare after an agent restart. Resources and resizePolicy are left out: since v1.31
    the kubelet hashes only name and image (pickFieldsToHash), so an in-place resize never
    restarts a container by itself; the API server allows no other change of a container but
    its image, and before the resize subresource (v1.33) resources were immutable, so leaving
    them out changes nothing for older servers' rules. A container that has neither field keeps
    the hash it always had.
    """
    picked = {k: v for k, v in container.raw.items() if k not in HASH_EXCLUDED}
    return _fnv1a_32(json.dumps(picked, sort_keys=True, separators=(",", ":")).encode())


HASH_EXCLUDED = frozenset({"resources", "resizePolicy"})


def with_current_hashes(
    pod: PodView, observed: Sequence[cri.ObservedContainer]
) -> list[cri.ObservedContainer]:
    """Containers an agent before the hash left resources out labelled with the whole spec's
    hash: one that matches the container as allocated now is unchanged, and is seen with
    today's hash, rather than restarted once by an upgraded agent."""
    specs = {c.name: c for c in pod.all_containers}
    out = []
    for c in observed:
        spec = specs.get(c.name)
        legacy = spec is not None and bool(c.spec_hash) and c.spec_hash == legacy_spec_hash(spec)
        out.append(replace(c, spec_hash=spec_hash(spec)) if spec is not None and legacy else c)
    return out


def legacy_spec_hash(container: ContainerView) -> str:
    """The hash before resources were left out: the whole container spec's."""
    return _fnv1a_32(json.dumps(container.raw, sort_keys=True, separators=(",", ":")).encode())


@functools.lru_cache(maxsize=1024)
def _fnv1a_32(data: bytes) -> str:
    """Byte by byte in Python, so remembered: every sync of every pod hashes its containers
    again, and their specs do not change."""
    digest = 0x811C9DC5
    for byte in data:
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return format(digest, "x")


def _expand_all(items: Any, env: Mapping[str, str]) -> tuple[str, ...] | None:
    """command/args with `$(VAR)` expanded against the final env; None keeps the image's."""
    if not items:
        return None
    return tuple(expand(str(item), env) for item in items)


# --- $(VAR) expansion: third_party/forked/golang/expansion -----------------------------------


def expand(text: str, env: Mapping[str, str]) -> str:
    """Replace `$(NAME)` by env[NAME]; `$$` is a literal `$`; unknown or broken refs stay as is."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(text[cursor + 1 :])
            if is_var:
                out.append(env.get(read, f"$({read})"))
            else:
                out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def _read_variable_name(text: str) -> tuple[str, bool, int]:
    """tryReadVariableName: (what was read, whether it names a variable, characters consumed)."""
    first = text[0]
    if first == "$":
        return "$", False, 1  # escaped operator
    if first == "(":
        closer = text.find(")", 1)
        if closer != -1:
            return text[1:closer], True, closer + 1
        return "$(", False, 1  # incomplete reference: keep it, rescan the rest
    return "$" + first, False, 1


# --- environment: makeEnvironmentVariables ---------------------------------------------------


def environment(
    pod: PodView,
    container: ContainerView,
    *,
    node: str,
    host_ip: str,
    pod_ip: str,
    lookup: ObjectLookup,
    allocatable: Allocatable,
    services: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The container's env: envFrom first, then env in order, a later name replacing an earlier,
    then the service-link variables the container did not set ($(VAR) sees both, the
    container's first: makeEnvironmentVariables).

    The kubelet emits its map in Go's random order; we keep each name where it first appeared.
    Invalid envFrom keys are skipped as IsEnvVarName decides (the kubelet also emits an
    InvalidEnvironmentVariableNames event, which is the caller's business). resourceFieldRef
    reads an unset limit as the node's `allocatable` (pod/resource_fields.py).
    """
    objects = _Objects(pod.namespace, lookup)
    env: dict[str, str] = {}
    for source in container.raw.get("envFrom") or []:
        env.update(_env_from(source, objects))
    for var in container.raw.get("env") or []:
        name, literal = str(var["name"]), str(var.get("value") or "")
        if literal:
            env[name] = expand(literal, {**(services or {}), **env})
        elif not var.get("valueFrom"):
            env[name] = ""
        else:
            resolved = _value_from(
                var["valueFrom"],
                pod,
                container,
                objects,
                node=node,
                host_ip=host_ip,
                pod_ip=pod_ip,
                allocatable=allocatable,
            )
            if resolved is not None:  # None: an optional reference to a missing object or key
                env[name] = resolved
    return [*env.items(), *((k, v) for k, v in (services or {}).items() if k not in env)]


class _Objects:
    """ConfigMaps and Secrets read once per container, as the kubelet's local maps do."""

    def __init__(self, namespace: str, lookup: ObjectLookup) -> None:
        self.namespace = namespace
        self._lookup = lookup
        self._cache: dict[tuple[str, str], Json | None] = {}

    def get(self, kind: str, name: str, *, optional: bool) -> dict[str, str] | None:
        """The object's string data; None if missing and optional, else the kubelet's error."""
        key = (kind, name)
        if key not in self._cache:
            self._cache[key] = self._lookup(kind, self.namespace, name)
        obj = self._cache[key]
        if obj is None:
            if optional:
                return None
            raise ContainerConfigError(f'{_NOT_FOUND_RESOURCE[kind]} "{name}" not found')
        return _string_data(kind, obj)

    def key(self, kind: str, ref: Json) -> str | None:
        """One key of a ConfigMap/Secret (configMapKeyRef/secretKeyRef); None when skipped."""
        name, key, optional = str(ref.get("name") or ""), str(ref.get("key")), _optional(ref)
        data = self.get(kind, name, optional=optional)
        if data is None:
            return None
        if key not in data:
            if optional:
                return None
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {self.namespace}/{name}")
        return data[key]


def _string_data(kind: str, obj: Json) -> dict[str, str]:
    """ConfigMap `data` as is (not binaryData, like the kubelet); Secret `data` base64-decoded."""
    data = obj.get("data") or {}
    if kind == CONFIG_MAP:
        return {str(k): str(v) for k, v in data.items()}
    return {str(k): _b64decode(str(v)) for k, v in data.items()}


def _b64decode(text: str) -> str:
    """Secret values arrive base64-encoded; Go's string(bytes) keeps bytes, we need text."""
    return base64.b64decode(text).decode("utf-8", errors="replace")


def _optional(ref: Json) -> bool:
    return bool(ref.get("optional"))


def _env_from(source: Json, objects: _Objects) -> dict[str, str]:
    """One envFrom entry: every valid key, with the prefix, from a ConfigMap or a Secret."""
    if "configMapRef" in source:
        kind, ref = CONFIG_MAP, source["configMapRef"] or {}
    elif "secretRef" in source:
        kind, ref = SECRET, source["secretRef"] or {}
    else:
        return {}
    data = objects.get(kind, str(ref.get("name") or ""), optional=_optional(ref))
    prefix = str(source.get("prefix") or "")
    return {prefix + k: v for k, v in (data or {}).items() if is_env_var_name(prefix + k)}


def is_env_var_name(name: str) -> bool:
    """validation.IsEnvVarName: C-identifier-like with '-' and '.', not '.' nor '..'-prefixed."""
    return bool(_ENV_VAR_NAME.match(name)) and name != "." and not name.startswith("..")


def _value_from(
    source: Json,
    pod: PodView,
    container: ContainerView,
    objects: _Objects,
    *,
    node: str,
    host_ip: str,
    pod_ip: str,
    allocatable: Allocatable,
) -> str | None:
    if source.get("fieldRef"):
        path = str(source["fieldRef"].get("fieldPath") or "")
        return field_value(pod, path, node=node, host_ip=host_ip, pod_ip=pod_ip)
    if source.get("resourceFieldRef"):
        try:
            return env_resource_value(pod, container, source["resourceFieldRef"], allocatable)
        except ResourceFieldError as exc:
            raise ContainerConfigError(str(exc)) from exc
    if source.get("configMapKeyRef"):
        return objects.key(CONFIG_MAP, source["configMapKeyRef"])
    if source.get("secretKeyRef"):
        return objects.key(SECRET, source["secretKeyRef"])
    return ""


def field_value(pod: PodView, path: str, *, node: str, host_ip: str, pod_ip: str) -> str:
    """podFieldSelectorRuntimeValue: the downward API fields valid in env."""
    meta = pod.raw.get("metadata") or {}
    if path.endswith("']") and "['" in path:
        field, _, key = path[: -len("']")].partition("['")
        if field in ("metadata.labels", "metadata.annotations"):
            return str((meta.get(field.removeprefix("metadata.")) or {}).get(key, ""))
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "spec.nodeName": str(pod.spec.get("nodeName") or node),
        "spec.serviceAccountName": str(pod.spec.get("serviceAccountName") or ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise ContainerConfigError(f"field label not supported: {path}")
    return simple[path]


# --- resources and security ------------------------------------------------------------------


def container_resources(container: ContainerView) -> cri.Resources:
    """calculateLinuxResources: shares from the request (or the limit), quota from the limit."""
    resources = container.raw.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    cpu_limit = milli_value(limits["cpu"]) if "cpu" in limits else 0
    cpu_request = milli_value(requests["cpu"]) if "cpu" in requests else 0
    shares = milli_cpu_to_shares(cpu_limit if cpu_request == 0 and cpu_limit else cpu_request)
    memory_limit = value(limits["memory"]) if "memory" in limits else 0
    return cri.Resources(
        cpu_period=QUOTA_PERIOD if cpu_limit else None,
        cpu_quota=milli_cpu_to_quota(cpu_limit) if cpu_limit else None,
        cpu_shares=shares,
        memory_limit_bytes=memory_limit or None,
    )


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cm.MilliCPUToShares: 1024 per CPU, at least 2 (the kernel's minimum), at most 262144."""
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """milliCPUToQuota: the CPU time per period the limit allows, at least 1 ms and at most
    the kernel's maximum; 0 = no limit."""
    if milli_cpu == 0:
        return 0
    return min(MAX_QUOTA, max(MIN_QUOTA_PERIOD, milli_cpu * period // 1000))


def security_config(pod: PodView, container: ContainerView) -> cri.SecurityConfig:
    """The effective security context: the container's fields over the pod's where both exist."""
    pod_context = pod.spec.get("securityContext") or {}
    context = container.raw.get("securityContext") or {}
    capabilities = context.get("capabilities") or {}
    return cri.SecurityConfig(
        run_as_user=_int_or_none(context.get("runAsUser", pod_context.get("runAsUser"))),
        run_as_group=_int_or_none(context.get("runAsGroup", pod_context.get("runAsGroup"))),
        privileged=bool(context.get("privileged")),
        read_only_rootfs=bool(context.get("readOnlyRootFilesystem")),
        capabilities_add=tuple(str(c) for c in capabilities.get("add") or ()),
        capabilities_drop=tuple(str(c) for c in capabilities.get("drop") or ()),
        no_new_privileges=context.get("allowPrivilegeEscalation") is False,
        supplemental_groups=supplemental_groups(pod),
        seccomp=seccomp_profile(pod, container),
        apparmor=apparmor_option(pod, container),
        unmasked_proc=proc_unmasked(container),
    )


def _int_or_none(raw: Any) -> int | None:
    return None if raw is None else int(raw)
