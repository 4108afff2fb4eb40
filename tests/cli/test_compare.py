"""`kubelet-sim compare` end to end: two kubelet-sim nodes of one cluster compared (each the
other's reference), the clean-up after it and after Ctrl-C, and, once the rig has one, a
comparison against a real kubelet's node (the `reference_node` fixture)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.kube.rest import ApiError, request_json
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv

pytestmark = pytest.mark.docker

MINE = """
apiVersion: v1
kind: Pod
metadata:
  name: mine-exits-1
  annotations:
    compare.kubelet-sim.io/observe-seconds: "8"
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: "{image}"
    command: [sh, -c, "exit 1"]
"""


@dataclasses.dataclass
class TwoNodes:
    ours: str
    reference: str
    agents: list[RunningAgent]


def _node_exists(cluster: ApiUnderTest, name: str) -> bool:
    try:
        request_json(cluster.api, "GET", f"/api/v1/nodes/{name}")
    except ApiError:
        return False
    return True


@pytest.fixture
def two_nodes(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[TwoNodes]:
    """Two agents on the test's cluster: the test's node (ours) and `<node>-ref`."""
    other = dataclasses.replace(
        cluster, node_name=f"{cluster.node_name}-ref", _node_kubeconfig=None
    )
    agents: list[RunningAgent] = []
    try:
        for i, pinned in enumerate((cluster, other)):
            agents.append(start_agent(pinned, docker_env, tmp_path / f"node{i}" / "root"))
        for pinned in (cluster, other):
            name = pinned.node_name
            wait_for(lambda n=name: _node_exists(cluster, n), 20, f"Node {name} registered")
        yield TwoNodes(cluster.node_name, other.node_name, agents)
    finally:
        for running in agents:
            if running.thread.is_alive():
                running.stop()
        docker_env.remove_labelled(f"{cri.LABEL_NODE}={other.node_name}")
        try:
            request_json(cluster.api, "DELETE", f"/api/v1/nodes/{other.node_name}")
        except ApiError as exc:
            if not exc.not_found:
                raise


class Command:
    """`kubelet-sim compare …` as a user runs it, its stderr read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet_sim", "compare", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        lines.extend(stream)

    def finish(self, timeout: float) -> tuple[int, str]:
        try:
            self.proc.wait(timeout * deadline_scale())
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"compare did not end: {''.join(self.err)[-2000:]}")
        for reader in self._readers:
            reader.join(5)
        return self.proc.returncode, "".join(self.out)

    @property
    def namespace(self) -> str:
        line = next(line for line in self.err if line.startswith("compare: namespace "))
        return line.split()[2].rstrip(";")


def _namespace_gone_or_going(cluster: ApiUnderTest, namespace: str) -> bool:
    try:
        found = request_json(cluster.api, "GET", f"/api/v1/namespaces/{namespace}")
    except ApiError as exc:
        return exc.not_found
    return bool((found.get("metadata") or {}).get("deletionTimestamp"))


def _pods_left(cluster: ApiUnderTest, namespace: str) -> list[str]:
    body = request_json(cluster.api, "GET", f"/api/v1/namespaces/{namespace}/pods")
    return [
        item["metadata"]["name"]
        for item in body.get("items") or []
        if not item["metadata"].get("deletionTimestamp")
    ]


def test_two_kubelet_sim_nodes_agree_and_the_namespace_is_removed(
    cluster: ApiUnderTest, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(MINE)
    command = Command(
        "--node", two_nodes.ours, "--reference-node", two_nodes.reference,
        "--kubeconfig", cluster.kubeconfig, "--output", "json",
        "--scenario", "exit-0-never", "--scenario", "plain-delete", "--scenario", str(mine),
        # Long enough for the deletion to finish on a slow machine (CI's is several times
        # slower than a developer's), no longer: observation is time spent, not a deadline.
        "--observe", str(12 * min(deadline_scale(), 3.0)),
    )  # fmt: skip
    code, out = command.finish(120)
    assert code == 0, "".join(command.err)
    report: dict[str, Any] = json.loads(out)
    assert report["total"] == 3
    assert (report["node"], report["reference_node"]) == (two_nodes.ours, two_nodes.reference)
    by_name = {entry["name"]: entry for entry in report["scenarios"]}
    assert list(by_name) == ["exit-0-never", "plain-delete", "mine-exits-1"]
    why = json.dumps(report, indent=1)
    succeeded = by_name["exit-0-never"]
    assert succeeded["settled"][0]["phase"] == "Succeeded", why
    assert succeeded["settled"][0]["c.main"] == "terminated:Completed(0)", why
    assert by_name["mine-exits-1"]["settled"][0]["phase"] == "Failed", why
    # Deleted once Running (our node finished the deletion): gone from the API on both.
    assert by_name["plain-delete"]["settled"] == [{"gone": "true"}], why
    assert "Normal Killing" in by_name["plain-delete"]["events"]["ours"][0], why
    for entry in report["scenarios"]:  # the same agent on both sides ends alike
        ends = [
            {k: state.get(k) for k in ("phase", "gone", "c.main", "c.main.restarts")}
            for state in (entry["settled"][0], entry["reference_settled"][0])
        ]
        assert ends[0] == ends[1], why
        assert entry["sequences"]["ours"][0], why
    namespace = command.namespace
    wait_for(lambda: _namespace_gone_or_going(cluster, namespace), 10, "the namespace deleted")


def test_ctrl_c_removes_the_pods_and_the_namespace(
    cluster: ApiUnderTest, two_nodes: TwoNodes
) -> None:
    command = Command(
        "--node", two_nodes.ours, "--reference-node", two_nodes.reference,
        "--kubeconfig", cluster.kubeconfig, "--scenario", "readiness-fails", "--observe", "600",
    )  # fmt: skip
    wait_for(lambda: any("pods created" in line for line in command.err), 30, "the pods created")
    namespace = command.namespace
    wait_for(lambda: len(_pods_left(cluster, namespace)) == 2, 10, "both pods in the API")
    command.proc.send_signal(signal.SIGINT)
    code, out = command.finish(30)
    assert code == 130, "".join(command.err)
    assert out == ""
    assert _pods_left(cluster, namespace) == []
    assert _namespace_gone_or_going(cluster, namespace)


def test_a_bad_scenario_or_node_is_refused_with_one_line(
    cluster: ApiUnderTest, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: p}\nspec: {}\n")
    code, _ = Command(
        "--node", "a", "--reference-node", "b", "--kubeconfig", cluster.kubeconfig,
        "--scenario", str(bad),
    ).finish(30)  # fmt: skip
    assert code == 2
    malformed = tmp_path / "malformed.yaml"  # annotations that are a list: no traceback
    malformed.write_text("kind: Pod\nmetadata: {name: p, annotations: [x]}\nspec: {}\n")
    told = Command(
        "--node", "a", "--reference-node", "b", "--kubeconfig", cluster.kubeconfig,
        "--scenario", str(malformed),
    )  # fmt: skip
    code, _ = told.finish(30)
    assert code == 2
    assert [line for line in told.err if line.strip()] == [
        f"kubelet-sim: error: {malformed}: metadata.annotations must map names to strings\n"
    ]
    missing = Command(
        "--node", f"{cluster.node_name}-none", "--reference-node", "b",
        "--kubeconfig", cluster.kubeconfig, "--scenario", "exit-0-never",
    )  # fmt: skip
    code, _ = missing.finish(30)
    assert code == 1
    assert f"node {cluster.node_name}-none not found" in "".join(missing.err)
