"""Several nodes in one process share one kubelet API listener (one selector thread, one pool):
each node keeps its own port, its own serving certificate and its own pods; closing one node's
socket leaves the others serving; the API server's `kubectl logs` reaches the node that runs
the pod through the port its Node advertises."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from kubernetes.client.exceptions import ApiException

from kubelet_sim import cri
from kubelet_sim.assembly.nodeset import NodeIdentity, NodeSet, NodeSetSettings
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.podworkers.settings import PodSettings
from kubelet_sim.server.certs import self_signed
from kubelet_sim.server.connections import Endpoint
from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.http import _send
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.routes import Reply
from kubelet_sim.server.settings import ConnectionLimits, ServerSettings
from kubelet_sim.server.tls import ServingTls
from kubelet_sim.server.tokens import TokenGuard
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.kubelet_api import api_server_as_kubelet_client, client_certificates
from tests.pods import container, make_pod, running_ready, wait_status


@dataclasses.dataclass
class Nodes:
    names: list[str]
    set: NodeSet
    tls: Path

    def port(self, name: str) -> int:
        server = self.set.nodes[self.names.index(name)].server
        assert server is not None
        return server.port

    def get(self, name: str, path: str) -> tuple[int, bytes]:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        context.load_cert_chain(self.tls / "admin.crt", self.tls / "admin.key")
        url = f"https://127.0.0.1:{self.port(name)}{path}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()


def _listener_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "kubelet-server")


def _serving_names(port: int) -> set[str]:
    """The DNS names in the SAN of the certificate the port serves."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    san = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    return set(san.value.get_values_for_type(x509.DNSName))


def test_one_listener_routes_each_port_to_its_own_endpoint(tmp_path: Path) -> None:
    """Without Docker or an API server: one selector thread for three ports, each answered by
    its own handler with its own certificate; closing one leaves the others; stop ends it."""
    log = get_logger("tests.shared_listener")
    listener = Listener(ConnectionLimits(workers=2), log, tokens=TokenGuard())

    def endpoint(name: str) -> Endpoint:
        make = functools.partial(self_signed, tmp_path / name, name, [name], ["127.0.0.1"])
        tls = ServingTls(make, None)

        def serve(exchange: Exchange) -> None:
            _send(exchange, Reply.text(200, name))

        return listener.bind("127.0.0.1", 0, tls.context, serve, log)

    before = _listener_threads()
    endpoints = {name: endpoint(name) for name in ("a", "b", "c")}
    assert not (tmp_path / "a").exists(), "the certificate is made at the first connection"
    listener.start(Supervisor())
    for ep in endpoints.values():
        listener.open(ep)
    try:
        assert _listener_threads() == before + 1
        for name, ep in endpoints.items():
            assert _answer(ep.port) == name
            assert name in _serving_names(ep.port)
        listener.close(endpoints["a"])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", endpoints["a"].port), timeout=5).close()
        assert [_answer(endpoints[n].port) for n in ("b", "c")] == ["b", "c"]
    finally:
        listener.stop()
    assert _listener_threads() == before


def _answer(port: int) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}/"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        return str(response.read().decode())


@pytest.fixture
def nodes(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Nodes]:
    names = [f"{cluster.node_name}-{suffix}" for suffix in ("a", "b", "c")]
    tls = tmp_path / "tls"
    server = ServerSettings(
        address="127.0.0.1", port=0, client_ca_file=str(client_certificates(cluster, tls))
    )
    engine = engine_for()
    node_set = NodeSet(
        NodeSetSettings(
            nodes=tuple(
                NodeIdentity(NodeSettings(node_name=n, node_ip="127.0.0.1")) for n in names
            ),
            root_dir=tmp_path / "root",
            pods=PodSettings(pause_image=docker_env.pause_image),
            server=server,
            kubeconfig=cluster.kubeconfig,  # admin: node credentials name one node
            service_proxy=False,
        ),
        engine,
    )
    stop = threading.Event()
    before = _listener_threads()
    node_set.start(stop)
    try:
        with api_server_as_kubelet_client(cluster, tls):
            for agent in node_set.nodes:
                wait_for(agent.workers.started.is_set, 30, f"{agent.node_name} running")
            assert _listener_threads() == before + 1, "one listener thread for all the nodes"
            yield Nodes(names, node_set, tls)
    finally:
        stop.set()
        node_set.wait(stop)
        node_set.close()
        engine.close()
        for name in names:
            docker_env.remove_labelled(f"{cri.LABEL_NODE}={name}")
            with contextlib.suppress(ApiException):
                cluster.core.delete_node(name)
    assert _listener_threads() == before, "the set's listener stopped with it"


def _pods(nodes: Nodes, name: str) -> set[str]:
    status, body = nodes.get(name, "/pods")
    assert status == 200, body
    return {p["metadata"]["name"] for p in json.loads(body)["items"]}


@pytest.mark.docker
@pytest.mark.through_api_server
def test_each_node_serves_its_own_certificate_and_pods(cluster: ApiUnderTest, nodes: Nodes) -> None:
    a, b, c = nodes.names
    ports = {nodes.port(n) for n in nodes.names}
    assert len(ports) == 3, "a port per node"
    for name in nodes.names:
        assert name in _serving_names(nodes.port(name)), f"{name}'s own certificate"
        advertised = cluster.core.read_node(name).status.daemon_endpoints.kubelet_endpoint.port
        assert advertised == nodes.port(name)
    make_pod(dataclasses.replace(cluster, node_name=b), "on-b", container())
    wait_status(cluster, "on-b", running_ready, 60, "Running and Ready")
    wait_for(lambda: "on-b" in _pods(nodes, b), 20, "on-b in b's /pods")
    assert "on-b" not in _pods(nodes, a) | _pods(nodes, c)
    logs = f"/containerLogs/{cluster.namespace}/on-b/c"
    assert nodes.get(b, logs)[0] == 200
    assert nodes.get(a, logs)[0] == 404, "another node's pod is not found here"
    # kubectl logs: the API server dials the port b's Node advertises
    cluster.core.read_namespaced_pod_log("on-b", cluster.namespace)


@pytest.mark.docker
def test_closing_one_nodes_socket_leaves_the_others_serving(nodes: Nodes) -> None:
    a, b, c = nodes.names
    port_a = nodes.port(a)
    server_a = nodes.set.nodes[0].server
    assert server_a is not None
    server_a.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port_a), timeout=5).close()
    for name in (b, c):
        assert nodes.get(name, "/healthz") == (200, b"ok")
    assert _listener_threads() >= 1
