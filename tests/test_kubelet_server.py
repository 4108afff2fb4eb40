"""The kubelet API server: who gets in, and what `kubectl logs` and metrics scrapers get back.

Requests go over HTTPS to the agent's port with a client certificate, as an API server's node
proxy sends them (CN kube-apiserver-kubelet-client in system:masters). On a control plane this
session started, the client CA is its own, and `pods/log` through the real API server reaches
the node too.
"""

from __future__ import annotations

import datetime
import http.client
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubelet_sim.server.settings import ServerSettings
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import Cluster, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, container_status, make_pod, wait_status

COUNT = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.2; done"]


@dataclass
class Ca:
    cert: Path
    key: Path


@dataclass
class Node:
    agent: RunningAgent
    port: int
    tls: Path  # a directory of client certificates

    def get(self, path: str, cert: str | None = "admin", token: str | None = None) -> Any:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the node's serving certificate is self-signed
        if cert is not None:
            context.load_cert_chain(self.tls / f"{cert}.crt", self.tls / f"{cert}.key")
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        return urllib.request.urlopen(request, context=context, timeout=30)

    def text(self, path: str) -> str:
        with self.get(path) as response:
            return str(response.read().decode())


def _key_and_name(cn: str, org: str | None) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return ec.generate_private_key(ec.SECP256R1()), x509.Name(attrs)


def _write(path: Path, key: Any, cert: x509.Certificate) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _new_ca(directory: Path, name: str) -> Ca:
    key, subject = _key_and_name(name, None)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write(directory / name, key, cert)
    return Ca(directory / f"{name}.crt", directory / f"{name}.key")


def _client_cert(ca: Ca, path: Path, cn: str, org: str | None) -> None:
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key, subject = _key_and_name(cn, org)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    _write(path, key, cert)


@pytest.fixture
def node(cluster: Cluster, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Node]:
    """An agent serving the kubelet API on a free loopback port, trusting the control plane's
    client CA when this session started one (else a CA of the test's own)."""
    tls = tmp_path / "tls"
    tls.mkdir()
    env = cluster.session.env
    ca = Ca(*env.client_ca) if env is not None else _new_ca(tls, "client-ca")
    who = ("kube-apiserver-kubelet-client", "system:masters")
    _client_cert(ca, tls / "admin", *who)
    _client_cert(_new_ca(tls, "other-ca"), tls / "stranger", *who)
    settings = ServerSettings(address="127.0.0.1", port=0, client_ca_file=str(ca.cert))
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    server = running.agent.server
    assert server is not None
    yield Node(running, server.port, tls)
    if running.thread.is_alive():
        running.stop()


def test_the_node_advertises_the_port_it_serves(cluster: Cluster, node: Node) -> None:
    def port() -> int | None:
        got = cluster.core.read_node(cluster.node_name)
        return got.status.daemon_endpoints.kubelet_endpoint.port if got.status else None

    assert wait_for(port, 20, "the node's daemonEndpoints") == node.port
    assert node.text("/healthz") == "ok"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(node.tls / "admin.crt", node.tls / "admin.key")
    conn = http.client.HTTPSConnection("127.0.0.1", node.port, context=context, timeout=30)
    try:  # one connection: a HEAD answer must leave nothing behind for the next request
        conn.request("HEAD", "/healthz")
        head = conn.getresponse()
        assert (head.status, head.read()) == (200, b"")
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok"
    finally:
        conn.close()


def test_pods_and_metrics(cluster: Cluster, node: Node) -> None:
    make_pod(cluster, "counted")
    wait_status(cluster, "counted", lambda s: s.get("phase") == "Running", 30, "running")
    pods = json.loads(node.text("/pods"))
    assert pods["kind"] == "PodList"
    assert [p["metadata"]["name"] for p in pods["items"]] == ["counted"]
    metrics = node.text("/metrics")
    assert re.search(r"^kubelet_running_pods 1$", metrics, re.M), metrics
    assert re.search(r'^kubelet_running_containers\{container_state="running"\} 1$', metrics, re.M)
    assert "# TYPE kubelet_sim_docker_calls_total counter" in metrics
    started = re.search(r"^kubelet_pod_start_duration_seconds_count (\d+)$", metrics, re.M)
    assert started is not None, metrics
    assert int(started.group(1)) == 1, "one pod went from first seen to running"
    patches = r'^rest_client_requests_total\{code="200",host="[^"]+",method="PATCH"\} (\d+)$'
    assert int(re.search(patches, metrics, re.M).group(1)) >= 2, "status writes"  # type: ignore[union-attr]
    assert re.search(r'^kubelet_sim_watch_restarts_total\{resource="pods"\} \d+$', metrics, re.M)
    syncs = r'^kubelet_pod_worker_duration_seconds_bucket\{le="\+Inf",operation="sync"\} (\d+)$'
    assert int(re.search(syncs, metrics, re.M).group(1)) >= 2  # type: ignore[union-attr]
    ns = cluster.namespace
    resource = node.text("/metrics/resource")
    line = rf'^container_cpu_usage_seconds_total\{{container="c",namespace="{ns}",pod="counted"\}} '
    assert re.search(line + r"[0-9.e+-]+ \d{13}$", resource, re.M), resource
    working = re.search(
        rf'^pod_memory_working_set_bytes\{{namespace="{ns}",pod="counted"\}} (\d+) \d+$',
        resource,
        re.M,
    )
    assert working is not None, resource
    assert int(working.group(1)) > 0, "a running pod uses memory"
    assert re.search(r"^node_cpu_usage_seconds_total [0-9.e+]+ \d{13}$", resource, re.M)
    summary = json.loads(node.text("/stats/summary"))
    assert summary["node"]["nodeName"] == cluster.node_name
    (pod,) = summary["pods"]
    assert pod["podRef"]["name"] == "counted"
    assert [c["name"] for c in pod["containers"]] == ["c"]
    assert pod["containers"][0]["memory"]["workingSetBytes"] > 0
    assert pod["containers"][0]["cpu"]["usageCoreNanoSeconds"] >= 0


def test_container_logs_with_kubectl_options(cluster: Cluster, node: Node) -> None:
    make_pod(cluster, "talker", container(command=COUNT))
    wait_status(cluster, "talker", lambda s: s.get("phase") == "Running", 30, "running")
    base = f"/containerLogs/{cluster.namespace}/talker/c"
    wait_for(lambda: "line 5" in node.text(base), 20, "five lines")
    lines = node.text(base).splitlines()
    assert lines[:3] == ["line 1", "line 2", "line 3"]
    assert len(node.text(base + "?tailLines=2").splitlines()) == 2
    assert node.text(base + "?limitBytes=4") == "line"
    stamped = node.text(base + "?timestamps=true&tailLines=1").splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line \d+", stamped[0]), stamped
    since = node.text(base + "?sinceSeconds=1").splitlines()
    assert 1 <= len(since) < len(node.text(base).splitlines()), "only the last second"
    with node.get(base + "?follow=true&tailLines=1") as stream:
        first = stream.readline().decode().split()[1]
        later = [stream.readline().decode().split()[1] for _ in range(3)]
    assert [int(n) for n in later] == [int(first) + 1, int(first) + 2, int(first) + 3]
    with pytest.raises(urllib.error.HTTPError) as refused:
        node.get(base + "?previous=true")
    assert refused.value.code == 400
    assert refused.value.read().decode() == (
        'previous terminated container "c" in pod "talker" not found\n'
    )


def test_previous_logs_of_a_restarted_container(cluster: Cluster, node: Node) -> None:
    make_pod(cluster, "crash", container(command=["sh", "-c", "echo attempt; exit 3"]))
    wait_status(
        cluster, "crash", lambda s: container_status(s).get("restartCount", 0) >= 1, 60, "restart"
    )
    path = f"/containerLogs/{cluster.namespace}/crash/c?previous=true"
    assert node.text(path) == "attempt\n"


def test_refusals(cluster: Cluster, node: Node) -> None:
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        node.get("/healthz", cert=None)
    assert anonymous.value.code == 401
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        node.get("/healthz", cert="stranger")  # another CA: refused in the TLS handshake
    token = cluster.core.create_namespaced_service_account_token(
        "default", cluster.namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    with pytest.raises(urllib.error.HTTPError) as forbidden:
        node.get("/pods", cert=None, token=token)
    assert forbidden.value.code == 403
    assert (
        forbidden.value.read()
        .decode()
        .startswith(
            f"Forbidden (user=system:serviceaccount:{cluster.namespace}:default, verb=get,"
            " resource=nodes, subresource=proxy)"
        )
    )
    with pytest.raises(urllib.error.HTTPError) as unknown:
        node.get("/pods", cert=None, token="not-a-token")
    assert unknown.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as streaming:
        node.get(f"/exec/{cluster.namespace}/p/c?command=ls")
    assert streaming.value.code == 501, "exec is not served yet, and says so"


def test_pod_logs_through_the_api_server(cluster: Cluster, node: Node) -> None:
    """`kubectl logs`: the API server's pods/log reaches the node with its kubelet-client
    certificate, at the node's InternalIP and advertised port."""
    if cluster.session.env is None:
        pytest.skip("needs a control plane whose kubelet-client certificate the node trusts")
    make_pod(cluster, "via-api", container(command=["sh", "-c", "echo through; sleep 3600"]))
    wait_status(cluster, "via-api", lambda s: s.get("phase") == "Running", 30, "running")
    wait_for(
        lambda: cluster.core.read_namespaced_pod_log("via-api", cluster.namespace) == "through\n",
        30,
        "the log through pods/log",
    )
    summary = cluster.core.connect_get_node_proxy_with_path(cluster.node_name, "stats/summary")
    assert "via-api" in summary, "nodes/proxy reaches the Summary API too (kubectl top's path)"
