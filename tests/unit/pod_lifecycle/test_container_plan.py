"""A container's plan (pod/container_plan.py): everything Docker needs from the pod, the
container and what the node knows, with no Docker, files or API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.container_config import ContainerConfigError
from kubelet_sim.pod.container_plan import (
    ETC_HOSTS,
    RESOLV_CONF,
    NodeFacts,
    StartFacts,
    plan_container,
)
from kubelet_sim.pod.dns import NodeDNS
from kubelet_sim.pod.service_env import NOT_SYNCED
from kubelet_sim.pod.spec import PodView
from tests.manifests import pod_manifest, served

NODE = NodeFacts(
    name="n1",
    ip="10.0.0.5",
    allocatable=Allocatable(cpu_milli=2000, memory_bytes=2**30, pods=110),
    dns=NodeDNS(cluster_dns=("10.96.0.10",), cluster_domain="cluster.local"),
)
POD_DIR = Path("/var/lib/ks/pods/u-1")
SERVICE = {
    "metadata": {"name": "db", "namespace": "ns"},
    "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 5432, "protocol": "TCP"}]},
}


def _pod(container: Json, **spec: Any) -> PodView:
    body = pod_manifest("web", [container], nodeName="n1")
    body["spec"].update(spec)
    return PodView.from_api(served(body, uid="u-1"))


def _start(**facts: Any) -> StartFacts:
    base: dict[str, Any] = {
        "pod_dir": POD_DIR,
        "attempt": 0,
        "sandbox_ip": "172.17.0.9",
        "services": [SERVICE],
    }
    return StartFacts(**{**base, **facts})


def _plan(container: Json, start: StartFacts | None = None, **spec: Any) -> Any:
    pod = _pod(container, **spec)
    return plan_container(pod, pod.containers[0], NODE, start or _start(), lambda *_: None)


APP = {"name": "app", "image": "busybox:1", "command": ["sleep", "$(DB_SERVICE_HOST)"]}


def test_the_plan_holds_the_config_and_the_pod_files_it_mounts() -> None:
    volume = cri.Mount("/var/lib/ks/pods/u-1/volumes/data", "/data")
    plan = _plan(APP, _start(attempt=3, volume_mounts=[volume]))
    cfg = plan.config
    assert (cfg.name, cfg.attempt, cfg.image) == ("app", 3, "busybox:1")
    assert cfg.entrypoint == ("sleep", "10.96.0.20"), "service links expanded"
    assert ("DB_SERVICE_PORT", "5432") in cfg.env
    assert [(m.host_path, m.container_path) for m in cfg.mounts] == [
        ("/var/lib/ks/pods/u-1/volumes/data", "/data"),
        (str(POD_DIR / ETC_HOSTS), "/etc/hosts"),
        (str(POD_DIR / RESOLV_CONF), "/etc/resolv.conf"),
    ]
    [hosts] = plan.files
    assert hosts.name == ETC_HOSTS
    assert "172.17.0.9\tweb" in hosts.text
    assert cfg.pid_namespace_of in ("", None)


def test_a_host_network_pod_gets_the_nodes_hosts_and_address() -> None:
    start = _start(node_hosts="127.0.0.1\tlocalhost\n10.0.0.5\tn1\n")
    [hosts] = _plan(APP, start, hostNetwork=True).files
    assert hosts.text.startswith("# Kubernetes-managed hosts file (host network).\n")
    assert "10.0.0.5\tn1" in hosts.text


def test_a_volume_at_etc_hosts_replaces_the_managed_one() -> None:
    mounted = {**APP, "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}
    plan = _plan(mounted, _start(volume_mounts=[cri.Mount("/x/h", "/etc/hosts")]))
    assert plan.files == ()
    assert [m.container_path for m in plan.config.mounts] == ["/etc/hosts", "/etc/resolv.conf"]


def test_an_adopted_sandbox_without_resolv_conf_gets_one() -> None:
    plan = _plan(APP, _start(resolv_conf_written=False))
    resolv = {f.name: f.text for f in plan.files}[RESOLV_CONF]
    assert "nameserver 10.96.0.10" in resolv
    assert "search ns.svc.cluster.local svc.cluster.local cluster.local" in resolv


def test_an_ephemeral_container_joins_its_targets_processes() -> None:
    assert _plan(APP, _start(pid_of="c0ffee")).config.pid_namespace_of == "c0ffee"


def test_services_not_listed_yet_is_the_kubelets_config_error() -> None:
    with pytest.raises(ContainerConfigError, match=f"^{NOT_SYNCED}$"):
        _plan(APP, _start(services=None))


def test_the_environment_is_judged_before_run_as_non_root() -> None:
    """generateContainerConfig: GenerateRunContainerOptions (the environment) first, then
    verifyRunAsNonRoot against the image's user."""
    non_root = {"runAsNonRoot": True}
    missing = {
        **APP,
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}],
    }
    with pytest.raises(ContainerConfigError, match='configmap "absent" not found'):
        _plan(missing, _start(image_user="root"), securityContext=non_root)
    with pytest.raises(ContainerConfigError, match="non-root"):
        _plan(APP, _start(image_user="root"), securityContext=non_root)
    assert _plan(APP, _start(image_user="1000"), securityContext=non_root).config.name == "app"
