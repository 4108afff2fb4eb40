"""Downward API resource fields (`resourceFieldRef`): a container's limit or request divided by a
divisor and rounded up, an unset limit read as the node's allocatable.

The one computation behind env (makeEnvironmentVariables) and the files of downwardAPI and
projected volumes (downwardapi.CollectData), as upstream's pkg/api/v1/resource/helpers.go does it
(ExtractContainerResourceValue, ExtractResourceValueByContainerName[AndNodeAllocatable],
MergeContainerResourceLimits) with the kubelet's defaultPodLimitsForDownwardAPI
(pkg/kubelet/kubelet_resources.go):

- a limit on cpu, memory or ephemeral-storage that is unset or zero is the node's allocatable
  (hugepages are never defaulted: they are never overcommitted); requests are read as written
  (the API server has already copied a limit to an unset request when it defaulted the pod);
- cpu is counted in thousandths (Quantity.MilliValue) and divided by the divisor's thousandths,
  so divisor `1m` gives millicores; memory, ephemeral-storage and hugepages in units
  (Quantity.Value) divided by the divisor's units; an unset or zero divisor is 1; the quotient
  is rounded up (`int64(math.Ceil(float64(a) / float64(b)))`, float64 as upstream).

Env and volumes differ in one point, as upstream: a volume's item names its container
(`containerName`, app or init) and that container's limits are defaulted; in env without
`containerName` it is the container itself (defaulted), with one it is the pod's app container
of that name (defaulted) or else its init container of that name, as written (the kubelet
defaults the app containers of its copy of the pod only).
"""

from __future__ import annotations

import math

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import INT64_MAX, INT64_MIN, milli_value, parse_quantity, value
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.spec import ContainerView, PodView

Quantity = str | int

_NAMED = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"


class ResourceFieldError(ValueError):
    """The kubelet's error text: a CreateContainerConfigError (env) or a FailedMount (volume)."""


def env_resource_value(
    pod: PodView, container: ContainerView, selector: Json, allocatable: Allocatable
) -> str:
    """containerResourceRuntimeValue on the copies defaultPodLimitsForDownwardAPI made."""
    name = str(selector.get("containerName") or "")
    if not name:
        return container_resource_value(container.raw, selector, allocatable)
    for candidate in pod.containers:
        if candidate.name == name:
            return container_resource_value(candidate.raw, selector, allocatable)
    for candidate in pod.init_containers:
        if candidate.name == name:
            return container_resource_value(candidate.raw, selector, None)
    raise ResourceFieldError(f"container {name} not found")


def volume_resource_value(pod: PodView, selector: Json, allocatable: Allocatable) -> str:
    """ExtractResourceValueByContainerNameAndNodeAllocatable: the named container (app, then
    init), its limits defaulted."""
    name = str(selector.get("containerName") or "")
    for candidate in (*pod.containers, *pod.init_containers):
        if candidate.name == name:
            return container_resource_value(candidate.raw, selector, allocatable)
    raise ResourceFieldError(f"container {name} not found")


def container_resource_value(
    container: Json, selector: Json, allocatable: Allocatable | None
) -> str:
    """ExtractContainerResourceValue on the container, after MergeContainerResourceLimits with
    `allocatable` (None: limits as written, an unset one 0)."""
    resource = str(selector.get("resource") or "")
    group, _, name = resource.partition(".")
    if group not in ("limits", "requests") or not (
        name in _NAMED or name.startswith(HUGEPAGES_PREFIX)
    ):
        raise ResourceFieldError(f"unsupported container resource : {resource}")
    try:
        amount = _amount(container, group, name, allocatable)
        divisor = selector.get("divisor")
        if divisor is None or parse_quantity(divisor) == 0:
            divisor = 1
        if name == "cpu":
            return str(ceil_div(milli_value(amount), milli_value(divisor)))
        return str(ceil_div(value(amount), value(divisor)))
    except ValueError as exc:  # a quantity the API server would not have stored
        raise ResourceFieldError(str(exc)) from exc


def ceil_div(numerator: int, denominator: int) -> int:
    """`int64(math.Ceil(float64(n) / float64(d)))`, within int64 (Go's conversion of a float
    past it is undefined; here it saturates). Exact below 2**53, as every real amount is."""
    if denominator == 0:  # only a divisor the API server refuses rounds to 0
        denominator = 1
    quotient = float(numerator) / float(denominator)
    if quotient >= 2.0**63:
        return INT64_MAX
    if quotient < -(2.0**63):
        return INT64_MIN
    return math.ceil(quotient)


def _amount(container: Json, group: str, name: str, allocatable: Allocatable | None) -> Quantity:
    """The quantity the container has for `group.name`, a limit defaulted to the allocatable."""
    listed = ((container.get("resources") or {}).get(group) or {}).get(name)
    unset = listed is None or parse_quantity(listed) == 0  # Quantity.IsZero
    if group == "limits" and unset and allocatable is not None:
        default = _allocatable_amount(allocatable, name)
        if default is not None:
            return default
    return 0 if listed is None else listed


def _allocatable_amount(allocatable: Allocatable, name: str) -> Quantity | None:
    if name == "cpu":
        return f"{allocatable.cpu_milli}m"
    if name == "memory":
        return allocatable.memory_bytes
    if name == "ephemeral-storage":
        return allocatable.ephemeral_storage_bytes
    return None  # hugepages: never defaulted
