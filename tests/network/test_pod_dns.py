"""resolv.conf and /etc/hosts as the kubelet forms them (dns.go, kubelet_pods.go), no Docker."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet_sim.pod.dns import (
    NodeDNS,
    ResolvConf,
    hosts_file,
    parse_resolv_conf,
    pod_dns,
    sandbox_hostname,
)
from kubelet_sim.pod.spec import PodView
from tests.manifests import pod_manifest, served
from tests.network.expected_hosts import ALIASED, aliased_hosts

HOST = parse_resolv_conf(
    "# comment\nnameserver 10.0.0.2\nsearch old.example\nsearch corp.example. lab.example\n"
    "options timeout:2 attempts:3\nnameserver 10.0.0.3\n"
)
CLUSTER = NodeDNS(("10.96.0.10",), "cluster.local", HOST)


def pod(**spec: Any) -> PodView:
    return PodView.from_api(
        served(pod_manifest("p", [{"name": "c", "image": "i"}], **spec), uid="u")
    )


def test_the_hosts_resolv_conf_is_parsed_as_the_kubelet_reads_it() -> None:
    assert (
        ResolvConf(
            ("10.0.0.2", "10.0.0.3"), ("corp.example", "lab.example"), ("timeout:2", "attempts:3")
        )
        == HOST
    )


def test_cluster_first_uses_only_the_cluster_dns_and_the_pods_search_domains() -> None:
    config, warnings = pod_dns(pod(), CLUSTER)
    assert config.render() == (
        "search ns.svc.cluster.local svc.cluster.local cluster.local corp.example lab.example\n"
        "nameserver 10.96.0.10\n"
        "options ndots:5\n"
    )
    assert warnings == []


def test_cluster_first_without_a_cluster_dns_falls_back_to_the_node_and_says_so() -> None:
    config, warnings = pod_dns(pod(), NodeDNS((), "cluster.local", HOST))
    assert config == HOST
    assert [(w.reason, w.message) for w in warnings] == [
        (
            "MissingClusterDNS",
            'pod: "p_ns(u)". kubelet does not have ClusterDNS IP configured and cannot create'
            ' Pod using "ClusterFirst" policy. Falling back to "Default" policy.',
        )
    ]


def test_host_network_pods_take_the_nodes_resolver_unless_they_ask_for_the_cluster() -> None:
    assert pod_dns(pod(hostNetwork=True), CLUSTER)[0] == HOST
    wanted = pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    assert pod_dns(wanted, CLUSTER)[0].servers == ("10.96.0.10",)
    assert pod_dns(pod(dnsPolicy="Default"), CLUSTER)[0] == HOST


def test_none_takes_only_the_pods_dns_config_and_options_merge_by_name() -> None:
    config = {
        "nameservers": ["1.1.1.1", "1.1.1.1"],
        "searches": ["a.example"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
    }
    only, _ = pod_dns(pod(dnsPolicy="None", dnsConfig=config), CLUSTER)
    assert only.render() == "search a.example\nnameserver 1.1.1.1\noptions ndots:2 edns0\n"
    merged, _ = pod_dns(pod(dnsConfig=config), CLUSTER)
    assert merged.servers == ("10.96.0.10", "1.1.1.1")
    assert merged.searches[-1] == "a.example"
    assert merged.options == ("ndots:2", "edns0"), "the pod's ndots overrides the default"


def test_the_kubelets_limits_cut_with_a_dns_config_forming_warning() -> None:
    many = {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"], "searches": ["x" * 254, "ok.io"]}
    config, warnings = pod_dns(pod(dnsConfig=many), CLUSTER)
    assert config.servers == ("10.96.0.10", "1.1.1.1", "2.2.2.2")
    assert "ok.io" in config.searches
    assert "x" * 254 not in config.searches
    assert [w.message for w in warnings] == [
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied"
        " nameserver line is: 10.96.0.10 1.1.1.1 2.2.2.2",
        "Search Line limits were exceeded, some search paths have been omitted, the applied"
        " search line is: " + " ".join(config.searches),
    ]
    assert {w.reason for w in warnings} == {"DNSConfigForming"}


def test_an_empty_resolv_conf_flag_points_pods_at_the_node_itself() -> None:
    config, _ = pod_dns(pod(dnsPolicy="Default"), NodeDNS((), "", None, ("10.1.1.1",)))
    assert config == ResolvConf(("127.0.0.1",), (".",), ())


def test_hosts_file_names_the_pod_and_its_aliases() -> None:
    aliased = pod(**ALIASED)
    assert hosts_file(aliased, ["172.17.0.5"], "web", "cluster.local", "") == aliased_hosts(
        "172.17.0.5", "ns"
    )
    assert hosts_file(pod(), ["172.17.0.5"], "p", "", "").endswith("172.17.0.5\tp\n")
    host = hosts_file(pod(hostNetwork=True), ["10.0.0.1"], "p", "", "127.0.0.1 node\n")
    assert host == "# Kubernetes-managed hosts file (host network).\n127.0.0.1 node\n"


def test_set_hostname_as_fqdn() -> None:
    fqdn = pod(subdomain="s", setHostnameAsFQDN=True)
    assert sandbox_hostname(fqdn, "p", "cluster.local") == "p.s.ns.svc.cluster.local"
    assert sandbox_hostname(fqdn, "p", "") == "p", "no domain, no FQDN"
    assert sandbox_hostname(pod(subdomain="s"), "p", "cluster.local") == "p"
    with pytest.raises(ValueError, match=r"FQDN .* is too long \(64 characters is the max, 7"):
        sandbox_hostname(fqdn, "h" * 50, "cluster.local")


def test_the_default_resolver_skips_systemd_resolveds_stub(tmp_path: Any) -> None:
    from kubelet_sim.node.resolv import node_dns
    from kubelet_sim.validation import ConfigError

    default, real = tmp_path / "resolv.conf", tmp_path / "systemd.conf"
    default.write_text("nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n")
    real.write_text("nameserver 192.0.2.1\nsearch lan\n")
    paths = {"default": str(default), "systemd": str(real)}
    assert node_dns([], "", str(default), **paths).host == ResolvConf(("192.0.2.1",), ("lan",))
    other = tmp_path / "other.conf"
    other.write_text("nameserver 127.0.0.53\n")
    kept = node_dns([], "", str(other), **paths).host
    assert kept is not None
    assert kept.servers == ("127.0.0.53",), "a file given on purpose is taken as it is"
    assert node_dns(["10.96.0.10, 10.96.0.11"], "Cluster.Local.", "", **paths) == NodeDNS(
        ("10.96.0.10", "10.96.0.11"), "cluster.local", None
    )
    with pytest.raises(ConfigError, match="is not an IP address"):
        node_dns(["ten"], "", "", **paths)
