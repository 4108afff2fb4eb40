"""Service-link variables: computed as pkg/kubelet/envvars does (pure), and seen by `env` in a
container on both servers (the `kubernetes` Service of `default` included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_sim.pod.service_env import service_env
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, ended_output, make_pod


def svc(name: str, namespace: str, ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": ip, "ports": list(ports)}}  # fmt: skip


def test_variables_of_one_service_as_envvars_makes_them() -> None:
    web = svc("my-web", "ns", "10.96.0.20", {"name": "http", "port": 80, "protocol": "TCP"},
              {"name": "dns", "port": 53, "protocol": "UDP"})  # fmt: skip
    assert service_env([web], "ns", True) == {
        "MY_WEB_SERVICE_HOST": "10.96.0.20",
        "MY_WEB_SERVICE_PORT": "80",
        "MY_WEB_SERVICE_PORT_HTTP": "80",
        "MY_WEB_SERVICE_PORT_DNS": "53",
        "MY_WEB_PORT": "tcp://10.96.0.20:80",
        "MY_WEB_PORT_80_TCP": "tcp://10.96.0.20:80",
        "MY_WEB_PORT_80_TCP_PROTO": "tcp",
        "MY_WEB_PORT_80_TCP_PORT": "80",
        "MY_WEB_PORT_80_TCP_ADDR": "10.96.0.20",
        "MY_WEB_PORT_53_UDP": "udp://10.96.0.20:53",
        "MY_WEB_PORT_53_UDP_PROTO": "udp",
        "MY_WEB_PORT_53_UDP_PORT": "53",
        "MY_WEB_PORT_53_UDP_ADDR": "10.96.0.20",
    }


def test_which_services_a_pod_sees() -> None:
    master = svc("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443})
    mine = svc("db", "ns", "10.96.0.30", {"port": 5432})
    headless = svc("peers", "ns", "None", {"port": 7000})
    elsewhere = svc("other", "ns2", "10.96.0.40", {"port": 1})
    seen = service_env([master, mine, headless, elsewhere], "ns", True)
    assert {k for k in seen if k.endswith("_SERVICE_HOST")} == {
        "KUBERNETES_SERVICE_HOST", "DB_SERVICE_HOST"}  # fmt: skip
    assert "DB_SERVICE_PORT_" not in "".join(seen), "an unnamed port has no named variable"
    off = service_env([master, mine], "ns", False)
    assert {k for k in off if k.endswith("_SERVICE_HOST")} == {"KUBERNETES_SERVICE_HOST"}


def test_a_container_sees_the_services_of_its_namespace(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_service(ns, {
        "metadata": {"name": "backend"},
        "spec": {"ports": [{"name": "http", "port": 8080}], "selector": {"app": "x"}}})  # fmt: skip
    ip = cluster.core.read_namespaced_service("backend", ns).spec.cluster_ip
    master = cluster.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        wait_for(running.agent.watches.services.synced.is_set, 20, "services listed")
        env = container(command=["sh", "-c", "env | sort"],
                        env=[{"name": "MINE", "value": "$(BACKEND_SERVICE_HOST)"}])  # fmt: skip
        seen = _env_of(cluster, docker_env, "links", env)
        assert seen["BACKEND_SERVICE_HOST"] == ip
        assert seen["BACKEND_SERVICE_PORT_HTTP"] == "8080"
        assert seen["BACKEND_PORT_8080_TCP"] == f"tcp://{ip}:8080"
        assert seen["MINE"] == ip, "$(VAR) sees the service variables"
        assert seen["KUBERNETES_SERVICE_HOST"] == master
        assert seen["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
        off = _env_of(cluster, docker_env, "nolinks", container(command=["sh", "-c", "env | sort"]),
                      enableServiceLinks=False)  # fmt: skip
        assert "BACKEND_SERVICE_HOST" not in off
        assert off["KUBERNETES_SERVICE_HOST"] == master, "the master service always"
    finally:
        running.stop()


def _env_of(cluster: ApiUnderTest, docker_env: DockerEnv, name: str, spec_container: dict[str, Any],
            **spec: Any) -> dict[str, str]:  # fmt: skip
    make_pod(cluster, name, spec_container, restart="Never", **spec)
    text = ended_output(cluster, docker_env, name)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
