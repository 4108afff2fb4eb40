"""A container's plan: everything Docker needs to create it, as one value.

The kubelet's generateContainerConfig, once the image is present: from the pod, the container
and what the node knows at this start (its name and address, the sandbox's address, the
Services, the ConfigMaps and Secrets, the volumes' mounts, the image's user), the container's
config and the files of the pod's directory that it mounts (/etc/hosts, resolv.conf), or the
kubelet's CreateContainerConfigError message. Pure: the starter pulls the image before, and
writes the files, creates and starts after (podworkers/starter.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.container_config import (
    ContainerConfigError,
    ObjectLookup,
    container_config,
    pod_hostname,
)
from kubelet_sim.pod.dns import NodeDNS, hosts_file, pod_dns
from kubelet_sim.pod.security import non_root_problem
from kubelet_sim.pod.service_env import NOT_SYNCED, service_env
from kubelet_sim.pod.spec import ContainerView, PodView

ETC_HOSTS = "etc-hosts"  # the kubelet's name for it in the pod's directory
RESOLV_CONF = "resolv.conf"


@dataclass(frozen=True)
class NodeFacts:
    """What the node is: the same for every container it starts."""

    name: str
    ip: str
    allocatable: Allocatable
    dns: NodeDNS


@dataclass(frozen=True)
class StartFacts:
    """What the node observed for this start of the container."""

    pod_dir: Path  # where the pod's managed files are (runtime/pod_files.py)
    attempt: int
    sandbox_ip: str
    services: list[Json] | None  # None: not listed yet
    volume_mounts: Sequence[cri.Mount] = ()  # one a volumeMount, in order (volumes/mounts.py)
    image_user: str = ""  # the image's USER, where runAsNonRoot needs it (else "")
    node_hosts: str = ""  # the node's /etc/hosts, for a hostNetwork pod
    resolv_conf_written: bool = True  # the sandbox wrote the pod's resolv.conf
    pid_of: str = ""  # an ephemeral container's target, whose process namespace it joins


@dataclass(frozen=True)
class PodFile:
    """A file of the pod's directory the container mounts, with what it must hold."""

    name: str
    text: str


@dataclass(frozen=True)
class ContainerPlan:
    config: cri.ContainerConfig
    files: tuple[PodFile, ...]  # written (whole) before the container is created


def plan_container(
    pod: PodView,
    container: ContainerView,
    node: NodeFacts,
    start: StartFacts,
    lookup: ObjectLookup,
) -> ContainerPlan:
    """The plan, or ContainerConfigError with the kubelet's message: the environment's first
    (GenerateRunContainerOptions), then runAsNonRoot against the image's user."""
    if start.services is None:
        raise ContainerConfigError(NOT_SYNCED)
    links = pod.spec.get("enableServiceLinks") is not False
    files, managed = _managed_files(pod, container, node, start)
    cfg = container_config(
        pod,
        container,
        node=node.name,
        attempt=start.attempt,
        host_ip=node.ip,
        pod_ip=start.sandbox_ip,
        lookup=lookup,
        allocatable=node.allocatable,
        services=service_env(start.services, pod.namespace, links),
        mounts=[*start.volume_mounts, *managed],
    )
    problem = non_root_problem(pod, container, start.image_user)
    if problem is not None:
        raise ContainerConfigError(problem)
    if start.pid_of:
        cfg = replace(cfg, pid_namespace_of=start.pid_of)
    return ContainerPlan(cfg, files)


def _managed_files(
    pod: PodView, container: ContainerView, node: NodeFacts, start: StartFacts
) -> tuple[tuple[PodFile, ...], list[cri.Mount]]:
    """/etc/hosts (makeHostsMount, unless a volume is mounted there) and the pod's
    /etc/resolv.conf (as containerd mounts the sandbox's into each container; made here only
    for a sandbox this node did not make, adopted after a restart)."""
    files: list[PodFile] = []
    if not start.resolv_conf_written:
        files.append(PodFile(RESOLV_CONF, pod_dns(pod, node.dns)[0].render()))
    mounts = [cri.Mount(str(start.pod_dir / RESOLV_CONF), "/etc/resolv.conf")]
    if any(m.mount_path == "/etc/hosts" for m in container.volume_mounts):
        return tuple(files), mounts
    ips = [node.ip] if pod.host_network else [start.sandbox_ip] if start.sandbox_ip else []
    hostname = pod_hostname(pod)
    text = hosts_file(pod, ips, hostname, node.dns.cluster_domain, start.node_hosts)
    files.append(PodFile(ETC_HOSTS, text))
    return tuple(files), [cri.Mount(str(start.pod_dir / ETC_HOSTS), "/etc/hosts"), *mounts]
