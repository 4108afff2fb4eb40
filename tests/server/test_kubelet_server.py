"""The kubelet API server: who gets in, and what `kubectl logs` and metrics scrapers get back.

Requests go over HTTPS to the agent's port with a client certificate, as an API server's node
proxy sends them (CN kube-apiserver-kubelet-client in system:masters). On a control plane this
session started, the client CA is its own, and `pods/log` through the real API server reaches
the node too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from kubelet_sim.kube.reviews import Decision, User
from kubelet_sim.server.auth import Gate
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.server.tokens import TokenGuard
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.kubelet_api import Node, node
from tests.pods import container, container_status, make_pod, wait_status

__all__ = ["node"]  # the fixture

COUNT = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.2; done"]


def test_the_node_advertises_the_port_it_serves(cluster: ApiUnderTest, node: Node) -> None:
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


def test_pods_and_metrics(cluster: ApiUnderTest, node: Node) -> None:
    ns = cluster.namespace
    make_pod(cluster, "counted")
    wait_status(cluster, "counted", lambda s: s.get("phase") == "Running", 30, "running")
    pods = json.loads(node.text("/pods"))
    assert pods["kind"] == "PodList"
    # A cluster's DaemonSets that tolerate every taint (kind's kindnet) bind pods here too.
    ours = [p["metadata"]["name"] for p in pods["items"] if p["metadata"]["namespace"] == ns]
    assert ours == ["counted"]
    metrics = node.text("/metrics")
    assert re.search(r"^kubelet_running_pods 1$", metrics, re.M), metrics
    assert re.search(r'^kubelet_running_containers\{container_state="running"\} 1$', metrics, re.M)
    assert "# TYPE kubelet_sim_docker_calls_total counter" in metrics
    full = r"^kubelet_sim_gc_full_collection_seconds_count (\d+)$"  # the process's, so far
    assert re.search(full, metrics, re.M), metrics
    started = re.search(r"^kubelet_pod_start_duration_seconds_count (\d+)$", metrics, re.M)
    assert started is not None, metrics
    assert int(started.group(1)) == 1, "one pod went from first seen to running"
    patches = r'^rest_client_requests_total\{code="200",host="[^"]+",method="PATCH"\} (\d+)$'
    assert int(re.search(patches, metrics, re.M).group(1)) >= 2, "status writes"  # type: ignore[union-attr]
    assert re.search(r'^kubelet_sim_watch_restarts_total\{resource="pods"\} \d+$', metrics, re.M)
    syncs = r'^kubelet_pod_worker_duration_seconds_bucket\{le="\+Inf",operation="sync"\} (\d+)$'
    assert int(re.search(syncs, metrics, re.M).group(1)) >= 2  # type: ignore[union-attr]
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


def test_container_logs_with_kubectl_options(cluster: ApiUnderTest, node: Node) -> None:
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
    # Ten lines at least 0.2 s apart span 1.8 s: the first is older than a second.
    wait_for(lambda: "line 10" in node.text(base), 20, "ten lines")
    since = node.text(base + "?sinceSeconds=1").splitlines()
    assert since, "the last second has lines"
    assert "line 1" not in since, "only the last second"
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


def test_previous_logs_of_a_restarted_container(cluster: ApiUnderTest, node: Node) -> None:
    make_pod(cluster, "crash", container(command=["sh", "-c", "echo attempt; exit 3"]))
    wait_status(
        cluster, "crash", lambda s: container_status(s).get("restartCount", 0) >= 1, 60, "restart"
    )
    path = f"/containerLogs/{cluster.namespace}/crash/c?previous=true"
    assert node.text(path) == "attempt\n"


def test_refusals(cluster: ApiUnderTest, node: Node) -> None:
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        node.get("/healthz", cert=None)
    assert anonymous.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as stranger:
        node.get("/healthz", cert="stranger")  # another CA: no credential, as on a kubelet
    assert stranger.value.code == 401
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


@pytest.mark.through_api_server
def test_pod_logs_through_the_api_server(cluster: ApiUnderTest, node: Node) -> None:
    """`kubectl logs`: the API server's pods/log reaches the node with its kubelet-client
    certificate, at the node's InternalIP and advertised port (the fake proxies it the same
    way)."""
    make_pod(cluster, "via-api", container(command=["sh", "-c", "echo through; sleep 3600"]))
    wait_status(cluster, "via-api", lambda s: s.get("phase") == "Running", 30, "running")
    wait_for(
        lambda: cluster.core.read_namespaced_pod_log("via-api", cluster.namespace) == "through\n",
        30,
        "the log through pods/log",
    )
    if cluster.is_fake:
        return  # the fake has pods/log but no nodes/proxy
    try:
        summary = cluster.core.connect_get_node_proxy_with_path(cluster.node_name, "stats/summary")
    except ApiException as exc:
        if exc.status == 400 and "address not allowed" in str(exc.body):
            pytest.skip(
                "nodes/proxy: this API server (v1.34) proxies only to addresses it deems"
                " proxyable (proxyutil.IsProxyableIP: not loopback), and the suite's nodes are"
                " on loopback; pods/log above reached the node"
            )
        raise
    assert "via-api" in summary, "nodes/proxy reaches the Summary API too (kubectl top's path)"


def test_a_failed_tls_handshake_is_one_line(node: Node, capfd: pytest.CaptureFixture[str]) -> None:
    """A plain-TCP client that sends garbage fails the handshake: one line in the node's log,
    no traceback (socketserver's handle_error printed one to stderr); the port serves on."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        with socket.create_connection(("127.0.0.1", node.port), timeout=10) as plain:
            plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff garbage\r\n")
            with contextlib.suppress(OSError):
                plain.recv(1024)  # the server ends the connection
        said = wait_for(
            lambda: [e for e in logs if e["event"] == "TLS handshake error"], 10, "the line"
        )
    assert len(said) == 1, said
    assert said[0]["client"].startswith("127.0.0.1:")
    assert "\n" not in said[0]["error"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert node.text("/healthz") == "ok"


def test_a_rejected_token_is_401_even_with_anonymous_on(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """--anonymous-auth lets in a request without a credential (as system:anonymous, then
    authorized like anyone); a bearer token the API server rejects is 401, never anonymous."""
    settings = ServerSettings(address="127.0.0.1", port=0, anonymous_auth=True)
    running = start_agent(cluster, docker_env, tmp_path / "root", server=settings)
    try:
        server = running.agent.server
        assert server is not None
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

        def status(token: str | None) -> tuple[int, str]:
            request = urllib.request.Request(f"https://127.0.0.1:{server.port}/pods")
            if token is not None:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                    return answer.status, ""
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()

        code, text = status(None)
        assert code != 401, "no credential: anonymous"
        if code == 403:
            assert "user=system:anonymous" in text
        assert status("not-a-token")[0] == 401, "a rejected token is never anonymous"
    finally:
        running.stop()


class _Reviews:
    """A TokenReview/SubjectAccessReview stand-in: one good token; everyone authorized."""

    def authenticate(self, token: str) -> User | None:
        return User("someone", ("system:authenticated",)) if token == "good" else None

    def authorize(
        self, user: User, verb: str, resource: str, subresource: str, name: str
    ) -> Decision:
        return Decision(allowed=True)


@pytest.mark.parametrize(
    ("authorization", "anonymous", "answer"),
    [
        ("", True, None),  # no credential: anonymous
        ("Bearer ", True, None),  # an empty token is no credential (bearertoken.go)
        ("Basic dXNlcjpwdw==", True, None),  # not a bearer token: not presented
        ("Bearer bad", True, 401),  # a presented token that fails is never anonymous
        ("bearer bad", True, 401),
        ("Bearer good", True, None),
        ("", False, 401),
        ("Bearer bad", False, 401),
    ],
)
def test_the_gate_never_turns_a_rejected_token_anonymous(
    authorization: str, anonymous: bool, answer: int | None
) -> None:
    gate = Gate(_Reviews(), "n1", anonymous=anonymous, tokens=TokenGuard())
    refused = gate.check("GET", "/pods", None, authorization)
    assert (refused[0] if refused else None) == answer
