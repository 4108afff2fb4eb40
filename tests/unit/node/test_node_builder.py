"""The node builder without Docker or an API server: a set of nodes is made (nothing runs), and
what each node shares with the process, or has of its own, is read off the parts.

A fake Docker client stands in for the engine (tests/unit/runtime/test_engine_split.py); the API
server named in the kubeconfig is never called while building.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim.assembly.nodeset import NodeIdentity, NodeSet, NodeSetSettings
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.server.settings import ServerSettings
from tests.unit.runtime.test_engine_split import FakeClient

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return str(path)


def _built(tmp_path: Path, kubeconfig: str, *identities: NodeIdentity) -> Iterator[NodeSet]:
    engine = DockerEngine(FakeClient(), network="bridge")  # type: ignore[arg-type]
    settings = NodeSetSettings(
        nodes=identities,
        root_dir=tmp_path / "root",
        kubeconfig=kubeconfig,
        server=ServerSettings(address="127.0.0.1", port=0),
        service_proxy=False,
    )
    nodes = NodeSet(settings, engine)
    try:
        yield nodes
    finally:
        nodes.close()


def _node(name: str, kubeconfig: str | None = None) -> NodeIdentity:
    return NodeIdentity(NodeSettings(node_name=name, node_ip="127.0.0.1"), kubeconfig=kubeconfig)


def test_every_node_shares_the_processs_engine_timers_events_and_listener(
    tmp_path: Path, kubeconfig: str
) -> None:
    for nodes in _built(tmp_path, kubeconfig, _node("a"), _node("b"), _node("c")):
        process = nodes.process
        assert process.engine is nodes.engine
        for node in nodes.nodes:
            assert node.runtime.engine is nodes.engine
            assert node.lifecycle.timers is process.timers
            assert node.watcher.events is process.container_events
            assert node.server is not None
            assert node.server.listener is process.listener
        ports = [n.server.port for n in nodes.nodes if n.server is not None]
        assert len(set(ports)) == 3, "each node its own port on it"
        assert 0 not in ports
        assert [n.settings.kubelet_port for n in nodes.nodes] == ports, "the Node says its port"


def test_nodes_on_the_sets_credentials_share_watches_and_one_with_its_own_has_its_own(
    tmp_path: Path, kubeconfig: str
) -> None:
    own = _node("own", kubeconfig)
    for nodes in _built(tmp_path, kubeconfig, _node("a"), _node("b"), own):
        a, b, c = nodes.nodes
        assert a.watches is b.watches
        assert a.watches.node is None, "every node's pods, fanned out by name"
        assert c.watches is not a.watches
        assert c.watches.node == "own", "its own pods and Node, by field selector"
        assert {tuple(s.names) for s in nodes.scopes} == {("a", "b"), ("own",)}


def test_the_one_node_of_a_process_watches_as_the_kubelet_does(
    tmp_path: Path, kubeconfig: str
) -> None:
    for nodes in _built(tmp_path, kubeconfig, _node("solo")):
        (node,) = nodes.nodes
        assert node.watches.node == "solo"
        assert nodes.process.container_events.label.endswith("=solo"), "its containers only"


def test_the_pod_index_is_below_the_workers_and_the_syncer_gets_its_parts(
    tmp_path: Path, kubeconfig: str
) -> None:
    for nodes in _built(tmp_path, kubeconfig, _node("a"), _node("b")):
        a, b = nodes.nodes
        assert a.syncer.pods is a.pods
        assert a.pods is not b.pods
        assert a.workers.syncer is a.syncer
        assert a.syncer.starter.stopper is a.syncer.stopper, "one stopper for the pod's parts"
        assert a.gc.stopper is a.syncer.stopper
        assert a.syncer.runtime is a.runtime
        assert a.runtime is not b.runtime
        assert a.runtime.root_dir == tmp_path / "root" / "a"
