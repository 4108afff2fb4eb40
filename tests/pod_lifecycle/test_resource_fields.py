"""Downward API resource fields, pure: the rounding of helpers.go and the kubelet's defaulting
of unset limits to the node's allocatable (kubelet_resources.go), for env and volumes alike."""

from __future__ import annotations

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import INT64_MAX
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.resource_fields import (
    ResourceFieldError,
    ceil_div,
    container_resource_value,
    env_resource_value,
    volume_resource_value,
)
from kubelet_sim.pod.spec import PodView

NODE = Allocatable(
    cpu_milli=3500, memory_bytes=8 * 2**30, pods=110, ephemeral_storage_bytes=50 * 10**9
)
LIMITED: Json = {
    "name": "limited",
    "resources": {
        "limits": {"cpu": "1250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
        "requests": {"cpu": "250m", "memory": "32Mi", "ephemeral-storage": "500M"},
    },
}
UNLIMITED: Json = {"name": "unlimited"}


def read(container: Json, resource: str, divisor: str | None = None) -> str:
    selector: Json = {"resource": resource}
    if divisor is not None:
        selector["divisor"] = divisor
    return container_resource_value(container, selector, NODE)


@pytest.mark.parametrize(
    ("resource", "divisor", "expected"),
    [
        # the upstream specs' container (downwardapi_volume.go, downwardapi.go)
        ("limits.cpu", None, "2"),
        ("limits.memory", None, "67108864"),
        ("requests.cpu", None, "1"),
        ("requests.memory", None, "33554432"),
        # cpu: thousandths over the divisor's, rounded up
        ("limits.cpu", "1m", "1250"),
        ("limits.cpu", "1", "2"),
        ("requests.cpu", "1m", "250"),
        ("limits.cpu", "0", "2"),  # a zero divisor is 1
        # memory and ephemeral-storage: units over the divisor's, rounded up
        ("limits.memory", "1", "67108864"),
        ("limits.memory", "1Ki", "65536"),
        ("limits.memory", "1Mi", "64"),
        ("requests.memory", "1Mi", "32"),
        ("limits.memory", "1M", "68"),  # 67.108864
        ("limits.memory", "1G", "1"),  # 0.067108864
        ("limits.memory", "1Gi", "1"),
        ("limits.ephemeral-storage", None, str(2**30)),
        ("limits.ephemeral-storage", "1Mi", "1024"),
        ("limits.ephemeral-storage", "1G", "2"),  # 1.073741824
        ("requests.ephemeral-storage", "1Mi", "477"),  # 476.837...
        ("requests.ephemeral-storage", "1G", "1"),  # 0.5
    ],
)
def test_set_values_divided_and_rounded_up(
    resource: str, divisor: str | None, expected: str
) -> None:
    assert read(LIMITED, resource, divisor) == expected


@pytest.mark.parametrize(
    ("resource", "divisor", "expected"),
    [
        ("limits.cpu", None, "4"),  # 3500m of allocatable, rounded up
        ("limits.cpu", "1m", "3500"),
        ("limits.memory", None, str(8 * 2**30)),
        ("limits.memory", "1Mi", "8192"),
        ("limits.memory", "1Ki", str(8 * 2**20)),
        ("limits.memory", "1G", "9"),  # 8.589934592
        ("limits.ephemeral-storage", None, str(50 * 10**9)),
        ("limits.ephemeral-storage", "1G", "50"),
        ("limits.ephemeral-storage", "1Mi", "47684"),  # 47683.7...
        # requests are not defaulted by the kubelet (the API server copies a set limit)
        ("requests.cpu", None, "0"),
        ("requests.memory", "1Mi", "0"),
        ("requests.ephemeral-storage", None, "0"),
    ],
)
def test_unset_limits_are_the_node_allocatable(
    resource: str, divisor: str | None, expected: str
) -> None:
    assert read(UNLIMITED, resource, divisor) == expected


def test_a_zero_limit_is_unset_and_a_missing_allocatable_leaves_it_zero() -> None:
    """MergeContainerResourceLimits: `!exists || quantity.IsZero()`, and only from what the
    node reports."""
    zero = {"name": "z", "resources": {"limits": {"cpu": "0", "memory": "0"}}}
    assert read(zero, "limits.cpu", "1m") == "3500"
    assert read(zero, "limits.memory") == str(8 * 2**30)
    no_storage = Allocatable(cpu_milli=1000, memory_bytes=2**30, pods=110)
    selector = {"resource": "limits.ephemeral-storage"}
    assert container_resource_value(UNLIMITED, selector, no_storage) == "0"
    assert container_resource_value(UNLIMITED, {"resource": "limits.cpu"}, None) == "0"


def test_hugepages_are_read_but_never_defaulted() -> None:
    pages = {"name": "h", "resources": {"limits": {"hugepages-2Mi": "4Mi"}}}
    assert read(pages, "limits.hugepages-2Mi", "1Mi") == "4"
    assert read(pages, "requests.hugepages-2Mi") == "0"
    assert read(UNLIMITED, "limits.hugepages-1Gi") == "0"


def test_tiny_and_huge_amounts() -> None:
    tiny = {"name": "t", "resources": {"limits": {"cpu": "100u", "memory": "0.5"}}}
    assert read(tiny, "limits.cpu", "1m") == "1"  # MilliValue rounds up
    assert read(tiny, "limits.memory") == "1"
    huge = {"name": "h", "resources": {"limits": {"cpu": "1e999990", "memory": "1e999990"}}}
    assert read(huge, "limits.memory") == str(INT64_MAX)
    assert read(huge, "limits.cpu", "1m") == str(INT64_MAX)
    assert read(huge, "limits.cpu") == str(2**63 // 1000 + 1)  # float64, as upstream
    assert (ceil_div(7, 2), ceil_div(-7, 2), ceil_div(5, 0)) == (4, -3, 5)


@pytest.mark.parametrize(
    "resource", ["limits.gpu", "cpu", "limits", "requests.storage", "status.cpu", ""]
)
def test_unsupported_resources(resource: str) -> None:
    with pytest.raises(ResourceFieldError) as caught:
        read(LIMITED, resource)
    assert str(caught.value) == f"unsupported container resource : {resource}"


POD = PodView.from_api(
    {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "app"}, LIMITED],
        },
    }
)


def test_env_reads_its_own_container_or_the_named_one() -> None:
    app = POD.containers[0]
    assert env_resource_value(POD, app, {"resource": "limits.cpu"}, NODE) == "4"
    named = {"resource": "limits.cpu", "containerName": "limited", "divisor": "1m"}
    assert env_resource_value(POD, app, named, NODE) == "1250"
    # an init container named in env is read as written (only app containers are defaulted)
    init = {"resource": "limits.memory", "containerName": "init"}
    assert env_resource_value(POD, app, init, NODE) == "0"
    # ... but an init container's own env is defaulted
    own = {"resource": "limits.memory"}
    assert env_resource_value(POD, POD.init_containers[0], own, NODE) == str(8 * 2**30)
    with pytest.raises(ResourceFieldError, match=r"^container nope not found$"):
        env_resource_value(POD, app, {"resource": "limits.cpu", "containerName": "nope"}, NODE)


def test_volumes_read_the_named_container_app_or_init_defaulted() -> None:
    selector = {"resource": "limits.memory", "divisor": "1Mi"}
    assert volume_resource_value(POD, {**selector, "containerName": "limited"}, NODE) == "64"
    assert volume_resource_value(POD, {**selector, "containerName": "app"}, NODE) == "8192"
    assert volume_resource_value(POD, {**selector, "containerName": "init"}, NODE) == "8192"
    with pytest.raises(ResourceFieldError, match=r"^container  not found$"):
        volume_resource_value(POD, selector, NODE)
