"""Downward API resource fields inside real containers, on both API servers: a downwardAPI
volume, a projected volume and env, with and without limits; an unset limit is the Node's
status.allocatable as the API shows it (upstream's downwardapi_volume.go,
projected_downwardapi.go and downwardapi.go specs)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from kubelet_sim.kube.rest import call_json
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.fakeapi import quantity
from tests.pods import container, ended_output, make_pod

# (file and env name, resource, divisor)
FIELDS = [
    ("CPU_LIMIT", "limits.cpu", None),
    ("CPU_LIMIT_M", "limits.cpu", "1m"),
    ("CPU_REQUEST", "requests.cpu", None),
    ("CPU_REQUEST_M", "requests.cpu", "1m"),
    ("MEMORY_LIMIT", "limits.memory", None),
    ("MEMORY_LIMIT_MI", "limits.memory", "1Mi"),
    ("MEMORY_REQUEST", "requests.memory", None),
    ("MEMORY_REQUEST_MI", "requests.memory", "1Mi"),
    ("STORAGE_LIMIT_MI", "limits.ephemeral-storage", "1Mi"),
    ("STORAGE_REQUEST_MI", "requests.ephemeral-storage", "1Mi"),
]
# Every value three ways: /dapi/<name>, /proj/<name>, and $<name>.
SCRIPT = 'for f in /dapi/* /proj/*; do echo "$f=$(cat $f)"; done; env'


def _selector(resource: str, divisor: str | None, container_name: str | None) -> dict[str, Any]:
    selector: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        selector["divisor"] = divisor
    if container_name is not None:
        selector["containerName"] = container_name
    return selector


def _pod(cluster: ApiUnderTest, name: str, resources: dict[str, Any] | None) -> None:
    items = [
        {"path": field, "resourceFieldRef": _selector(resource, divisor, "c")}
        for field, resource, divisor in FIELDS
    ]
    env = [
        {"name": field, "valueFrom": {"resourceFieldRef": _selector(resource, divisor, None)}}
        for field, resource, divisor in FIELDS
    ]
    app = container(
        command=["sh", "-c", SCRIPT],
        env=env,
        volumeMounts=[
            {"name": "dapi", "mountPath": "/dapi"},
            {"name": "proj", "mountPath": "/proj"},
        ],
        **({"resources": resources} if resources else {}),
    )
    volumes = [
        {"name": "dapi", "downwardAPI": {"items": items}},
        {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": items}}]}},
    ]
    make_pod(cluster, name, app, restart="Never", volumes=volumes)


def _read(output: str) -> dict[str, dict[str, str]]:
    """{"/dapi": {...}, "/proj": {...}, "env": {...}}, only our fields."""
    seen: dict[str, dict[str, str]] = {"/dapi": {}, "/proj": {}, "env": {}}
    names = {field for field, _, _ in FIELDS}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        where, _, name = key.rpartition("/")
        if name in names:
            seen[where or "env"][name] = value
    return seen


def _amount(text: str) -> Fraction:
    """A Node quantity ("2", "1900m", "8029464Ki", "18945478421") as a number: read as the
    (fake) API server reads it, not with the agent's parser."""
    amount = quantity.parse(text)
    assert amount is not None, text
    return amount


def _ceil(numerator: Fraction, denominator: int | Fraction) -> str:
    return str(math.ceil(numerator / denominator))


def test_resource_fields_in_volumes_and_env_with_and_without_limits(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        _pod(
            cluster,
            "limited",
            {
                "limits": {"cpu": "1250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                "requests": {"cpu": "250m", "memory": "32Mi"},
            },
        )
        _pod(cluster, "unlimited", None)
        limited = _read(ended_output(cluster, docker_env, "limited"))
        unlimited = _read(ended_output(cluster, docker_env, "unlimited"))
        node = call_json(cluster.core.read_node, cluster.node_name)
    finally:
        running.stop()

    # upstream's expectations for this container: 2, 67108864, 1, 33554432
    expected = {
        "CPU_LIMIT": "2",
        "CPU_LIMIT_M": "1250",
        "CPU_REQUEST": "1",
        "CPU_REQUEST_M": "250",
        "MEMORY_LIMIT": "67108864",
        "MEMORY_LIMIT_MI": "64",
        "MEMORY_REQUEST": "33554432",
        "MEMORY_REQUEST_MI": "32",
        "STORAGE_LIMIT_MI": "1024",
        "STORAGE_REQUEST_MI": "1024",  # the API server copied the limit to the unset request
    }
    assert limited == {"/dapi": expected, "/proj": expected, "env": expected}

    allocatable = node["status"]["allocatable"]
    cpu, memory = _amount(allocatable["cpu"]), _amount(allocatable["memory"])
    storage = _amount(allocatable["ephemeral-storage"])
    assert min(cpu, memory, storage) > 0, allocatable
    expected = {
        "CPU_LIMIT": _ceil(cpu, 1),
        "CPU_LIMIT_M": _ceil(cpu, Fraction(1, 1000)),
        "CPU_REQUEST": "0",
        "CPU_REQUEST_M": "0",
        "MEMORY_LIMIT": _ceil(memory, 1),
        "MEMORY_LIMIT_MI": _ceil(memory, 2**20),
        "MEMORY_REQUEST": "0",
        "MEMORY_REQUEST_MI": "0",
        "STORAGE_LIMIT_MI": _ceil(storage, 2**20),
        "STORAGE_REQUEST_MI": "0",
    }
    assert unlimited == {"/dapi": expected, "/proj": expected, "env": expected}
