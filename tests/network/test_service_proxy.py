"""Services from the virtual node's pods, with real packets between real containers.

Backends serve their own name over HTTP; a client pod on the node asks the Service's ClusterIP
(`docker exec … wget`, inside the client's own namespace). The Service has no selector and the
test writes its EndpointSlice, so both API servers see the same objects (the real one has an
EndpointSlice controller, the fake has none). The proxy runs with the test's admin
credentials, as kube-proxy runs with its own.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.rest import request_json
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.netpods import SERVE, app_container, ask, in_netns, pod_ip, sandbox_pid
from tests.pods import container, get_pod, make_pod

pytestmark = pytest.mark.docker


def _slice_path(cluster: ApiUnderTest, name: str = "") -> str:
    base = f"/apis/discovery.k8s.io/v1/namespaces/{cluster.namespace}/endpointslices"
    return f"{base}/{name}" if name else base


def _endpoint_slice(service: str, endpoints: dict[str, bool]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-1", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints.items()
        ],
    }  # fmt: skip


@pytest.fixture
def proxied(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Any:
    running = start_agent(cluster, docker_env, tmp_path / "root", service_proxy=True)
    yield running
    running.stop()


def test_a_pod_reaches_a_service_load_balanced_and_follows_its_endpoints(
    cluster: ApiUnderTest, docker_env: DockerEnv, proxied: RunningAgent
) -> None:
    for name in ("b1", "b2"):
        make_pod(cluster, name, container(command=SERVE))
    make_pod(cluster, "client")
    ips = {name: pod_ip(cluster, name) for name in ("b1", "b2")}
    pod_ip(cluster, "client")
    cluster.core.create_namespaced_service(
        cluster.namespace,
        {"metadata": {"name": "web"},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
    )  # fmt: skip
    cluster_ip = cluster.core.read_namespaced_service("web", cluster.namespace).spec.cluster_ip
    url = f"{cluster_ip}:80"
    client = app_container(cluster, docker_env, "client")
    pid = sandbox_pid(docker_env, (get_pod(cluster, "client") or {})["metadata"]["uid"])

    def rules() -> str:
        nat = in_netns(pid, "iptables", "-w", "5", "-t", "nat", "-S")
        return nat + in_netns(pid, "iptables", "-w", "5", "-t", "filter", "-S")

    # A packet is sent only once its rule is in place: without one it would follow the
    # pod's default route off this machine.
    wait_for(lambda: f"-d {cluster_ip}/32" in rules(), 5, "the Service's REJECT")
    began = time.monotonic()
    assert "refused" in ask(docker_env, client, url).lower()
    assert time.monotonic() - began < 2.5, "refused at once, not a timeout"

    body = _endpoint_slice("web", {ips["b1"]: True, ips["b2"]: True})
    request_json(cluster.api, "POST", _slice_path(cluster), body=body)
    wait_for(lambda: rules().count("-j DNAT") == 2, 5, "DNAT to both backends")
    seen: set[str] = set()

    def both_answer() -> bool:
        seen.add(ask(docker_env, client, url))
        return {"b1", "b2"} <= seen

    wait_for(both_answer, 20, f"both backends behind {url} (seen {seen})")

    # b2 turns unready: within a second only b1 answers.
    body["endpoints"][1]["conditions"]["ready"] = False
    current = request_json(cluster.api, "GET", _slice_path(cluster, "web-1"))
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    changed = time.monotonic()
    request_json(cluster.api, "PUT", _slice_path(cluster, "web-1"), body=body)
    wait_for(lambda: ips["b2"] not in rules(), 1.0, "b2's DNAT gone within a second")
    took = time.monotonic() - changed
    assert all(ask(docker_env, client, url) == "b1" for _ in range(6))

    # The Service deleted: its rules go (no packet is sent to a ClusterIP without a rule).
    request_json(cluster.api, "DELETE", f"/api/v1/namespaces/{cluster.namespace}/services/web")
    wait_for(lambda: cluster_ip not in rules(), 1.0, "the deleted Service's rules gone")
    print(f"b2 unready -> rules changed in {took:.3f}s")


def test_rules_live_in_the_pod_namespace_once_and_never_on_the_host(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    host_rules_before = _host_ksim_rules()
    first = start_agent(cluster, docker_env, tmp_path / "root", service_proxy=True)
    try:
        make_pod(cluster, "client")
        pod_ip(cluster, "client")
    finally:
        first.stop()
    uid = (get_pod(cluster, "client") or {})["metadata"]["uid"]
    pid = sandbox_pid(docker_env, uid)
    again = start_agent(cluster, docker_env, tmp_path / "root", service_proxy=True)
    try:
        cluster.core.create_namespaced_service(
            cluster.namespace,
            {"metadata": {"name": "later"}, "spec": {"ports": [{"port": 81}]}},
        )  # the restarted agent programs the running pod again

        def rejected_once() -> str | None:
            filt = in_netns(pid, "iptables", "-w", "5", "-t", "filter", "-S")
            return filt if "--dport 81" in filt else None

        filt = wait_for(rejected_once, 10, "the new Service's REJECT in the pod's namespace")
        nat = in_netns(pid, "iptables", "-w", "5", "-t", "nat", "-S", "OUTPUT")
        assert nat.count("-j KSIM-SERVICES") == 1, nat
        assert filt.count("-A OUTPUT -j KSIM-SERVICES") == 1, filt
    finally:
        again.stop()
    assert _host_ksim_rules() == host_rules_before == ""


def _host_ksim_rules() -> str:
    """Our chains and routes in the host's own namespace: there must never be any."""
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "proto", "250"], capture_output=True, text=True, check=True
    ).stdout
    return "".join(line + "\n" for line in saved.splitlines() if "KSIM" in line) + routes


def test_cluster_dns_through_its_service_then_a_service_by_name(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """kind's shape: ClusterFirst pods name the kube-dns Service's ClusterIP as their only
    nameserver; the proxy leads that ClusterIP to the DNS pod; the name leads to a Service."""
    from tests.dns_fixture import serve_in_netns

    ns = cluster.namespace
    dns_ports = [{"name": "dns", "port": 53, "protocol": "UDP"},
                 {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]  # fmt: skip
    cluster.core.create_namespaced_service(
        ns, {"metadata": {"name": "kube-dns"}, "spec": {"ports": dns_ports}}
    )
    cluster.core.create_namespaced_service(
        ns, {"metadata": {"name": "my-svc"}, "spec": {"ports": [{"name": "http", "port": 80}]}}
    )
    dns_ip = cluster.core.read_namespaced_service("kube-dns", ns).spec.cluster_ip
    svc_ip = cluster.core.read_namespaced_service("my-svc", ns).spec.cluster_ip
    from kubelet_sim.node.resolv import node_dns

    running = start_agent(
        cluster, docker_env, tmp_path / "root", service_proxy=True,
        dns=node_dns([dns_ip], "cluster.local", ""),
    )  # fmt: skip
    servers = []
    try:
        make_pod(cluster, "dns", dnsPolicy="Default")
        make_pod(cluster, "b1", container(command=SERVE), dnsPolicy="Default")
        make_pod(cluster, "client")
        ips = {name: pod_ip(cluster, name) for name in ("dns", "b1", "client")}
        dns_pid = sandbox_pid(docker_env, (get_pod(cluster, "dns") or {})["metadata"]["uid"])
        servers = serve_in_netns(dns_pid, {f"my-svc.{ns}.svc.cluster.local": svc_ip})
        dns_slice = _endpoint_slice("kube-dns", {ips["dns"]: True})
        dns_slice["ports"] = [{"name": "dns", "port": 53, "protocol": "UDP"},
                              {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]  # fmt: skip
        request_json(cluster.api, "POST", _slice_path(cluster), body=dns_slice)
        request_json(cluster.api, "POST", _slice_path(cluster),
                     body=_endpoint_slice("my-svc", {ips["b1"]: True}))  # fmt: skip
        client_pid = sandbox_pid(docker_env, (get_pod(cluster, "client") or {})["metadata"]["uid"])

        def programmed() -> bool:
            nat = in_netns(client_pid, "iptables", "-w", "5", "-t", "nat", "-S")
            return f"{ips['dns']}:53" in nat and f"{ips['b1']}:8080" in nat

        wait_for(programmed, 10, "DNAT to the DNS pod and to b1 in the client's namespace")
        client = app_container(cluster, docker_env, "client")
        resolv = docker_env.client.api.exec_start(
            docker_env.client.api.exec_create(client, ["cat", "/etc/resolv.conf"])["Id"]
        ).decode()
        assert f"nameserver {dns_ip}" in resolv
        assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in resolv
        script = (
            "ip=$(nslookup my-svc | awk '/^Address/ {a=$NF} END {print a}'); echo ip=$ip;"
            " printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $ip 80"
        )
        out = docker_env.client.api.exec_start(
            docker_env.client.api.exec_create(client, ["sh", "-c", script])["Id"]
        ).decode()
        assert f"ip={svc_ip}" in out, out
        assert out.strip().splitlines()[-1] == "b1", out
    finally:
        for server in servers:
            server.stop()
        running.stop()
