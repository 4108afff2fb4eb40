"""The CNI plugins' iptables state that belongs to one network, found and removed.

Several clusters' CNI networks share a host's iptables, so a network's clean-up touches only
what names it. The plugins name a container's own chains from the network's name and the
container's (sandbox's) ID: bridge's masquerade chain `CNI-<hash>`, portmap's `CNI-DN-<hash>`
(and the older `CNI-SN-<hash>`), the hash being sha512(network + ID) in hex, cut with its
prefix to 28 characters (libcni's `utils.MustFormatChainNameWithPrefix`). The chains every
network shares (firewall's `CNI-FORWARD` and `CNI-ADMIN`, portmap's `CNI-HOSTPORT-*`) name no
network: other networks' rules come and go in them at any moment, so they stay, and only
their rules that jump to this network's chains or name nothing but its subnet's addresses go.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shlex
from collections.abc import Iterable

from kubelet_sim.controlplane import host

CHAIN_LENGTH = 28
CHAIN_PREFIXES = ("", "DN-", "SN-")  # bridge's masquerade, portmap's DNAT, its old SNAT
TABLES = ("filter", "nat")


def chain_name(network: str, container_id: str, prefix: str = "") -> str:
    """The chain a CNI plugin names for `container_id` on `network` ("DN-": portmap's)."""
    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return f"CNI-{prefix}{digest}"[:CHAIN_LENGTH]


def own_chain_names(network: str, container_ids: Iterable[str]) -> set[str]:
    """Every chain name the plugins could give the network's containers."""
    return {chain_name(network, cid, p) for cid in container_ids for p in CHAIN_PREFIXES}


def find(
    network: str, container_ids: Iterable[str], subnet: ipaddress.IPv4Network
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(table, chain) of the network's own chains present, and (table, `-A` line) of the rules
    in other chains that are its: a jump to one of its chains, or, in a chain the plugins
    share, a rule naming only addresses of its subnet (the firewall plugin's accepts)."""
    names = own_chain_names(network, container_ids)
    chains, rules = [], []
    for table in TABLES:
        for line in host.iptables(table, "-S").splitlines():
            parts = line.split()
            if len(parts) < 2 or parts[0] not in ("-N", "-A"):
                continue
            if parts[0] == "-N" and parts[1] in names:
                chains.append((table, parts[1]))
            elif parts[0] == "-A" and parts[1] not in names and _names_it(line, names, subnet):
                rules.append((table, line))
    return chains, rules


def _names_it(rule: str, names: set[str], subnet: ipaddress.IPv4Network) -> bool:
    parts = rule.split()
    if "-j" in parts and parts[parts.index("-j") + 1] in names:
        return True
    return parts[1].startswith("CNI-") and host.only_in(rule, subnet)


def remove(network: str, container_ids: Iterable[str], subnet: ipaddress.IPv4Network) -> None:
    """Delete the network's rules in other chains, then flush and delete its own chains."""
    chains, rules = find(network, container_ids, subnet)
    for table, rule in rules:
        host.iptables(table, "-D", *shlex.split(rule)[1:])
    for table, chain in chains:
        host.iptables(table, "-F", chain)
        host.iptables(table, "-X", chain)


def describe(
    network: str, container_ids: Iterable[str], subnet: ipaddress.IPv4Network
) -> list[str]:
    """What of the network is in iptables, one line each (a node's `leftovers()`)."""
    chains, rules = find(network, container_ids, subnet)
    return [f"iptables -t {t} chain {c}" for t, c in chains] + [
        f"iptables -t {t} rule {r}" for t, r in rules
    ]
