"""The node options that `kubelet-sim` and `kubelet-sim demo` share, declared once.

`with_node_options` adds them to a command's signature and hands the command one
`NodeOptions` (parameter `node`), which turns them into the composition root's one settings
object, `NodeSetSettings` (`node_set_settings`): both commands build their nodes from it, the
demo adding what only its control plane knows (each node's credentials, the client CA).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kubelet_sim.assembly.nodeset import NodeIdentity, NodeSetSettings
from kubelet_sim.cli.common import with_options_of
from kubelet_sim.node.resolv import node_dns
from kubelet_sim.node.settings import (
    NodeSettings,
    default_taints,
    parse_labels,
    parse_reserved,
    parse_taints,
)
from kubelet_sim.podworkers.settings import PodSettings
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.server.settings import ServerSettings, parse_duration
from kubelet_sim.validation import ConfigError

DEFAULT_PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LEASE_RENEW_FRACTION = 0.25  # the kubelet's nodeLeaseRenewIntervalFraction


class LogFormatChoice(StrEnum):
    auto = "auto"
    console = "console"
    json = "json"


class LogLevelChoice(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def _opt(envvar: str, help_: str, *decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, envvar=f"KUBELET_SIM_{envvar}", help=help_, **kw)


@dataclass(frozen=True)
class NodeOptions:
    log_format: Annotated[
        LogFormatChoice, _opt("LOG_FORMAT", "console on a tty, json otherwise (auto).")
    ] = LogFormatChoice.auto
    log_level: Annotated[LogLevelChoice, _opt("LOG_LEVEL", "Log level.")] = LogLevelChoice.info
    node_labels: Annotated[
        str,
        _opt(
            "NODE_LABELS",
            "Extra labels at registration: key=value,... (kubernetes.io/ only the kubelet's).",
        ),
    ] = ""
    system_reserved: Annotated[
        str,
        _opt(
            "SYSTEM_RESERVED",
            "Resources kept for the OS, e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi:"
            " taken from allocatable, as the kubelet does.",
        ),
    ] = ""
    kube_reserved: Annotated[
        str,
        _opt(
            "KUBE_RESERVED",
            "Resources kept for Kubernetes' own daemons (same form): taken from allocatable.",
        ),
    ] = ""
    register_with_taints: Annotated[
        str | None,
        _opt(
            "REGISTER_WITH_TAINTS",
            "Taints at registration: key[=value]:Effect,... Default (not in the demo):"
            " kubelet-sim.io/virtual=true:NoSchedule, so only pods that tolerate it are"
            ' scheduled here; "" registers none.',
        ),
    ] = None
    cpu: Annotated[str | None, _opt("CPU", "CPU capacity (default: the host's CPUs).")] = None
    memory: Annotated[
        str | None, _opt("MEMORY", "Memory capacity, e.g. 8Gi (default: the host's).")
    ] = None
    pods: Annotated[int, _opt("PODS", "Pod capacity.", min=1)] = 110
    node_lease_duration_seconds: Annotated[
        int,
        _opt(
            "NODE_LEASE_DURATION_SECONDS",
            "Each node's Lease duration, renewed every quarter of it (the kubelet's"
            " nodeLeaseDurationSeconds). Longer: fewer writes with many nodes; the renewal"
            " must come well within the controller-manager's --node-monitor-grace-period"
            " (50 s), or the nodes turn NotReady.",
            min=1,
        ),
    ] = 40
    node_status_update_frequency: Annotated[
        str,
        _opt(
            "NODE_STATUS_UPDATE_FREQUENCY",
            "How often each node computes its status and writes it if it changed (the"
            " kubelet's, a Go duration).",
        ),
    ] = "10s"
    node_status_report_frequency: Annotated[
        str,
        _opt(
            "NODE_STATUS_REPORT_FREQUENCY",
            "How often each node writes its status when nothing changed (the kubelet's"
            " nodeStatusReportFrequency, a Go duration).",
        ),
    ] = "5m"
    node_ip: Annotated[
        str | None,
        _opt("NODE_IP", "InternalIP (default: the default route's; the demo's: 127.0.0.1)."),
    ] = None
    pod_infra_image: Annotated[
        str, _opt("POD_INFRA_IMAGE", "Sandbox image that holds each pod's network namespace.")
    ] = DEFAULT_PAUSE_IMAGE
    cluster_dns: Annotated[
        list[str] | None,
        _opt(
            "CLUSTER_DNS",
            "IP of the cluster DNS service (repeat or comma-separate for more): the only"
            " nameserver of ClusterFirst pods (kind's: 10.96.0.10). Without it they fall back to"
            " the node's resolver, with a MissingClusterDNS event, as the kubelet does.",
        ),
    ] = None
    cluster_domain: Annotated[
        str,
        _opt(
            "CLUSTER_DOMAIN",
            "The cluster's DNS domain (kind's: cluster.local): ClusterFirst pods search"
            " <ns>.svc.<domain>, svc.<domain> and <domain>; pods with a subdomain get their FQDN.",
        ),
    ] = ""
    resolv_conf: Annotated[
        str,
        _opt(
            "RESOLV_CONF",
            "The node's resolver file, the base of Default pods (and ClusterFirst without"
            ' --cluster-dns); "" gives them 127.0.0.1, as the kubelet does.',
        ),
    ] = "/etc/resolv.conf"
    allowed_unsafe_sysctls: Annotated[
        str,
        _opt(
            "ALLOWED_UNSAFE_SYSCTLS",
            "Sysctls (or prefixes ending in *) admitted beyond the safe set, comma-separated;"
            " others are refused with SysctlForbidden, as by the kubelet.",
        ),
    ] = ""
    allow_privileged: Annotated[
        bool,
        _opt(
            "ALLOW_PRIVILEGED",
            "Run what reaches the host: hostNetwork, hostPID, hostIPC, hostPath volumes and,"
            " in any container (ephemeral ones too), privileged, capabilities added beyond"
            " Pod Security's baseline list, procMount Unmasked and hostPorts below 1024."
            " Without it such pods are refused (Forbidden), and such containers added later"
            " are never created.",
        ),
    ] = False
    root_dir: Annotated[
        Path | None,
        _opt(
            "ROOT_DIR",
            "Where pod files live (volumes, termination logs); Docker must see it."
            " Default: /var/lib/kubelet-sim as root, else ~/.local/share/kubelet-sim"
            " (the demo's: its own state directory).",
        ),
    ] = None
    docker_network: Annotated[
        str,
        _opt(
            "DOCKER_NETWORK",
            "Docker network for pod sandboxes (kind's is `kind`); unless --node-ip is"
            " given, the Node's InternalIP becomes this host's address on it.",
        ),
    ] = "bridge"
    image_pull_progress_deadline: Annotated[
        float,
        _opt(
            "IMAGE_PULL_PROGRESS_DEADLINE",
            "Seconds a pull may go without progress before it is cancelled (ErrImagePull).",
            min=1,
        ),
    ] = 60.0
    service_proxy: Annotated[
        bool,
        _opt(
            "SERVICE_PROXY",
            "Program Services (ClusterIPs, load-balanced over ready EndpointSlice endpoints) and"
            " other nodes' pod ranges into each pod's network namespace, as kube-proxy and the"
            " network plugin give a node; the host is not touched. Needs root and iptables.",
        ),
    ] = True
    sandbox_pool_size: Annotated[
        str,
        _opt(
            "SANDBOX_POOL_SIZE",
            "Started, network-ready pod sandboxes kept ready per node, so that a pod that may"
            " use one (not hostNetwork, hostPID, hostIPC, sysctls, hostPorts, a runtimeClass or"
            " hostUsers: false) starts only its own containers. `auto`: as many as the node"
            " started such pods in the last 30 s, at most 4, none when idle; a number fixes the"
            " size; 0 (the default) keeps none: a pooled pod's first process may still read the"
            " pool's hostname from the kernel (docs/sandbox-pool.md).",
        ),
    ] = "0"
    pod_manifest_path: Annotated[
        Path | None,
        _opt(
            "POD_MANIFEST_PATH",
            "Directory (or one file) of static pod manifests, YAML or JSON, one pod per file"
            " (dotfiles ignored): each runs as `<name>-<node>` with a mirror pod in the API,"
            " and files added, changed or removed are followed (read every second).",
        ),
    ] = None
    container_log_max_size: Annotated[
        str,
        _opt(
            "CONTAINER_LOG_MAX_SIZE",
            "Largest size of a container's log file before it is rotated (the kubelet's).",
        ),
    ] = "10Mi"
    container_log_max_files: Annotated[
        int,
        _opt(
            "CONTAINER_LOG_MAX_FILES",
            "Log files kept per container, the current one included (at least 2).",
        ),
    ] = 5

    # --- into settings (ConfigError with one line when an item is bad) ---------------------

    def node_settings(
        self,
        name: str,
        *,
        kubelet_port: int,
        delete_node_on_exit: bool = False,
        taints_by_default: bool = True,
        node_ip: str | None = None,
    ) -> NodeSettings:
        if self.register_with_taints is not None:
            taints = parse_taints(self.register_with_taints)
        else:
            taints = default_taints() if taints_by_default else []
        return NodeSettings(
            node_name=name,
            node_labels=parse_labels(self.node_labels),
            register_with_taints=taints,
            cpu=self.cpu,
            memory=self.memory,
            pods=self.pods,
            node_ip=self.node_ip or node_ip,
            kubelet_port=kubelet_port,
            delete_node_on_exit=delete_node_on_exit,
            system_reserved=parse_reserved(self.system_reserved),
            kube_reserved=parse_reserved(self.kube_reserved),
            lease_duration_seconds=self.node_lease_duration_seconds,
            lease_renew_interval=self.node_lease_duration_seconds * LEASE_RENEW_FRACTION,
            status_update_interval=duration_option(
                "--node-status-update-frequency", self.node_status_update_frequency
            ),
            status_report_interval=duration_option(
                "--node-status-report-frequency", self.node_status_report_frequency
            ),
        )

    def pod_settings(self, pause_image: str | None = None) -> PodSettings:
        """The pod workers' settings of each node."""
        pool = parse_pool_size(self.sandbox_pool_size)
        return PodSettings(
            pause_image=pause_image or self.pod_infra_image,
            allow_privileged=self.allow_privileged,
            dns=node_dns(self.cluster_dns or [], self.cluster_domain, self.resolv_conf),
            allowed_unsafe_sysctls=tuple(
                s.strip() for s in self.allowed_unsafe_sysctls.split(",") if s.strip()
            ),
            sandbox_pool_size=pool,
            pod_manifest_path=self.pod_manifest_path,
        )

    def log_rotation(self) -> LogRotation:
        return LogRotation.parse(self.container_log_max_size, self.container_log_max_files)

    def node_set_settings(
        self,
        names: Sequence[str],
        *,
        root_dir: Path,
        server: ServerSettings,
        delete_node_on_exit: bool = False,
        taints_by_default: bool = True,
        node_ip: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        proxy_kubeconfig: str | None = None,
        owner_labels: Mapping[str, str] | None = None,
        node_kubeconfigs: Mapping[str, str] | None = None,
    ) -> NodeSetSettings:
        """The nodes `names` as these options make them; a ConfigError names the first bad
        option. `node_ip` is the command's default for --node-ip; `node_kubeconfigs` are the
        nodes' own (after TLS bootstrap), else they share `kubeconfig`."""
        own = node_kubeconfigs or {}
        return NodeSetSettings(
            nodes=tuple(
                NodeIdentity(
                    self.node_settings(
                        name,
                        kubelet_port=server.port,
                        delete_node_on_exit=delete_node_on_exit,
                        taints_by_default=taints_by_default,
                        node_ip=node_ip,
                    ),
                    kubeconfig=own.get(name),
                )
                for name in names
            ),
            root_dir=root_dir,
            pods=self.pod_settings(),
            server=server,
            kubeconfig=kubeconfig,
            context=context,
            docker_network=self.docker_network,
            image_pull_progress_deadline=self.image_pull_progress_deadline,
            log_rotation=self.log_rotation(),
            owner_labels=dict(owner_labels or {}),
            service_proxy=self.service_proxy,
            proxy_kubeconfig=proxy_kubeconfig,
        )


with_node_options = with_options_of(NodeOptions, "node")


def parse_pool_size(text: str) -> int | None:
    """--sandbox-pool-size: None for `auto` (sized to the recent starts), else a fixed size."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if not value.isdigit():
        raise ConfigError(f"--sandbox-pool-size must be auto or a number >= 0, got {text!r}")
    return int(value)


def duration_option(option: str, text: str) -> float:
    """A Go duration option's value in seconds; ConfigError naming the option otherwise."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None
