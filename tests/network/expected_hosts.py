"""The /etc/hosts the kubelet writes (kubelet_pods.go's managedHostsFileContent), spelled out
for the tests, apart from kubelet_sim/pod/dns.py, which they check."""

from __future__ import annotations

# A pod `web` of subdomain `backends` with two host aliases, as both its tests declare it.
ALIASED = {
    "hostname": "web",
    "subdomain": "backends",
    "hostAliases": [{"ip": "10.9.9.9", "hostnames": ["one.example", "two.example"]}],
}


def aliased_hosts(pod_ip: str, namespace: str) -> str:
    """The hosts file of the ALIASED pod in `namespace` at `pod_ip` (cluster domain
    cluster.local)."""
    return (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\n"
        "fe00::0\tip6-mcastprefix\n"
        "fe00::1\tip6-allnodes\n"
        "fe00::2\tip6-allrouters\n"
        f"{pod_ip}\tweb.backends.{namespace}.svc.cluster.local\tweb\n"
        "\n"
        "# Entries added by HostAliases.\n"
        "10.9.9.9\tone.example\ttwo.example\n"
    )
