"""The pytest plugin joining a cluster a user has (`--kubelet-sim-kubeconfig`): the tests'
kind-shaped topology (tests/kindlike.py: the API server in a container on a Docker network of
its own, no scheduler), the nodes joining it with its admin's kubeconfig, their pods on its
network. It runs in the fake pass, as the other kind-shaped tests do."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import docker
import pytest

from kubelet_sim.kube.rest import ApiError, request_json
from tests.kindlike import KindLike, kindlike  # noqa: F401 (a fixture)

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.kindlike, pytest.mark.timeout(300)]

USER_TESTS = """
import json
import time
from pathlib import Path


def test_a_pod_runs_on_a_joined_node(kubelet_sim_cluster, kubelet_sim_namespace):
    cluster, ns = kubelet_sim_cluster, kubelet_sim_namespace
    (node,) = cluster.nodes
    Path({record!r}).write_text(json.dumps({{"labels": cluster.labels, "node": node}}))
    pod = {{
        "apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "hello"}},
        "spec": {{"nodeName": node, "containers": [{{
            "name": "c", "image": cluster.image,
            "command": ["sh", "-c", "echo hello from $HOSTNAME; sleep 3600"]}}]}},
    }}
    Path("pod.json").write_text(json.dumps(pod))
    cluster.kubectl("-n", ns, "create", "-f", "pod.json")
    deadline = time.monotonic() + 60
    logs = ""
    while time.monotonic() < deadline and "hello from" not in logs:
        time.sleep(0.5)
        try:
            logs = cluster.kubectl("-n", ns, "logs", "hello")
        except Exception:
            pass
    assert logs.strip() == "hello from hello"
"""


def _plugin_args() -> list[str]:
    installed = {e.value for e in entry_points(group="pytest11")}
    return [] if "kubelet_sim.testing.plugin" in installed else ["-p", "kubelet_sim.testing.plugin"]


def test_the_nodes_join_a_users_cluster_and_run_pods(
    pytester: pytest.Pytester,
    kindlike: KindLike,  # noqa: F811 (the fixture)
) -> None:
    record = pytester.path / "record.json"
    pytester.makepyfile(test_user=USER_TESTS.format(record=str(record)))
    result = pytester.runpytest_subprocess(
        *_plugin_args(),
        "-p", "no:cacheprovider",
        "--kubelet-sim-nodes", "1",
        "--kubelet-sim-kubeconfig", str(kindlike.admin_kubeconfig),
        "--kubelet-sim-docker-network", kindlike.network.name,
        "-v",
        timeout=240,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    found: dict[str, Any] = json.loads(record.read_text())
    with pytest.raises(ApiError) as gone:
        request_json(kindlike.api, "GET", f"/api/v1/nodes/{found['node']}")
    assert gone.value.not_found, "the joined node's Node object is deleted at the end"
    client = docker.from_env()
    try:
        labels = [f"{k}={v}" for k, v in found["labels"].items()]
        assert client.containers.list(all=True, filters={"label": labels}) == []
    finally:
        client.close()
    assert Path(kindlike.admin_kubeconfig).exists(), "the user's kubeconfig stays"
