"""The node's DNS settings: --cluster-dns, --cluster-domain and the host's resolv.conf, read once
for the pods' files (pod/dns.py forms them)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from kubelet_sim.pod.dns import NodeDNS, ResolvConf, parse_resolv_conf
from kubelet_sim.validation import ConfigError

DEFAULT_RESOLV_CONF = "/etc/resolv.conf"
SYSTEMD_RESOLV_CONF = "/run/systemd/resolve/resolv.conf"


def node_dns(
    cluster_dns: list[str],
    domain: str,
    resolv_conf: str,
    *,
    default: str = DEFAULT_RESOLV_CONF,
    systemd: str = SYSTEMD_RESOLV_CONF,
) -> NodeDNS:
    """--cluster-dns (repeated or comma-separated), --cluster-domain and --resolv-conf read
    once; ConfigError in one line when an address or the file is bad.

    The default file naming only systemd-resolved's stub (127.0.0.53, useless inside a pod)
    gives way to systemd-resolved's real upstreams, as kubeadm configures kubelets."""
    servers = [ip.strip() for item in cluster_dns for ip in item.split(",") if ip.strip()]
    for ip in servers:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise ConfigError(f"--cluster-dns: {ip!r} is not an IP address") from None
    host = None
    if resolv_conf:
        host = _read_resolv_conf(resolv_conf)
        stub_only = bool(host.servers) and all(_loopback(s) for s in host.servers)
        if resolv_conf == default and stub_only and Path(systemd).exists():
            host = _read_resolv_conf(systemd)
    return NodeDNS(tuple(servers), domain.strip(".").lower(), host)


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _read_resolv_conf(path: str) -> ResolvConf:
    try:
        return parse_resolv_conf(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read --resolv-conf {path}: {exc.strerror or exc}") from None
