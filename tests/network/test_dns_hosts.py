"""What a pod's containers read in /etc/resolv.conf, /etc/hosts and `hostname`, and the events
the kubelet records while forming them (observed inside real containers, on both servers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_sim.pod.dns import NodeDNS, parse_resolv_conf
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.network.expected_hosts import ALIASED, aliased_hosts
from tests.pods import (
    container,
    ended_output,
    event_messages,
    make_pod,
    status_of,
    wait_for_events,
)

SHOW = ["sh", "-c", "cat /etc/resolv.conf; echo ===; cat /etc/hosts; echo ===; hostname"]
NODE_RESOLVER = parse_resolv_conf("nameserver 10.0.0.2\nsearch corp.example\noptions rotate\n")


def _shown(cluster: ApiUnderTest, docker_env: DockerEnv, name: str, **spec: Any) -> list[str]:
    """The three files as the pod's container printed them, once it ran to the end."""
    make_pod(cluster, name, container(command=SHOW), restart="Never", **spec)
    return ended_output(cluster, docker_env, name).split("===\n")


def _agent(
    cluster: ApiUnderTest, docker_env: DockerEnv, root: Path, *cluster_dns: str
) -> RunningAgent:
    """An agent whose pods have `cluster_dns` (its --cluster-dns) and NODE_RESOLVER."""
    return start_agent(
        cluster, docker_env, root, dns=NodeDNS(cluster_dns, "cluster.local", NODE_RESOLVER)
    )


def test_cluster_first_pod_with_a_subdomain_aliases_and_its_fqdn(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = _agent(cluster, docker_env, tmp_path / "root", "10.96.0.10")
    try:
        resolv, hosts, hostname = _shown(
            cluster,
            docker_env,
            "named",
            setHostnameAsFQDN=True,
            **ALIASED,
        )
        ns = cluster.namespace
        assert resolv == (
            f"search {ns}.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
            "nameserver 10.96.0.10\n"
            "options ndots:5\n"
        )
        pod_ip = status_of(cluster, "named")["podIP"]
        assert hosts == aliased_hosts(pod_ip, ns)
        assert hostname == f"web.backends.{ns}.svc.cluster.local\n"
    finally:
        running.stop()


def test_dns_policies_none_and_default_and_the_missing_cluster_dns(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = _agent(cluster, docker_env, tmp_path / "root")  # no --cluster-dns
    try:
        config = {"nameservers": ["1.1.1.1"], "searches": ["a.example"],
                  "options": [{"name": "ndots", "value": "2"}]}  # fmt: skip
        none, _, _ = _shown(cluster, docker_env, "none", dnsPolicy="None", dnsConfig=config)
        assert none == "search a.example\nnameserver 1.1.1.1\noptions ndots:2\n"
        default, _, hostname = _shown(cluster, docker_env, "default", dnsPolicy="Default")
        assert default == "search corp.example\nnameserver 10.0.0.2\noptions rotate\n"
        assert hostname == "default\n"
        fallback, _, _ = _shown(cluster, docker_env, "fallback")
        assert fallback == default, "ClusterFirst without a cluster DNS: the node's resolver"
        wait_for_events(cluster, "fallback", "MissingClusterDNS")
        (message,) = set(event_messages(cluster, "fallback", "MissingClusterDNS"))
        assert message.endswith(
            "kubelet does not have ClusterDNS IP configured and cannot create Pod using"
            ' "ClusterFirst" policy. Falling back to "Default" policy.'
        )
        assert event_messages(cluster, "default", "MissingClusterDNS") == []
    finally:
        running.stop()


def test_a_too_long_fqdn_fails_the_sandbox_as_the_kubelet_says(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = _agent(cluster, docker_env, tmp_path / "root", "10.96.0.10")
    try:
        make_pod(cluster, "long", hostname="h" * 50, subdomain="s", setHostnameAsFQDN=True)
        wait_for_events(cluster, "long", "FailedCreatePodSandBox", timeout=20)
        (message,) = set(event_messages(cluster, "long", "FailedCreatePodSandBox"))
        assert message.startswith(
            "Failed to create pod sandbox: failed to construct FQDN from pod hostname and"
            f" cluster domain, FQDN {'h' * 50}.s.{cluster.namespace}.svc.cluster.local is too long"
        )
    finally:
        running.stop()
