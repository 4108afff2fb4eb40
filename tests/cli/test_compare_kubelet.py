"""Issue 32's bar: every scenario `kubelet-sim compare` ships agrees with the real kubelet,
and (issue 39) so do the two Node objects, but for what differs by nature.

Our node and the rig's upstream kubelet (`reference_node`) run each scenario at once, one run
each (CI's real pass). A scenario agrees when our node wrote no state the kubelet did not,
settled where the kubelet was at the end of our window or went after it, and gave the same
events. One run of the kubelet does not show its own noise (under the load of 36 pods on two
cores it once failed a StopContainer and said FailedKillPod, which it does not do alone; the
v1.34 kubelet on containerd 1.6 shows `sh -c "exit 0"` running first in some runs and not in
others): a scenario that disagrees is run three times more (`--runs 3`), and each of our runs
must then agree with what the kubelet's three runs showed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.controlplane.reference_node import ReferenceNode
from tests.agent_fixture import start_agent
from tests.cli.test_compare import Command, _node_exists
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv

pytestmark = pytest.mark.docker


def _compare(
    cluster: ApiUnderTest, reference: ReferenceNode, *scenarios: str, runs: int = 1
) -> dict[str, Any]:
    chosen = [arg for name in scenarios for arg in ("--scenario", name)]
    command = Command(
        "--node", cluster.node_name, "--reference-node", reference.name,
        "--kubeconfig", cluster.kubeconfig, "--output", "json", "--runs", str(runs), *chosen,
    )  # fmt: skip
    code, out = command.finish(600 * runs)
    assert code == 0, "".join(command.err)
    report: dict[str, Any] = json.loads(out)
    return report


def _differing(report: dict[str, Any]) -> list[dict[str, Any]]:
    differing = [s for s in report["scenarios"] if not s["agrees"]]
    for scenario in differing:  # what differs, for whoever reads the test's log
        print(json.dumps(scenario, indent=1))
    return differing


@pytest.mark.timeout(2400)
def test_every_shipped_scenario_agrees_with_the_real_kubelet(
    cluster: ApiUnderTest, docker_env: DockerEnv, reference_node: ReferenceNode, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        wait_for(lambda: _node_exists(cluster, cluster.node_name), 20, "our Node registered")
        report = _compare(cluster, reference_node)
        assert report["total"] >= 18
        first = [s["name"] for s in _differing(report)]
        again = _differing(_compare(cluster, reference_node, *first, runs=3)) if first else []
    finally:
        running.stop()
    # The Node objects too (issue 39): what differs by nature is listed with why.
    nodes = report["node_object"]
    assert nodes["differs"] == [], json.dumps(nodes, indent=1)
    assert all(field["why"] for field in nodes["by_nature"])
    assert [s["name"] for s in again] == [], f"first run: {first}"
