"""Issue 32's bar: every scenario `kubelet-sim compare` ships agrees with the real kubelet.

Our node and the rig's upstream kubelet (`reference_node`) run each scenario at once, one run
each (CI's real pass; repeated runs are for a person: `--runs N`). A scenario agrees when our
node wrote no state the kubelet did not, settled where it settled, and gave the same events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubelet_sim.controlplane.reference_node import ReferenceNode
from tests.agent_fixture import start_agent
from tests.cluster import Cluster, wait_for
from tests.docker_env import DockerEnv
from tests.test_compare import Command, _node_exists

pytestmark = pytest.mark.docker


@pytest.mark.timeout(900)
def test_every_shipped_scenario_agrees_with_the_real_kubelet(
    cluster: Cluster, docker_env: DockerEnv, reference_node: ReferenceNode, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        wait_for(lambda: _node_exists(cluster, cluster.node_name), 20, "our Node registered")
        command = Command(
            "--node", cluster.node_name, "--reference-node", reference_node.name,
            "--kubeconfig", cluster.kubeconfig, "--output", "json",
        )  # fmt: skip
        code, out = command.finish(600)
    finally:
        running.stop()
    assert code == 0, "".join(command.err)
    report = json.loads(out)
    differing = [s for s in report["scenarios"] if not s["agrees"]]
    for scenario in differing:  # what differs, for whoever reads the test's log
        print(json.dumps(scenario, indent=1))
    assert report["agree"] == report["total"], [s["name"] for s in differing]
