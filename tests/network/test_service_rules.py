"""The service proxy's rules, computed without Docker or an API server (kubelet_sim/proxy/rules)."""

from __future__ import annotations

from typing import Any

from kubelet_sim.proxy.rules import (
    SERVICES_CHAIN,
    Route,
    pod_routes,
    render,
    service_ports,
)

HTTP_8080 = {"name": "http", "port": 8080, "protocol": "TCP"}


def svc(name: str, ip: str, *ports: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"clusterIP": ip, "ports": list(ports), **spec}}  # fmt: skip


def eps(
    service: str, *endpoints: tuple[str, bool | None], ports: Any = None, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{service}-x", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": extra.get("addressType", "IPv4"),
        "ports": ports if ports is not None else [HTTP_8080],
        "endpoints": [
            {"addresses": [ip], **({"conditions": {"ready": ready}} if ready is not None else {})}
            for ip, ready in endpoints
        ],
    }  # fmt: skip


HTTP = {"name": "http", "port": 80, "protocol": "TCP"}


def test_two_ready_endpoints_are_picked_at_random_and_dnatted() -> None:
    ports, skipped = service_ports(
        [svc("web", "10.96.0.20", HTTP)], [eps("web", ("10.0.0.2", True), ("10.0.0.1", None))]
    )
    assert skipped == []
    (port,) = ports
    assert [(e.ip, e.port) for e in port.endpoints] == [("10.0.0.1", 8080), ("10.0.0.2", 8080)]
    nat = render(ports).nat
    assert f"-A {SERVICES_CHAIN} -d 10.96.0.20/32 -p tcp -m tcp --dport 80" in nat
    assert "--probability 0.5000000000" in nat
    assert "--to-destination 10.0.0.1:8080" in nat
    assert "--to-destination 10.0.0.2:8080" in nat
    assert "REJECT" not in render(ports).filter


def test_unready_endpoints_are_left_out_and_none_left_rejects() -> None:
    ports, _ = service_ports([svc("web", "10.96.0.20", HTTP)], [eps("web", ("10.0.0.1", False))])
    assert ports[0].endpoints == ()
    rules = render(ports)
    assert "DNAT" not in rules.nat
    assert "-d 10.96.0.20/32 -p tcp -m tcp --dport 80" in rules.filter
    assert "-j REJECT --reject-with icmp-port-unreachable" in rules.filter


def test_ports_are_matched_by_name_and_protocol() -> None:
    dns = [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    ]
    slice_ports = [
        {"name": "dns", "port": 5353, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 5354, "protocol": "TCP"},
    ]
    ports, _ = service_ports([svc("kube-dns", "10.96.0.10", *dns)],
                             [eps("kube-dns", ("10.0.0.9", True), ports=slice_ports)])  # fmt: skip
    by_name = {p.port_name: p for p in ports}
    assert by_name["dns"].protocol == "UDP"
    assert by_name["dns"].endpoints[0].port == 5353
    assert by_name["dns-tcp"].endpoints[0].port == 5354
    assert "-p udp -m udp --dport 53" in render(ports).nat


def test_headless_external_name_and_other_families_are_not_programmed() -> None:
    ports, skipped = service_ports(
        [svc("peers", "None", HTTP), svc("ext", "", HTTP, type="ExternalName"),
         svc("web", "10.96.0.20", HTTP)],
        [eps("web", ("fd00::1", True), addressType="IPv6"), eps("web", ("10.0.0.1", True))],
    )  # fmt: skip
    assert [p.service for p in ports] == ["web"]
    assert ports[0].endpoints[0].ip == "10.0.0.1", "the IPv4 slice still serves"
    assert [(s.kind, s.reason.split(" ")[0]) for s in skipped] == [("EndpointSlice", "address")]


def test_a_bad_port_is_skipped_and_the_others_served() -> None:
    ports, skipped = service_ports(
        [svc("web", "10.96.0.20", {"name": "bad", "port": 0}, HTTP)],
        [eps("web", ("10.0.0.1", True))],
    )
    assert [p.port_name for p in ports] == ["http"]
    assert skipped
    assert skipped[0].kind == "Service"


def test_client_ip_affinity_uses_recent() -> None:
    ports, _ = service_ports(
        [svc("web", "10.96.0.20", HTTP, sessionAffinity="ClientIP",
             sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})],
        [eps("web", ("10.0.0.1", True), ("10.0.0.2", True))],
    )  # fmt: skip
    nat = render(ports).nat
    assert nat.count("--rcheck --seconds 60 --reap") == 2
    assert nat.count("--rsource --set -j DNAT") == 2


def test_stale_chains_are_deleted_and_ours_kept() -> None:
    rules = render(
        service_ports([svc("web", "10.96.0.20", HTTP)], [eps("web", ("10.0.0.1", True))])[0]
    )
    text = rules.text(stale_nat={"KSIM-SVC-OLD", *rules.nat_chains}, stale_filter=set())
    assert ":KSIM-SVC-OLD - [0:0]\n" in text
    assert "-X KSIM-SVC-OLD\n" in text
    assert not any(f"-X {c}\n" in text for c in rules.nat_chains)
    assert text.count("COMMIT") == 2


def node(name: str, ip: str, cidr: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"podCIDR": cidr} if cidr else {},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}  # fmt: skip


def test_other_nodes_pod_ranges_are_routed_via_on_link_addresses() -> None:
    nodes = [
        node("n1", "172.18.0.1", "10.244.9.0/24"),  # ourselves
        node("kind-worker", "172.18.0.3", "10.244.1.0/24"),
        node("far", "192.168.5.5", "10.244.2.0/24"),  # not on our network
        node("plain", "172.18.0.4", None),
        node("odd", "172.18.0.5", "172.18.0.0/24"),  # overlaps the pods' own network
    ]
    assert pod_routes(nodes, "n1", "172.18.0.0/16") == [Route("10.244.1.0/24", "172.18.0.3")]
    assert pod_routes(nodes, "n1", None) == []
    # A node whose address is the pods' gateway (a node of this machine): their default route.
    nodes.append(node("n2", "172.18.0.1", "10.244.3.0/24"))
    assert pod_routes(nodes, "n1", "172.18.0.0/16", "172.18.0.1") == [
        Route("10.244.1.0/24", "172.18.0.3")
    ]
    assert Route("10.244.3.0/24", "172.18.0.1") in pod_routes(nodes, "n1", "172.18.0.0/16")
