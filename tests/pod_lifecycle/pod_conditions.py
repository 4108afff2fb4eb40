"""Waiting on one condition of a pod's status (Ready, ContainersReady, PodResizePending, ...)."""

from __future__ import annotations

from typing import Any

from tests.cluster import ApiUnderTest
from tests.pods import condition, wait_status


def wait_condition(
    cluster: ApiUnderTest, pod: str, kind: str, field: str, value: str, timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait until the pod's condition `kind` has `field` == `value`: the pod's status then,
    and that condition."""
    st = wait_status(
        cluster,
        pod,
        lambda s: condition(s, kind).get(field) == value,
        timeout,
        f"{kind} {field} {value}",
    )
    return st, condition(st, kind)
