"""kind's shape, with real packets: the API server in a container on a Docker network the test
made (tests/kindlike.py), two virtual nodes n1 and n2 as `kubelet-sim` processes on this host
with `--docker-network <that network>` and a kubelet's credentials, their service proxies with
kube-proxy's role bound to `system:nodes`.

The EndpointSlices come from kube-controller-manager's EndpointSlice controller in the
container: every Service here has a selector, as on kind; no test writes a slice. Cluster DNS is
tests/dns_fixture.py's server inside the namespace of a `k8s-app: kube-dns` pod on n2, behind the
topology's kube-dns Service (10.96.0.10, the agents' `--cluster-dns`), as CoreDNS is on kind.

A packet goes to a ClusterIP only once the sender's namespace has its rule (else it would
follow the default route off this machine), and to a kind node's pod range only once the
route to it is in place. These tests need Docker and the real binaries but not the suite's
`cluster`: they run once, in the fake pass (tests/conftest.py deselects them in the real one).
"""

from __future__ import annotations

import queue
import re
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kubelet_sim.kube.rest import request_json
from tests.agent_process import AgentProcess
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.kindlike import (
    API_SERVICE_IP,
    CLUSTER_DOMAIN,
    DNS_IP,
    KindLike,
    agent,
    dump,
    kubectl,
    node_ready,
)
from tests.netpods import (
    SERVE,
    app_container,
    ask,
    in_netns,
    pod_ip,
    register_node,
    sandbox_pid,
)
from tests.pods import container, get_pod, make_pod

pytestmark = [pytest.mark.docker, pytest.mark.kindlike]

HTTP_PORT = 8080
# Serves its pod's name at / and, at /cgi-bin/who, who asked (busybox httpd's REMOTE_ADDR).
WHO = [
    "sh", "-c",
    "mkdir -p /www/cgi-bin && echo $HOSTNAME > /www/index.html"
    " && printf '%s\\n' '#!/bin/sh' 'echo Content-Type: text/plain' echo"
    " 'echo $HOSTNAME from $REMOTE_ADDR' > /www/cgi-bin/who && chmod +x /www/cgi-bin/who"
    f" && exec httpd -f -p {HTTP_PORT} -h /www",
]  # fmt: skip


@dataclass
class Nodes:
    n1: str
    n2: str
    agents: list[AgentProcess]


@pytest.fixture(scope="module")
def nodes(kindlike: KindLike) -> Iterator[Nodes]:
    """n1 and n2, each its own `kubelet-sim` process, both Ready."""
    suffix = secrets.token_hex(2)  # unique on this engine: other tests' nodes carry labels too
    n1, n2 = f"n1-{suffix}", f"n2-{suffix}"
    with agent(kindlike, n1) as first, agent(kindlike, n2) as second:
        for name, process in ((n1, first), (n2, second)):
            wait_for(
                lambda: node_ready(kindlike, name) or process.proc.poll() is not None,  # noqa: B023
                30,
                f"node {name} Ready",
            )
            assert process.proc.poll() is None, dump(kindlike, process)
        yield Nodes(n1, n2, [first, second])


@pytest.fixture(autouse=True)
def _diagnostics(
    kindlike: KindLike, nodes: Nodes, request: pytest.FixtureRequest
) -> Iterator[None]:
    """The components' and agents' last lines, after a test that failed."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed != failed:
        print(dump(kindlike, *nodes.nodes))


def _service(kindlike: KindLike, namespace: str, name: str) -> str:
    """A Service with a selector (`app: <name>`), port http 80 to 8080; its ClusterIP."""
    created = kindlike.post(f"/api/v1/namespaces/{namespace}/services", {
        "metadata": {"name": name},
        "spec": {"selector": {"app": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": HTTP_PORT}]},
    })  # fmt: skip
    return str(created["spec"]["clusterIP"])


def _endpoints(kindlike: KindLike, namespace: str, service: str) -> list[str]:
    """The ready addresses of the Service's EndpointSlices (the controller's)."""
    slices = request_json(
        kindlike.api,
        "GET",
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        f"?labelSelector=kubernetes.io/service-name={service}",
    )
    return [
        address
        for item in slices.get("items") or []
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint.get("addresses") or []
    ]


def _pid(cluster: ApiUnderTest, docker_env: DockerEnv, name: str) -> int:
    return sandbox_pid(docker_env, (get_pod(cluster, name) or {})["metadata"]["uid"])


def _nat(pid: int) -> str:
    return in_netns(pid, "iptables", "-w", "5", "-t", "nat", "-S")


def _sh(docker_env: DockerEnv, container_id: str, script: str) -> str:
    created = docker_env.client.api.exec_create(container_id, ["sh", "-c", script])
    return str(docker_env.client.api.exec_start(created["Id"]).decode())


def _http(address: str, port: int, path: str = "/") -> str:
    return f"printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {address} {port} 2>&1 | tail -n 1"


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout or []:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"{process.args!r} printed nothing in {timeout}s (exit {process.poll()})")


def _programmed(pid: int, *wanted: str) -> bool:
    nat = _nat(pid)
    return all(w in nat for w in wanted)


# --- 1. kubectl through the API server in the container ------------------------------------


def test_kubectl_logs_exec_and_port_forward_reach_a_pod_through_the_containers_api_server(
    kindlike: KindLike,
    nodes: Nodes,
    docker_session: DockerEnv,
) -> None:
    """The API server dials n1's kubelet API at n1's InternalIP (this host's address on the
    network) with its kubelet-client certificate; kubectl talks only to the API server."""
    ns = kindlike.namespace()
    base = [*kubectl(kindlike), "-n", ns]
    on1 = kindlike.cluster(ns, nodes.n1)
    script = f"echo hello from $HOSTNAME; {SERVE[-1]}"
    make_pod(on1, "talker", container(command=["sh", "-c", script]))
    pod_ip(on1, "talker")
    node = request_json(kindlike.api, "GET", f"/api/v1/nodes/{nodes.n1}")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == kindlike.gateway

    def run(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [*base, *args], check=False, input=stdin, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    assert "hello from talker" in run("logs", "talker")
    echoed = run("exec", "-i", "talker", "--", "sh", "-c", "read w; echo $w back from $HOSTNAME",
                 stdin="ping\n")  # fmt: skip
    assert echoed.strip() == "ping back from talker"

    forward = subprocess.Popen(
        [*base, "port-forward", "--address", "127.0.0.1", "pod/talker", f":{HTTP_PORT}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = _first_line(forward, 30)
        match = re.search(r"127\.0\.0\.1:(\d+) -> 8080", first)
        assert match, first
        with socket.create_connection(("127.0.0.1", int(match[1])), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        assert answer.decode().splitlines()[-1] == "talker", answer
    finally:
        forward.terminate()
        forward.wait(10)


# --- 2. Services across two virtual nodes, by ClusterIP and by name ------------------------


def test_pods_on_two_nodes_reach_each_others_services_by_cluster_ip_and_dns_name(
    kindlike: KindLike,
    nodes: Nodes,
    docker_session: DockerEnv,
) -> None:
    """client-n1 reaches web-on-n2 (its endpoint a pod on n2) and client-n2 web-on-n1, each by
    ClusterIP and by name through kube-dns (its pod on n2), and each the API server through
    the `kubernetes` Service (the endpoint the API server itself writes: its container)."""
    from tests.dns_fixture import serve_in_netns

    docker_env = docker_session
    ns = kindlike.namespace()
    on = {"n1": kindlike.cluster(ns, nodes.n1), "n2": kindlike.cluster(ns, nodes.n2)}
    dns_pods, dns = kindlike.cluster("kube-system", nodes.n2), f"dns-{ns}"
    make_pod(dns_pods, dns, labels={"k8s-app": "kube-dns"}, dnsPolicy="Default")
    for node, cluster in on.items():
        make_pod(
            cluster, f"web-on-{node}", container(command=SERVE), labels={"app": f"web-on-{node}"}
        )
        make_pod(cluster, f"client-{node}")
    cluster_ips = {node: _service(kindlike, ns, f"web-on-{node}") for node in on}
    records = {f"web-on-{node}.{ns}.svc.{CLUSTER_DOMAIN}": cluster_ips[node] for node in on}
    dns_ip = pod_ip(dns_pods, dns)
    servers = serve_in_netns(_pid(dns_pods, docker_env, dns), records)
    try:
        backends = {node: pod_ip(cluster, f"web-on-{node}") for node, cluster in on.items()}
        for node, cluster in on.items():
            pod_ip(cluster, f"client-{node}")
        slices = {("kube-system", "kube-dns"): [dns_ip]}
        slices |= {(ns, f"web-on-{node}"): [backends[node]] for node in on}
        for (namespace, service), ready in slices.items():
            wait_for(
                lambda: _endpoints(kindlike, namespace, service) == ready,  # noqa: B023
                20,
                f"{namespace}/{service}'s EndpointSlice from the controller",
            )

        for client, other in (("n1", "n2"), ("n2", "n1")):
            pid = _pid(on[client], docker_env, f"client-{client}")
            want = (f"{dns_ip}:53", f"{backends[other]}:{HTTP_PORT}", f"{kindlike.ip}:6443")
            wait_for(
                lambda: _programmed(pid, *want),  # noqa: B023
                10,
                f"DNAT to kube-dns, web-on-{other} and the API server in client-{client}",
            )
            app = app_container(on[client], docker_env, f"client-{client}")
            resolv = _sh(docker_env, app, "cat /etc/resolv.conf")
            assert f"nameserver {DNS_IP}" in resolv
            assert f"search {ns}.svc.{CLUSTER_DOMAIN}" in resolv
            # by ClusterIP
            assert ask(docker_env, app, f"{cluster_ips[other]}:80") == f"web-on-{other}"
            # by name: the kube-dns ClusterIP leads to the DNS pod on n2, its answer to the Service
            script = (
                f"ip=$(nslookup web-on-{other} | awk '/^Address/ {{a=$NF}} END {{print a}}');"
                f" echo ip=$ip; {_http('$ip', 80)}"
            )
            out = _sh(docker_env, app, script)
            assert f"ip={cluster_ips[other]}" in out, out
            assert out.strip().splitlines()[-1] == f"web-on-{other}", out
            # kubernetes.default: plain HTTP to the API server's TLS port gets Go's answer
            answer = _sh(docker_env, app, _http(API_SERVICE_IP, 443))
            assert "HTTP request to an HTTPS server" in answer, answer
    finally:
        for server in servers:
            server.stop()


# --- 3. A kind node reaches a Service's endpoints on n1 ------------------------------------


def test_a_kind_node_reaches_a_services_endpoints_on_a_virtual_node(
    kindlike: KindLike,
    nodes: Nodes,
    docker_session: DockerEnv,
) -> None:
    """A "kind node": a container on the network with a pod range of its own (one pod address
    on its loopback, as in tests/network/test_pod_routes.py) and a Node object saying so. Its pod
    asks the Service's ClusterIP; the kind node's kube-proxy part (one DNAT rule to the endpoint in
    the controller's EndpointSlice, written here) leads it to the pod on n1, which answers
    through the route n1's proxy programmed to that pod range via the kind node."""
    docker_env = docker_session
    ns = kindlike.namespace()
    on1 = kindlike.cluster(ns, nodes.n1)
    octet = 100 + secrets.randbelow(150)
    cidr, kind_pod_ip = f"10.244.{octet}.0/24", f"10.244.{octet}.5"
    kind_node = docker_env.client.containers.run(
        docker_env.busybox_image,
        ["sh", "-c", f"ip addr add {kind_pod_ip}/32 dev lo && exec sleep 3600"],
        detach=True, network=kindlike.network.name, cap_add=["NET_ADMIN"],
        labels=kindlike.labels, dns=["127.0.0.1"],
    )  # fmt: skip
    kind_node.reload()
    kind_ip = kind_node.attrs["NetworkSettings"]["Networks"][kindlike.network.name]["IPAddress"]
    kind_pid = int(kind_node.attrs["State"]["Pid"])
    worker = f"kind-worker-{ns}"
    register_node(kindlike.api, worker, cidr, kind_ip)
    try:
        make_pod(on1, "web", container(command=WHO), labels={"app": "web"})
        cluster_ip = _service(kindlike, ns, "web")
        web_ip = pod_ip(on1, "web")
        wait_for(lambda: _endpoints(kindlike, ns, "web") == [web_ip], 20, "web's EndpointSlice")
        web_pid = _pid(on1, docker_env, "web")
        wait_for(
            lambda: f"{cidr} via {kind_ip}" in in_netns(web_pid, "ip", "-4", "route"),
            10, f"n1's route to {worker}'s pod range in web's namespace",
        )  # fmt: skip

        # The kind node's kube-proxy and pod: the ClusterIP DNATed to the endpoint, asked
        # from the pod's address.
        in_netns(kind_pid, "iptables", "-w", "5", "-t", "nat", "-A", "OUTPUT",
                 "-d", f"{cluster_ip}/32", "-p", "tcp", "--dport", "80",
                 "-j", "DNAT", "--to-destination", f"{web_ip}:{HTTP_PORT}")  # fmt: skip
        in_netns(kind_pid, "ip", "route", "add", f"{cluster_ip}/32", "dev", "eth0",
                 "src", kind_pod_ip)  # fmt: skip
        assert f"-d {cluster_ip}/32" in in_netns(kind_pid, "iptables", "-t", "nat", "-S", "OUTPUT")
        answer = _sh(docker_env, str(kind_node.id), _http(cluster_ip, 80, "/cgi-bin/who")).strip()
        print(f"kind pod {kind_pod_ip} -> {cluster_ip}:80 -> web: {answer!r}")
        assert answer.startswith("web from "), answer
        assert kind_pod_ip in answer, answer  # the pod range's address, answered via the route
    finally:
        kind_node.remove(force=True)
        request_json(kindlike.api, "DELETE", f"/api/v1/nodes/{worker}")
