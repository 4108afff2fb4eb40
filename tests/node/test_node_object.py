"""The Node we register and the status we write, checked without an API server."""

from __future__ import annotations

import copy
import re
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kubelet_sim.controlplane.cluster import UPSTREAM_ADDRESS_TYPES
from kubelet_sim.node import host as host_module
from kubelet_sim.node.host import (
    HostFacts,
    default_route_ip,
    detect_host,
    go_arch,
    os_image,
    resolve_name,
)
from kubelet_sim.node.node_object import (
    KUBELET_VERSION,
    StatusFacts,
    addresses,
    build_node,
    compute_conditions,
    format_micro_time,
    reconcile_existing,
    resources,
    runtime_errors,
    status_changed,
)
from kubelet_sim.node.settings import (
    NodeSettings,
    parse_labels,
    parse_reserved,
    parse_taints,
    validate_node_labels,
)
from kubelet_sim.validation import ConfigError
from tests.fakeapi.nodeproxy import preferred_address

NOW = datetime(2026, 11, 22, 17, 0, 0, 123456, tzinfo=UTC)
HOST = HostFacts(
    hostname="builder",
    cpus=8,
    memory_ki=16 * 1024 * 1024,
    ephemeral_storage_ki=100 * 1024 * 1024,
    kernel_version="6.8.0-45-generic",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
    node_ip="10.1.2.3",
    machine_id="m-id",
    system_uuid="s-uuid",
    boot_id="b-id",
    hugepages={"hugepages-2Mi": 0, "hugepages-1Gi": 0},
)
FACTS = StatusFacts("27.3.1", [], NOW)  # runtime version, no runtime error
# Semantic versioning 2.0 with the leading "v" Kubernetes versions carry.
SEMVER = re.compile(
    r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)


def _node(**settings: object) -> dict[str, object]:
    return build_node(
        NodeSettings(node_name="vn-1", **settings), HOST, StatusFacts("27.3.1", [], NOW)
    )  # type: ignore[arg-type]


def _condition(conditions: list[dict[str, str]], kind: str) -> dict[str, str]:
    return next(c for c in conditions if c["type"] == kind)


# --- the Node object ------------------------------------------------------------------------


def test_node_has_the_kubelets_labels_plus_node_labels() -> None:
    node = _node(node_labels={"example.com/pool": "a", "node.kubernetes.io/role": "edge"})
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "vn-1",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "kubelet-sim.io/virtual": "true",
        "example.com/pool": "a",
        "node.kubernetes.io/role": "edge",
    }
    assert node["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"
    }


def test_registration_taints_go_into_the_spec() -> None:
    taints = [{"key": "virtual-kubelet.io/provider", "value": "docker", "effect": "NoSchedule"}]
    assert _node(register_with_taints=taints)["spec"] == {"taints": taints}
    assert _node(register_with_taints=[])["spec"] == {}


def test_status_fields_match_a_real_kubelet() -> None:
    status = _node()["status"]
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "16777216Ki",
        "pods": "110",
        "ephemeral-storage": "104857600Ki",
        "hugepages-2Mi": "0",
        "hugepages-1Gi": "0",
    }
    assert status["allocatable"]["memory"] == f"{16 * 1024 * 1024 - 100 * 1024}Ki"
    assert status["allocatable"]["ephemeral-storage"] == str(int(100 * 1024**3 * 0.9))
    assert status["allocatable"]["cpu"] == "8"
    assert status["addresses"] == [{"type": "InternalIP", "address": "10.1.2.3"}]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["nodeInfo"] == {
        "machineID": "m-id",
        "systemUUID": "s-uuid",
        "bootID": "b-id",
        "kernelVersion": "6.8.0-45-generic",
        "osImage": "Debian GNU/Linux 12 (bookworm)",
        "containerRuntimeVersion": "docker://27.3.1",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def test_node_parses_with_the_official_client_model() -> None:
    """Python clients (ours included) deserialise Nodes into strict models: no field missing."""
    from kubernetes.client import V1Node

    node = _node(register_with_taints=[{"key": "k", "effect": "NoSchedule"}])
    node["status"]["conditions"] = compute_conditions([], ["container runtime is down"], NOW)
    parsed = V1Node.from_dict(node)
    assert parsed.status.node_info.kubelet_version == KUBELET_VERSION


def test_kubelet_version_is_semver_and_says_kubelet_sim() -> None:
    assert SEMVER.match(KUBELET_VERSION), KUBELET_VERSION
    assert "kubelet-sim" in KUBELET_VERSION


def test_overrides_size_the_node_and_the_node_ip() -> None:
    status = _node(cpu="1500m", memory="8Gi", pods=30, node_ip="192.168.5.5")["status"]
    assert status["capacity"]["cpu"] == "1500m"
    assert status["capacity"]["memory"] == "8388608Ki"
    assert status["allocatable"]["memory"] == f"{8 * 1024 * 1024 - 100 * 1024}Ki"
    assert status["capacity"]["pods"] == status["allocatable"]["pods"] == "30"
    assert status["addresses"][0] == {"type": "InternalIP", "address": "192.168.5.5"}


INTERNAL = {"type": "InternalIP", "address": "10.1.2.3"}
HOSTNAME = {"type": "Hostname", "address": "vn-1"}


@pytest.mark.parametrize(
    ("resolved", "expected"),
    [
        ((), [INTERNAL]),  # `vn-1` resolves nowhere: an API server would fail to look it up
        (("10.9.9.9",), [INTERNAL]),  # somewhere else (a search domain's host, say)
        (("127.0.1.1",), [INTERNAL]),  # Debian's /etc/hosts line for the machine's own name
        (("fe80::1", "10.1.2.3"), [INTERNAL, HOSTNAME]),  # among its addresses: the node IP
    ],
)
def test_hostname_is_advertised_only_when_the_node_name_leads_to_the_node_ip(
    resolved: tuple[str, ...], expected: list[dict[str, str]]
) -> None:
    assert addresses(NodeSettings(node_name="vn-1"), HOST, resolved) == expected
    status = build_node(
        NodeSettings(node_name="vn-1"), HOST, StatusFacts("27.3.1", [], NOW, (), resolved)
    )
    assert status["status"]["addresses"] == expected


def test_addresses_compare_ips_not_spellings() -> None:
    settings = NodeSettings(node_name="vn-1", node_ip="2001:db8::7")
    assert addresses(settings, HOST, ("2001:DB8:0:0::7",))[1:] == [HOSTNAME]


def test_without_a_node_ip_hostname_is_all_there_is_if_the_name_resolves() -> None:
    no_ip = HostFacts(**{**HOST.__dict__, "node_ip": None})
    settings = NodeSettings(node_name="vn-1")
    assert addresses(settings, no_ip, ("10.4.4.4",)) == [HOSTNAME]
    assert addresses(settings, no_ip, ()) == []


KUBEADM_ADDRESS_TYPES = "InternalIP,ExternalIP,Hostname"  # kubeadm's, so kind's


@pytest.mark.parametrize(
    "preference",
    [
        UPSTREAM_ADDRESS_TYPES,  # Hostname first
        KUBEADM_ADDRESS_TYPES,
        "ExternalIP,InternalIP,Hostname",
        "ExternalDNS,ExternalIP,Hostname,InternalIP",
        "InternalIP,Hostname",  # the tests' control plane
    ],
)
@pytest.mark.parametrize("resolved", [(), ("10.1.2.3",)], ids=["unresolvable", "resolves"])
def test_every_preference_leads_to_the_node_ip(preference: str, resolved: tuple[str, ...]) -> None:
    """The address the API server picks (GetPreferredNodeAddress, as the fake picks it) is the
    node IP, or the node name where that resolves to the node IP."""
    found = addresses(NodeSettings(node_name="vn-1"), HOST, resolved)
    picked = preferred_address(found, preference.split(","))
    assert picked == "10.1.2.3" or (picked == "vn-1" and "10.1.2.3" in resolved)


def test_resolve_name_reads_the_hosts_resolver() -> None:
    assert "127.0.0.1" in resolve_name("localhost") or "::1" in resolve_name("localhost")
    assert resolve_name("no-such-node.invalid") == ()  # RFC 6761: never resolves


def test_a_lookup_without_an_answer_in_time_counts_as_unresolvable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answered = threading.Event()

    def slow(*_args: object, **_kwargs: object) -> list[object]:
        answered.wait(5)
        return [(0, 0, 0, "", ("10.1.2.3", 0))]

    monkeypatch.setattr(host_module.socket, "getaddrinfo", slow)
    started = time.monotonic()
    assert resolve_name("vn-1", timeout=0.2) == ()
    assert time.monotonic() - started < 2
    answered.set()


def test_reserved_hugepages_leave_allocatable_memory() -> None:
    host = HostFacts(**{**HOST.__dict__, "hugepages": {"hugepages-2Mi": 1024**3}})
    capacity, allocatable = resources(NodeSettings(node_name="vn-1"), host)
    assert capacity["hugepages-2Mi"] == "1048576Ki"
    assert allocatable["memory"] == f"{16 * 1024 * 1024 - 100 * 1024 - 1024 * 1024}Ki"


# --- conditions -----------------------------------------------------------------------------


def test_healthy_node_conditions_in_the_kubelets_order() -> None:
    conditions = compute_conditions([], [], NOW)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in conditions] == [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory",
         "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]  # fmt: skip
    assert all(c["lastHeartbeatTime"] == "2026-11-22T17:00:00Z" for c in conditions)
    assert all(c["lastTransitionTime"] == "2026-11-22T17:00:00Z" for c in conditions)


def test_runtime_down_makes_the_node_not_ready_with_the_kubelets_message() -> None:
    ready = _condition(compute_conditions([], runtime_errors(False, True), NOW), "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "KubeletNotReady",
        "container runtime is down",
    )
    never = _condition(compute_conditions([], runtime_errors(False, False), NOW), "Ready")
    assert never["message"] == "container runtime status check may not have completed yet"
    assert runtime_errors(True, False) == []


def test_several_errors_are_joined_as_an_aggregate() -> None:
    ready = _condition(compute_conditions([], ["a", "b"], NOW), "Ready")
    assert ready["message"] == "[a, b]"


def test_transition_time_moves_only_when_the_status_flips() -> None:
    later, latest = NOW + timedelta(seconds=10), NOW + timedelta(seconds=20)
    first = compute_conditions([], [], NOW)
    same = compute_conditions(first, [], later)
    ready = _condition(same, "Ready")
    assert ready["lastTransitionTime"] == "2026-11-22T17:00:00Z"
    assert ready["lastHeartbeatTime"] == "2026-11-22T17:00:10Z"
    flipped = compute_conditions(same, ["container runtime is down"], latest)
    ready = _condition(flipped, "Ready")
    assert ready["lastTransitionTime"] == ready["lastHeartbeatTime"] == "2026-11-22T17:00:20Z"
    memory = _condition(flipped, "MemoryPressure")
    assert memory["lastTransitionTime"] == "2026-11-22T17:00:00Z"


def test_status_change_ignores_heartbeat_times() -> None:
    settings = NodeSettings(node_name="vn-1")
    before = build_node(settings, HOST, FACTS)["status"]
    after = build_node(settings, HOST, replace(FACTS, now=NOW + timedelta(seconds=30)))["status"]
    after["conditions"] = compute_conditions(before["conditions"], [], NOW + timedelta(seconds=30))
    assert not status_changed(before, after)
    after["conditions"] = compute_conditions(before["conditions"], ["down"], NOW)
    assert status_changed(before, after)
    assert status_changed(None, after)
    after = {**before, "nodeInfo": {**before["nodeInfo"], "containerRuntimeVersion": "x"}}
    assert status_changed(before, after)
    assert status_changed(before, {k: v for k, v in before.items() if k != "images"} | {"x": 1})
    assert not status_changed(before, copy.deepcopy(before))
    assert before == build_node(settings, HOST, FACTS)["status"]  # left as it was


def test_micro_time_has_six_fraction_digits() -> None:
    assert format_micro_time(NOW) == "2026-11-22T17:00:00.123456Z"
    assert format_micro_time(NOW.replace(microsecond=0)) == "2026-11-22T17:00:00.000000Z"


# --- restart --------------------------------------------------------------------------------


def test_restart_reasserts_default_labels_and_keeps_the_rest() -> None:
    settings = NodeSettings(node_name="vn-1")
    existing = build_node(settings, HOST, FACTS)
    existing["metadata"]["labels"]["kubernetes.io/arch"] = "arm64"
    existing["metadata"]["labels"]["team"] = "blue"
    existing["spec"] = {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    updated = reconcile_existing(existing, settings, HOST)
    assert updated is not None
    assert updated["metadata"]["labels"]["kubernetes.io/arch"] == "amd64"
    assert updated["metadata"]["labels"]["team"] == "blue"
    assert updated["spec"] == existing["spec"]
    assert reconcile_existing(updated, settings, HOST) is None


# --- settings and their parsing -------------------------------------------------------------


def test_parse_labels() -> None:
    assert parse_labels("") == {}
    assert parse_labels("a=b, example.com/c=d,e=") == {"a": "b", "example.com/c": "d", "e": ""}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "expected key=value"),
        ("=b", "invalid label key"),
        ("a=b,a=c", "given twice"),
        ("a=not valid", "invalid value"),
        ("Bad_Prefix/a=b", "prefix must be a DNS subdomain"),
        ("a=" + "x" * 64, "at most 63 characters"),
    ],
)
def test_parse_labels_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_labels(text)


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/hostname",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "kubelet.kubernetes.io/x",
        "node.kubernetes.io/anything",
        "foo.node.kubernetes.io/y",
        "example.com/x",
        "plain",
    ],
)
def test_node_restriction_allows(key: str) -> None:
    validate_node_labels({key: "v"})


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/role",
        "node-role.kubernetes.io/worker",
        "node-restriction.kubernetes.io/team",
        "k8s.io/x",
        "example.k8s.io/x",
    ],
)
def test_node_restriction_refuses(key: str) -> None:
    with pytest.raises(ConfigError, match="not allowed for a kubelet") as info:
        NodeSettings(node_name="vn-1", node_labels={key: "v"})
    assert key in str(info.value)


def test_parse_taints() -> None:
    assert parse_taints("k=v:NoSchedule, k2:NoExecute,k3=:PreferNoSchedule") == [
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "k2", "effect": "NoExecute"},
        {"key": "k3", "effect": "PreferNoSchedule"},
    ]
    assert parse_taints("") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k=v", "expected key=value:effect"),
        ("k=v:Sometimes", "invalid taint effect 'Sometimes'"),
        (":NoSchedule", "expected key=value:effect"),
        ("k:NoSchedule,k=v:NoSchedule", "given twice"),
        ("bad key:NoSchedule", "invalid taint 'bad key'"),
    ],
)
def test_parse_taints_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_taints(text)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"node_name": "Not_A_Name"}, "invalid node name"),
        ({"node_ip": "10.0.0"}, "invalid node IP"),
        ({"pods": 0}, "at least 1"),
        ({"cpu": "two"}, "invalid cpu"),
        ({"cpu": "0.0001"}, "whole millicores"),
        ({"memory": "8"}, "forget a unit"),
        ({"kubelet_port": 70000}, "not a TCP port"),
        ({"register_with_taints": [{"key": "k", "effect": "Never"}]}, "invalid taint effect"),
    ],
)
def test_settings_validation(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        NodeSettings(**{"node_name": "vn-1", **overrides})  # type: ignore[arg-type]


# --- host facts -----------------------------------------------------------------------------


def test_go_arch_names() -> None:
    assert [go_arch(m) for m in ("x86_64", "aarch64", "armv7l", "ppc64le")] == [
        "amd64",
        "arm64",
        "arm",
        "ppc64le",
    ]


def test_os_image_reads_pretty_name(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n')
    assert os_image(str(release)) == "Ubuntu 24.04.1 LTS"
    assert os_image(str(tmp_path / "missing")) == "Linux"


def test_node_ip_comes_from_the_default_route_interface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "route"
    header = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
    table.write_text(
        header
        + "eth1\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
        + "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        + "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    )
    asked: list[str] = []

    def fake_ipv4(interface: str) -> str | None:
        asked.append(interface)
        return {"eth0": "192.0.2.7"}.get(interface)

    monkeypatch.setattr(host_module, "interface_ipv4", fake_ipv4)
    assert default_route_ip(str(table)) == "192.0.2.7"
    assert asked == ["eth0"]  # lowest metric first
    table.write_text(header)
    assert default_route_ip(str(table)) is None


def test_detect_host_reads_this_machine() -> None:
    facts = detect_host()
    assert facts.cpus >= 1
    assert facts.memory_ki > 0
    assert facts.ephemeral_storage_ki > 0
    assert facts.kernel_version
    assert facts.architecture in {"amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64"}


def test_desired_status_sets_ours_and_keeps_what_others_own() -> None:
    from kubelet_sim.node.node_object import desired_status

    server = {
        "conditions": [
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "volumesInUse": ["kubernetes.io/csi/x"],
        "capacity": {"cpu": "1"},
    }
    ours = {
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
        ],
        "capacity": {"cpu": "2"},
    }
    assert desired_status(server, ours) == {
        "conditions": [
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
            {"type": "MemoryPressure", "status": "False"},
        ],
        "volumesInUse": ["kubernetes.io/csi/x"],
        "capacity": {"cpu": "2"},
    }


def test_images_are_the_largest_fifty_named_by_digests_then_tags() -> None:
    from kubelet_sim.cri import ImageSummary
    from kubelet_sim.node.node_object import node_images

    many = [ImageSummary(f"sha256:{i:04}", (f"img{i}:v",), (), 1000 + i) for i in range(60)]
    named = ImageSummary(
        "sha256:big",
        tuple(f"t{i}:v" for i in range(4)),
        ("repo@sha256:aa", "other@sha256:bb"),
        10**9,
    )
    listed = node_images([*many, named])
    assert len(listed) == 50
    assert listed[0] == {
        "names": ["repo@sha256:aa", "other@sha256:bb", "t0:v", "t1:v", "t2:v"],
        "sizeBytes": 10**9,
    }
    assert [i["sizeBytes"] for i in listed[1:3]] == [1059, 1058], "largest first"
    assert node_images([]) == []
    shared = [*many, named]  # the runtime's list every node of a process is given
    assert node_images(shared) is node_images(shared)
    assert node_images(shared[:1]) == [{"names": ["img0:v"], "sizeBytes": 1000}]
    assert node_images(shared, limit=2) == listed[:2]


def test_system_and_kube_reservations_come_off_allocatable() -> None:
    settings = NodeSettings(
        node_name="vn-1",
        cpu="4",
        memory="8Gi",
        system_reserved=parse_reserved("cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=100"),
        kube_reserved=parse_reserved("cpu=300m, memory=1Gi"),
    )
    capacity, allocatable = resources(settings, HOST)
    assert (capacity["cpu"], allocatable["cpu"]) == ("4", "3500m")
    assert allocatable["memory"] == f"{(8 * 1024 - 500 - 1024 - 100) * 1024}Ki"
    storage = HOST.ephemeral_storage_ki * 1024
    assert allocatable["ephemeral-storage"] == str(storage - 1024**3 - int(storage * 0.1))
    with pytest.raises(ConfigError, match=r'cannot reserve "nvidia\.com/gpu" resource'):
        parse_reserved("nvidia.com/gpu=1")
    with pytest.raises(ConfigError, match="expected resource=quantity"):
        parse_reserved("cpu")
    everything = NodeSettings(node_name="vn-1", cpu="1", kube_reserved={"cpu": "2"})
    assert resources(everything, HOST)[1]["cpu"] == "0", "never below zero"
