"""kubelet_sim.testing as a controller author uses it: the pytest plugin's fixtures in a pytest
run of their own (pytester), and `Cluster`'s node faults in this process.

Each test starts a control plane of its own (the real binaries): they run once, in the
real-API pass, where those binaries are known to be.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import docker
import pytest

from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE
from tests.cluster import api_mode, wait_for

pytest_plugins = ["pytester"]
pytestmark = [
    pytest.mark.docker,
    pytest.mark.own_control_plane,
    pytest.mark.skipif(api_mode() != "real", reason="starts its own control plane: real pass"),
    pytest.mark.timeout(600),
]

# What a controller author writes: a pod in a fresh namespace, Running on a kubelet-sim node;
# then a test that fails. Each records what the outer test checks is gone afterwards.
USER_TESTS = """
import json
import time
from pathlib import Path

IMAGE = {image!r}
RECORD = Path({record!r})


def _record(cluster):
    plane = cluster.plane
    RECORD.write_text(json.dumps({{
        "labels": cluster.labels,
        "pids": [pid for _name, pid, _argv in plane.processes],
        "workdir": str(cluster.workdir),
    }}))


def test_a_pod_runs(kubelet_sim_cluster, kubelet_sim_namespace):
    cluster = kubelet_sim_cluster
    _record(cluster)
    assert cluster.nodes == ["n1", "n2"]
    ns = kubelet_sim_namespace
    cluster.kubectl("-n", ns, "run", "hello", "--image", IMAGE, "--restart=Never",
                    "--", "sleep", "3600")
    deadline = time.monotonic() + {deadline}
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl("-n", ns, "get", "pod", "hello", "-o", "jsonpath={{.status.phase}}")
        if phase == "Running":
            break
        time.sleep(0.5)
    assert phase == "Running"
    from kubernetes import client

    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(ns)
    assert pods.items[0].spec.node_name in cluster.nodes


def test_that_fails(kubelet_sim_cluster):
    raise AssertionError("a failing test: the cluster still goes")
"""


def _kube_bin() -> Path | None:
    """Where the binaries are, found now: pytester gives each run a HOME of its own (and with
    it an empty download cache), so the run is told the directory."""
    try:
        return find_binaries().apiserver.parent
    except BinariesMissing:
        return None


KUBE_BIN = _kube_bin()


def _plugin_args() -> list[str]:
    """Load the plugin by name unless the installed package's entry point already does."""
    installed = {e.value for e in entry_points(group="pytest11")}
    return [] if "kubelet_sim.testing.plugin" in installed else ["-p", "kubelet_sim.testing.plugin"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_the_fixtures_give_a_cluster_and_take_it_down(pytester: pytest.Pytester) -> None:
    record = pytester.path / "record.json"
    pytester.makepyfile(
        test_user=USER_TESTS.format(image=BUSYBOX_IMAGE, record=str(record), deadline=120)
    )
    if KUBE_BIN is None:
        pytest.skip("no control-plane binaries (kubelet-sim demo --download fetches them)")
    result = pytester.runpytest_subprocess(
        *_plugin_args(),
        "-p",
        "no:cacheprovider",
        "--kubelet-sim-nodes",
        "2",
        "--kubelet-sim-kube-bin",
        str(KUBE_BIN),
        "-v",
        timeout=500,
    )
    result.assert_outcomes(passed=1, failed=1)
    found: dict[str, Any] = json.loads(record.read_text())
    client = docker.from_env()
    try:
        labels = [f"{k}={v}" for k, v in found["labels"].items()]
        left = client.containers.list(all=True, filters={"label": labels})
    finally:
        client.close()
    assert left == [], "containers of the cluster left behind"
    assert [pid for pid in found["pids"] if _alive(pid)] == [], "control plane processes left"
    assert not Path(found["workdir"]).exists()


def _ready(cluster: Any, name: str) -> str:
    node = json.loads(cluster.kubectl("get", "node", name, "-o", "json"))
    conditions = node["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "")


def test_a_stopped_node_goes_not_ready_and_comes_back() -> None:
    from kubelet_sim.testing import Cluster

    with Cluster(nodes=2) as cluster:
        cluster.stop_node("n1")
        # The Lease ages past the controller-manager's grace period (20 s): NotReady (Unknown).
        wait_for(lambda: _ready(cluster, "n1") == "Unknown", 60, "n1 to go NotReady")
        assert _ready(cluster, "n2") == "True"
        cluster.start_node("n1")
        assert _ready(cluster, "n1") == "True"
