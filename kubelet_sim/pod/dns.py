"""A pod's /etc/resolv.conf and /etc/hosts, as the kubelet forms them.

resolv.conf: pkg/kubelet/network/dns/dns.go (GetPodDNS): the policy picks the base (the cluster
DNS with the pod's search domains, the node's own resolv.conf, or nothing), the pod's dnsConfig
is appended, and the kubelet's limits cut the result with a `DNSConfigForming` warning. It is
written in the order containerd writes it (search, nameserver, options).

hosts: kubelet_pods.go (managedHostsFileContent, nodeHostsFileContent): localhost lines, the
pod's own name on its IPs, then hostAliases; a hostNetwork pod gets the node's file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kubelet_sim.pod.spec import PodView
from kubelet_sim.validation import DNS1123_SUBDOMAIN_MAX_LENGTH

MAX_NAMESERVERS = 3  # validation.MaxDNSNameservers
MAX_SEARCH_PATHS = 32  # MaxDNSSearchPathsExpanded (ExpandedDNSConfig, GA since 1.28)
MAX_SEARCH_CHARS = 2048  # MaxDNSSearchListCharsExpanded
MAX_DOMAIN_LEN = DNS1123_SUBDOMAIN_MAX_LENGTH
MAX_FQDN_LEN = 64  # the kernel's hostname limit, as the kubelet checks setHostnameAsFQDN
DEFAULT_OPTIONS = ("ndots:5",)
MANAGED_HEADER = "# Kubernetes-managed hosts file.\n"
HOST_NETWORK_HEADER = "# Kubernetes-managed hosts file (host network).\n"


@dataclass(frozen=True)
class ResolvConf:
    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [f"search {' '.join(self.searches)}"] if self.searches else []
        lines += [f"nameserver {server}" for server in self.servers]
        if self.options:
            lines.append(f"options {' '.join(self.options)}")
        return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class NodeDNS:
    """The node's side: --cluster-dns, --cluster-domain and the parsed --resolv-conf."""

    cluster_dns: tuple[str, ...] = ()
    cluster_domain: str = ""
    host: ResolvConf | None = field(default_factory=ResolvConf)  # None: --resolv-conf ""
    node_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Warning:
    reason: str
    message: str


def parse_resolv_conf(text: str) -> ResolvConf:
    """parseResolvConf: nameservers accumulate; the last search and options lines win."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        fields = line.strip().split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            servers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:]]
        elif fields[0] == "options":
            options = fields[1:]
    return ResolvConf(tuple(servers), tuple(searches), tuple(options))


def pod_dns(pod: PodView, node: NodeDNS) -> tuple[ResolvConf, list[Warning]]:
    """GetPodDNS: the pod's resolver configuration and the warnings the kubelet records."""
    warnings: list[Warning] = []
    host = node.host if node.host is not None else ResolvConf()
    policy = str(pod.spec.get("dnsPolicy") or "ClusterFirst")
    if policy == "ClusterFirst" and pod.host_network:
        policy = "Default"  # a hostNetwork pod falls back to the node's resolver
    base: ResolvConf
    if policy == "None":
        base = ResolvConf()
    elif policy in ("ClusterFirst", "ClusterFirstWithHostNet") and node.cluster_dns:
        searches = list(host.searches)
        if node.cluster_domain:
            domain = node.cluster_domain
            ours = [f"{pod.namespace}.svc.{domain}", f"svc.{domain}", domain]
            searches = _unique(ours + searches)
        base = ResolvConf(node.cluster_dns, tuple(searches), DEFAULT_OPTIONS)
    else:
        if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
            text = (
                "kubelet does not have ClusterDNS IP configured and cannot create Pod using"
                ' "ClusterFirst" policy. Falling back to "Default" policy.'
            )
            warnings.append(Warning("MissingClusterDNS", f'pod: "{pod.full_name}". {text}'))
        base = host
        if node.host is None:  # --resolv-conf "": lookups go to the node itself
            servers = ["::1" if ":" in ip else "127.0.0.1" for ip in node.node_ips]
            base = ResolvConf(tuple(servers or ["127.0.0.1"]), (".",), host.options)
    config = pod.spec.get("dnsConfig") or {}
    if config:
        base = ResolvConf(
            tuple(_unique([*base.servers, *map(str, config.get("nameservers") or ())])),
            tuple(_unique([*base.searches, *map(str, config.get("searches") or ())])),
            _merge_options(base.options, config.get("options") or ()),
        )
    return _fit_limits(base, warnings), warnings


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _merge_options(existing: Sequence[str], extra: Sequence[dict[str, object]]) -> tuple[str, ...]:
    """mergeDNSOptions: by name, the pod's value wins (kept in first-seen order here; Go's map
    order is random there)."""
    merged: dict[str, str] = {}
    for option in existing:
        name, _, value = option.partition(":")
        merged[name] = value
    for given in extra:
        merged[str(given.get("name") or "")] = str(given.get("value") or "")
    return tuple(f"{k}:{v}" if v else k for k, v in merged.items() if k)


def _fit_limits(config: ResolvConf, warnings: list[Warning]) -> ResolvConf:
    servers = config.servers
    if len(servers) > MAX_NAMESERVERS:
        servers = servers[:MAX_NAMESERVERS]
        warnings.append(
            Warning(
                "DNSConfigForming",
                "Nameserver limits were exceeded, some nameservers have been omitted, the"
                f" applied nameserver line is: {' '.join(servers)}",
            )
        )
    searches, cut = (
        list(config.searches[:MAX_SEARCH_PATHS]),
        len(config.searches) > MAX_SEARCH_PATHS,
    )
    kept = [s for s in searches if len(s) <= MAX_DOMAIN_LEN]
    cut = cut or len(kept) != len(searches)
    while kept and len(" ".join(kept)) > MAX_SEARCH_CHARS:
        kept.pop()
        cut = True
    if cut:
        warnings.append(
            Warning(
                "DNSConfigForming",
                "Search Line limits were exceeded, some search paths have been omitted, the"
                f" applied search line is: {' '.join(kept)}",
            )
        )
    return ResolvConf(servers, tuple(kept), config.options)


def host_domain(pod: PodView, cluster_domain: str) -> str:
    """GeneratePodHostNameAndDomain's domain: <subdomain>.<namespace>.svc.<cluster domain>."""
    subdomain = str(pod.spec.get("subdomain") or "")
    if subdomain and cluster_domain:
        return f"{subdomain}.{pod.namespace}.svc.{cluster_domain}"
    return ""


def sandbox_hostname(pod: PodView, hostname: str, cluster_domain: str) -> str:
    """The hostname the pod's containers see: the FQDN with setHostnameAsFQDN (raises
    ValueError, in the kubelet's words, past 64 characters)."""
    domain = host_domain(pod, cluster_domain)
    if not pod.spec.get("setHostnameAsFQDN") or not domain:
        return hostname
    fqdn = f"{hostname}.{domain}"
    if len(fqdn) > MAX_FQDN_LEN:
        raise ValueError(
            f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too"
            f" long ({MAX_FQDN_LEN} characters is the max, {len(fqdn)} characters requested)"
        )
    return fqdn


def hosts_file(
    pod: PodView, pod_ips: Sequence[str], hostname: str, cluster_domain: str, node_hosts: str
) -> str:
    """The /etc/hosts the kubelet mounts into each of the pod's containers."""
    aliases = _aliases(pod.spec.get("hostAliases") or ())
    if pod.host_network:
        return HOST_NETWORK_HEADER + node_hosts + aliases
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    domain = host_domain(pod, cluster_domain)
    for ip in pod_ips:
        lines.append(f"{ip}\t{hostname}.{domain}\t{hostname}" if domain else f"{ip}\t{hostname}")
    return MANAGED_HEADER + "".join(line + "\n" for line in lines) + aliases


def _aliases(host_aliases: Sequence[dict[str, object]]) -> str:
    if not host_aliases:
        return ""
    lines = []
    for alias in host_aliases:
        names = alias.get("hostnames")
        names = names if isinstance(names, list) else []
        lines.append(f"{alias.get('ip', '')}\t" + "\t".join(map(str, names)))
    return "\n# Entries added by HostAliases.\n" + "".join(line + "\n" for line in lines)
