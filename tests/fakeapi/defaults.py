"""Defaulting, admission and validation of the real API server, for the fields we serve."""

from __future__ import annotations

import base64
import copy
import ipaddress
import random
import re
from fractions import Fraction
from typing import Any

from tests.fakeapi import errors, quantity, resources
from tests.fakeapi.errors import cause

Obj = dict[str, Any]

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphabet
SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
# The fields a pod update may change, as ValidatePodUpdate names them (the spec diff the real
# server appends after a newline is left out).
_POD_UPDATABLE = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)


def pod_update_forbidden(minor: int) -> str:
    """v1.24 lists the fields as prose ("a, b or c"); v1.34 joins them with bare commas."""
    if minor >= 34:
        return "Forbidden: pod updates may not change fields other than " + ",".join(_POD_UPDATABLE)
    *first, last = _POD_UPDATABLE
    return f"Forbidden: pod updates may not change fields other than {', '.join(first)} or {last}"


def random_suffix(n: int = 5) -> str:
    """Random name suffix from the alphabet the real server uses for generateName."""
    return "".join(random.choice(NAME_CHARS) for _ in range(n))


def validate_name(obj: Obj, *, label: bool = False) -> list[dict[str, str]]:
    """metadata.name must be a DNS-1123 subdomain (a label for namespaces)."""
    name = obj.get("metadata", {}).get("name") or ""
    if not name:
        return [
            cause(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        ]
    pattern, msg, limit = (_LABEL, _LABEL_MSG, 63) if label else (_SUBDOMAIN, _SUBDOMAIN_MSG, 253)
    problems = []
    if not pattern.match(name):
        problems.append(
            cause("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {msg}')
        )
    if len(name) > limit:
        problems.append(
            cause(
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": must be no more than {limit} characters',
            )
        )
    return problems


# --- quantities and QoS -------------------------------------------------------------------


def _sum_resources(containers: list[Obj], field: str) -> tuple[dict[str, Fraction], list[set[str]]]:
    totals: dict[str, Fraction] = {}
    per_container: list[set[str]] = []
    for c in containers:
        found = set()
        for name, q in ((c.get("resources") or {}).get(field) or {}).items():
            amount = quantity.parse(q)
            if name not in ("cpu", "memory") or amount is None or amount <= 0:
                continue
            found.add(name)
            totals[name] = totals.get(name, Fraction(0)) + amount
        per_container.append(found)
    return totals, per_container


def qos_class(pod: Obj) -> str:
    """ComputePodQOS from pkg/apis/core/helper/qos."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests, _ = _sum_resources(containers, "requests")
    limits, found = _sum_resources(containers, "limits")
    if not requests and not limits:
        return "BestEffort"
    guaranteed = all({"cpu", "memory"} <= f for f in found)
    same = all(limits.get(k) == v for k, v in requests.items())
    if guaranteed and same and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


# --- pods ---------------------------------------------------------------------------------


def pull_policy(image: str) -> str:
    """Always for `:latest` or an untagged image without digest, else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _default_container(c: Obj) -> None:
    c.setdefault("imagePullPolicy", pull_policy(c.get("image") or ""))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, q in limits.items():
            requests.setdefault(name, q)
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref is not None:
            field_ref.setdefault("apiVersion", "v1")


def _default_volume(v: Obj) -> None:
    for source in ("configMap", "secret", "projected", "downwardAPI"):
        if isinstance(v.get(source), dict):
            v[source].setdefault("defaultMode", 420)
    if isinstance(v.get("hostPath"), dict):
        v["hostPath"].setdefault("type", "")


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and friends: what every decoded pod (create and update) gets."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _default_container(c)
    for v in spec.get("volumes") or []:
        if isinstance(v, dict):
            _default_volume(v)


def _api_access_volume() -> Obj:
    return {
        "name": f"kube-api-access-{random_suffix()}",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def _admit_service_account(spec: Obj) -> None:
    """ServiceAccount admission: default SA and the projected API access volume."""
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    if spec.get("automountServiceAccountToken") is False:
        return
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    mounted = any(
        m.get("mountPath") == SA_MOUNT_PATH for c in containers for m in c.get("volumeMounts") or []
    )
    if mounted or not containers:
        return
    volume = _api_access_volume()
    spec.setdefault("volumes", []).append(volume)
    mount = {"name": volume["name"], "readOnly": True, "mountPath": SA_MOUNT_PATH}
    for c in containers:
        c.setdefault("volumeMounts", []).append(dict(mount))


def _admit_tolerations(spec: Obj) -> None:
    """DefaultTolerationSeconds admission: tolerate not-ready/unreachable for 300 s."""
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        covered = any(
            (t.get("operator") == "Exists" and not t.get("key")) or t.get("key") == default["key"]
            for t in tolerations
        )
        if not covered:
            tolerations.append(dict(default))


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def is_mirror_pod(pod: Obj) -> bool:
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def admit_new_pod(pod: Obj) -> None:
    """Create-time defaulting + mutating admission, and the status the server resets to."""
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    if not is_mirror_pod(pod):  # the ServiceAccount plugin leaves a mirror pod's spec alone
        _admit_service_account(spec)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    _admit_tolerations(spec)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}


def _validate_containers(spec: Obj, field: str, seen: set[str]) -> list[dict[str, str]]:
    problems = []
    for i, c in enumerate(spec.get(field) or []):
        path = f"spec.{field}[{i}]"
        name = c.get("name") or ""
        if not name:
            problems.append(cause("FieldValueRequired", f"{path}.name", "Required value"))
        elif not _LABEL.match(name):
            problems.append(
                cause("FieldValueInvalid", f"{path}.name", f'Invalid value: "{name}": {_LABEL_MSG}')
            )
        elif name in seen:
            problems.append(
                cause("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{name}"')
            )
        seen.add(name)
        if not c.get("image"):
            problems.append(cause("FieldValueRequired", f"{path}.image", "Required value"))
    return problems


def proc_mounts(pod: Obj, minor: int) -> list[dict[str, str]]:
    """procMount as the server's version treats it: v1.24 drops it (the ProcMountType gate is
    off: dropDisabledFields); v1.30+ validates it (ValidateSecurityContext, KEP-4265): Default
    or Unmasked, and Unmasked only in a user namespace."""
    spec = pod.get("spec") or {}
    if minor < 30:
        for field in ("initContainers", "containers"):
            for c in spec.get(field) or []:
                (c.get("securityContext") or {}).pop("procMount", None)
        return []
    problems = []
    host_users = spec.get("hostUsers") is not False
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            mount = (c.get("securityContext") or {}).get("procMount")
            path = f"spec.{field}[{i}].securityContext.procMount"
            if mount is not None and mount not in ("Default", "Unmasked"):
                message = f'Unsupported value: "{mount}": supported values: "Default", "Unmasked"'
                problems.append(cause("FieldValueNotSupported", path, message))
            elif mount == "Unmasked" and host_users:
                message = 'Invalid value: "Unmasked": `hostUsers` must be false to use `Unmasked`'
                problems.append(cause("FieldValueInvalid", path, message))
    return problems


def validate_pod(pod: Obj) -> list[dict[str, str]]:
    """ValidatePodCreate, for the fields we care about."""
    problems = validate_name(pod)
    spec = pod.get("spec") or {}
    seen: set[str] = set()
    if not spec.get("containers"):
        problems.append(cause("FieldValueRequired", "spec.containers", "Required value"))
    problems += _validate_containers(spec, "containers", seen)
    problems += _validate_containers(spec, "initContainers", seen)
    policy = spec.get("restartPolicy")
    if policy not in ("Always", "OnFailure", "Never"):
        problems.append(
            cause(
                "FieldValueNotSupported",
                "spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    return problems


def validate_pod_update(new: Obj, old: Obj, minor: int) -> list[dict[str, str]]:
    """ValidatePodUpdate: only images, activeDeadlineSeconds and new tolerations may change."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    munged = copy.deepcopy(new_spec)
    for field in ("containers", "initContainers"):
        old_list, new_list = old_spec.get(field) or [], munged.get(field) or []
        if len(old_list) == len(new_list):
            for n, o in zip(new_list, old_list, strict=True):
                if isinstance(n, dict) and "image" in o:
                    n["image"] = o["image"]
    if "activeDeadlineSeconds" in old_spec:
        munged["activeDeadlineSeconds"] = old_spec["activeDeadlineSeconds"]
    else:
        munged.pop("activeDeadlineSeconds", None)
    old_tol = old_spec.get("tolerations") or []
    new_tol = munged.get("tolerations") or []
    if all(t in new_tol for t in old_tol):
        munged["tolerations"] = copy.deepcopy(old_tol)
        if "tolerations" not in old_spec:
            munged.pop("tolerations", None)
    if munged == old_spec:
        return []
    return [cause("FieldValueForbidden", "spec", pod_update_forbidden(minor))]


# --- other kinds --------------------------------------------------------------------------


def normalize_pod_ips(status: Obj) -> None:
    """The v1 ↔ internal conversion: `podIP` wins over a different `podIPs[0]`, and the
    stored `podIP` is always `podIPs[0]`."""
    pod_ip, pod_ips = status.get("podIP"), status.get("podIPs") or []
    if pod_ip and (not pod_ips or pod_ips[0].get("ip") != pod_ip):
        status["podIPs"] = [{"ip": pod_ip}]
    elif pod_ips:
        status["podIP"] = pod_ips[0].get("ip")
    if not status.get("podIPs"):
        status.pop("podIPs", None)
        status.pop("podIP", None)


def validate_pod_status(status: Obj, old: Obj) -> list[dict[str, str]]:
    """ValidatePodStatusUpdate (v1.24): nominatedNodeName, containers that may not leave the
    terminated state, pod IPs."""
    problems = []
    nominated = status.get("nominatedNodeName")
    if nominated and not _SUBDOMAIN.match(nominated):
        problems.append(
            cause(
                "FieldValueInvalid",
                "status.nominatedNodeName",
                f'Invalid value: "{nominated}": {_SUBDOMAIN_MSG}',
            )
        )
    policy = (old.get("spec") or {}).get("restartPolicy", "Always")
    old_status = old.get("status") or {}
    for field in ("containerStatuses", "initContainerStatuses"):
        problems += _state_transitions(status.get(field), old_status.get(field), field, policy)
    for i, item in enumerate(status.get("podIPs") or []):
        ip = str(item.get("ip", ""))
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            problems.append(
                cause(
                    "FieldValueInvalid",
                    f"status.podIPs[{i}]",
                    f'Invalid value: "{ip}": must be a valid IP address, '
                    "(e.g. 10.9.8.7 or 2001:db8::ffff)",
                )
            )
    return problems


def _state_transitions(
    new: list[Obj] | None, old: list[Obj] | None, field: str, policy: str
) -> list[dict[str, str]]:
    """ValidateContainerStateTransition: unless the policy restarts it, a terminated container
    stays terminated."""
    if policy == "Always":
        return []
    problems = []
    for i, before in enumerate(old or []):
        terminated = (before.get("state") or {}).get("terminated")
        if terminated is None:
            continue
        if terminated.get("exitCode", 0) != 0 and policy == "OnFailure":
            continue
        for after in new or []:
            if after.get("name") == before.get("name") and not (after.get("state") or {}).get(
                "terminated"
            ):
                problems.append(
                    cause(
                        "FieldValueForbidden",
                        f"status.{field}[{i}].state",
                        "Forbidden: may not be transitioned to non-terminated state",
                    )
                )
    return problems


def default_secret(secret: Obj) -> None:
    """Secrets: type Opaque, stringData folded into base64 data."""
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def default_namespace(ns: Obj) -> None:
    """Namespaces: the kubernetes finalizer, phase Active and the metadata.name label."""
    name = ns["metadata"]["name"]
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}


def update_ephemeral_containers(current: Obj, new: Obj) -> Obj:
    """pods/ephemeralcontainers (EphemeralContainersStrategy): only spec.ephemeralContainers
    changes; they may be added, never changed or removed; names are the pod's own."""
    result = copy.deepcopy(current)
    old = {c["name"]: c for c in (current.get("spec") or {}).get("ephemeralContainers") or []}
    wanted = copy.deepcopy((new.get("spec") or {}).get("ephemeralContainers") or [])
    for container in wanted:
        _default_container(container)
    taken = {c["name"] for key in ("containers", "initContainers")
             for c in (current.get("spec") or {}).get(key) or []}  # fmt: skip
    problems = []
    names = [c.get("name") for c in wanted]
    for index, container in enumerate(wanted):
        field = f"spec.ephemeralContainers[{index}].name"
        if container.get("name") in taken or names.count(container.get("name")) > 1:
            problems.append(cause("FieldValueDuplicate", field,
                                  f'Duplicate value: "{container.get("name")}"'))  # fmt: skip
        if container.get("name") in old and old[container["name"]] != container:
            problems.append(cause("FieldValueForbidden", "spec.ephemeralContainers",
                                  "Forbidden: existing ephemeral containers "
                                  f'"{container["name"]}" may not be changed\n'
                                  + _field_diff(old[container["name"]], container)))  # fmt: skip
    for name in old:
        if name not in names:
            problems.append(cause("FieldValueForbidden", "spec.ephemeralContainers",
                                  f'Forbidden: existing ephemeral containers "{name}" may not be'
                                  " removed\n"))  # fmt: skip
    if problems:
        raise errors.invalid(resources.PODS, current["metadata"]["name"], problems)
    result.setdefault("spec", {})["ephemeralContainers"] = wanted
    return result


def _field_diff(old: Obj, new: Obj) -> str:
    """The changed fields, one -/+ pair each. The real server prints go-cmp's diff of its
    internal types, whose layout go-cmp varies on purpose; the contract compares the line
    before it."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines += [f"-\t{key}: {old.get(key)!r}", f"+\t{key}: {new.get(key)!r}"]
    return "\n".join(lines) + "\n"


def update_resize(current: Obj, new: Obj) -> Obj:
    """pods/resize (podResizeStrategy, v1.33+): only the containers' resources and resizePolicy
    change; the generation moves with the spec. (Not checked here: the QoS class kept, limits
    not removed, cpu and memory only.)"""
    result = copy.deepcopy(current)
    wanted = {
        c.get("name"): c
        for key in ("containers", "initContainers")
        for c in (new.get("spec") or {}).get(key) or []
    }
    for key in ("containers", "initContainers"):
        for container in (result.get("spec") or {}).get(key) or []:
            changed = wanted.get(container["name"])
            if changed is None:
                continue
            for field in ("resources", "resizePolicy"):
                if changed.get(field):
                    container[field] = copy.deepcopy(changed[field])
                else:
                    container.pop(field, None)
    return result
