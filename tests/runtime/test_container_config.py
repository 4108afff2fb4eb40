"""Pod spec -> sandbox and container configs, as the kubelet builds them (pure, no Docker)."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import milli_value, parse_quantity, value
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.container_config import (
    ContainerConfigError,
    container_config,
    container_resources,
    expand,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    sandbox_config,
    spec_hash,
)
from kubelet_sim.pod.spec import PodView
from tests.manifests import pod_manifest, served


def make_pod(containers: list[Json], **spec: Any) -> PodView:
    body = pod_manifest(
        "web", containers, labels={"app": "web"}, annotations={"team": "blue"}, nodeName="node-a"
    )
    body["spec"].update(spec)
    return PodView.from_api(served(body, uid="u-1"))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


OBJECTS: dict[tuple[str, str, str], Json] = {
    ("ConfigMap", "ns", "cm"): {"data": {"K": "cm-k", "OTHER": "cm-other", "1bad": "x"}},
    ("Secret", "ns", "s"): {"data": {"PASSWORD": b64("hunter2"), "K": b64("s-k")}},
}


NODE = Allocatable(cpu_milli=3500, memory_bytes=8 * 2**30, pods=110, ephemeral_storage_bytes=10**10)


def lookup(kind: str, namespace: str, name: str) -> Json | None:
    return OBJECTS.get((kind, namespace, name))


def config(container: Json, mounts: tuple[cri.Mount, ...] = (), **spec: Any) -> cri.ContainerConfig:
    pod = make_pod([{"name": "c", "image": "busybox:1.36", **container}], **spec)
    return container_config(
        pod,
        pod.containers[0],
        node="node-a",
        attempt=2,
        host_ip="10.0.0.1",
        pod_ip="172.17.0.5",
        lookup=lookup,
        allocatable=NODE,
        mounts=mounts,
    )


def env_of(container: Json, **spec: Any) -> dict[str, str]:
    return dict(config(container, **spec).env)


# --- $(VAR) expansion (cases from expansion/expand_test.go) ---------------------------------

VARS = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(VAR_A)", "A"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
        ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
        ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
        ("$(VAR_REF)", "$(VAR_A)"),  # values are not expanded again
        ("foo$(VAR_EMPTY)bar", "foobar"),
        ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
        ("$?_boo_$!", "$?_boo_$!"),
        ("$VAR_A", "$VAR_A"),
        ("$(VAR_DNE)", "$(VAR_DNE)"),
        ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
        ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
        ("$$$$$$$(VAR_A)", "$$$A"),
        ("${VAR_A}", "${VAR_A}"),
        ("$(VAR_B)_______$(A", "B_______$(A"),
        ("$(VAR_C)_______$(", "C_______$("),
        ("$(VAR_A)foobarzab$", "Afoobarzab$"),
        ("--$($($($($--", "--$($($($($--"),
        ("$(foo$$var)", "$(foo$$var)"),
        ("\n", "\n"),
    ],
)
def test_expansion_matches_the_kubelet(text: str, expected: str) -> None:
    assert expand(text, VARS) == expected


def test_env_values_expand_only_earlier_variables_and_chain() -> None:
    env = env_of(
        {
            "env": [
                {"name": "LATE_REF", "value": "$(B)"},
                {"name": "A", "value": "a"},
                {"name": "B", "value": "$(A)-b"},
                {"name": "C", "value": "$(B)-c"},
                {"name": "ESCAPED", "value": "$$(A)"},
                {"name": "UNSET", "value": "$(NOPE)"},
            ]
        }
    )
    assert env == {
        "LATE_REF": "$(B)",
        "A": "a",
        "B": "a-b",
        "C": "a-b-c",
        "ESCAPED": "$(A)",
        "UNSET": "$(NOPE)",
    }


def test_command_and_args_expand_against_the_final_env() -> None:
    cfg = config(
        {
            "command": ["/bin/sh", "-c", "echo $(GREETING) $$(GREETING) $(MISSING)"],
            "args": ["$(GREETING)", "$(FROM_CM)"],
            "env": [{"name": "GREETING", "value": "hi"}],
            "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "FROM_"}],
        }
    )
    assert cfg.entrypoint == ("/bin/sh", "-c", "echo hi $(GREETING) $(MISSING)")
    assert cfg.cmd == ("hi", "$(FROM_CM)")  # FROM_CM does not exist: only FROM_K, FROM_OTHER


def test_no_command_or_args_keeps_the_image_defaults() -> None:
    cfg = config({})
    assert cfg.entrypoint is None
    assert cfg.cmd is None
    assert config({"args": ["x"]}).entrypoint is None


# --- env sources ------------------------------------------------------------------------------


def test_env_from_comes_first_and_env_overrides_it() -> None:
    cfg = config(
        {
            "envFrom": [
                {"configMapRef": {"name": "cm"}},
                {"secretRef": {"name": "s"}, "prefix": "S_"},
            ],
            "env": [{"name": "K", "value": "literal"}, {"name": "REF", "value": "$(S_K)"}],
        }
    )
    assert cfg.env == (
        ("K", "literal"),  # replaced in place: a later definition wins
        ("OTHER", "cm-other"),
        ("S_PASSWORD", "hunter2"),
        ("S_K", "s-k"),
        ("REF", "s-k"),
    )


def test_env_from_skips_invalid_names_unless_the_prefix_fixes_them() -> None:
    assert "1bad" not in env_of({"envFrom": [{"configMapRef": {"name": "cm"}}]})
    assert env_of({"envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "P_"}]})["P_1bad"] == "x"


def test_later_env_from_overrides_earlier() -> None:
    env = env_of({"envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s"}}]})
    assert env["K"] == "s-k"


def test_key_refs_read_config_maps_and_decode_secrets() -> None:
    env = env_of(
        {
            "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "K"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASSWORD"}}},
            ]
        }
    )
    assert env == {"A": "cm-k", "B": "hunter2"}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"configMapKeyRef": {"name": "nope", "key": "K"}}, 'configmap "nope" not found'),
        ({"secretKeyRef": {"name": "nope", "key": "K"}}, 'secret "nope" not found'),
        ({"configMapKeyRef": {"name": "cm", "key": "k"}}, "couldn't find key k in ConfigMap ns/cm"),
        ({"secretKeyRef": {"name": "s", "key": "k"}}, "couldn't find key k in Secret ns/s"),
    ],
)
def test_missing_objects_and_keys_fail_with_the_kubelet_message(source: Json, message: str) -> None:
    with pytest.raises(ContainerConfigError) as err:
        config({"env": [{"name": "X", "valueFrom": source}]})
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("env_from", "message"),
    [
        ({"configMapRef": {"name": "gone"}}, 'configmap "gone" not found'),
        ({"secretRef": {"name": "gone"}}, 'secret "gone" not found'),
    ],
)
def test_missing_env_from_object_fails(env_from: Json, message: str) -> None:
    with pytest.raises(ContainerConfigError, match=f"^{message}$"):
        config({"envFrom": [env_from]})


def test_optional_references_are_skipped_entirely() -> None:
    env = env_of(
        {
            "envFrom": [
                {"configMapRef": {"name": "gone", "optional": True}},
                {"secretRef": {"name": "gone", "optional": True}},
            ],
            "env": [
                {"name": "A", "value": "keep"},
                {
                    "name": "NO_CM",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "gone", "key": "K", "optional": True}
                    },
                },
                {
                    "name": "NO_KEY",
                    "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": True}},
                },
                {
                    "name": "A",
                    "valueFrom": {"secretKeyRef": {"name": "x", "key": "k", "optional": True}},
                },
            ],
        }
    )
    assert env == {"A": "keep"}


def test_field_refs_cover_the_downward_api() -> None:
    paths = {
        "NAME": "metadata.name",
        "NS": "metadata.namespace",
        "UID": "metadata.uid",
        "LABEL": "metadata.labels['app']",
        "ANNOTATION": "metadata.annotations['team']",
        "MISSING_LABEL": "metadata.labels['nope']",
        "NODE": "spec.nodeName",
        "SA": "spec.serviceAccountName",
        "HOST_IP": "status.hostIP",
        "HOST_IPS": "status.hostIPs",
        "POD_IP": "status.podIP",
        "POD_IPS": "status.podIPs",
    }
    env = env_of(
        {
            "env": [
                {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                for name, path in paths.items()
            ]
        },
        serviceAccountName="builder",
    )
    assert env == {
        "NAME": "web",
        "NS": "ns",
        "UID": "u-1",
        "LABEL": "web",
        "ANNOTATION": "blue",
        "MISSING_LABEL": "",
        "NODE": "node-a",
        "SA": "builder",
        "HOST_IP": "10.0.0.1",
        "HOST_IPS": "10.0.0.1",
        "POD_IP": "172.17.0.5",
        "POD_IPS": "172.17.0.5",
    }


def resource_refs(table: list[tuple[str, str, str | None, str]]) -> list[Json]:
    """The env of a table of (name, resource, divisor or None, what the container sees)."""
    env: list[Json] = []
    for name, resource, divisor, _ in table:
        selector: Json = {"resource": resource}
        if divisor:
            selector["divisor"] = divisor
        env.append({"name": name, "valueFrom": {"resourceFieldRef": selector}})
    return env


def test_resource_field_refs_divide_and_round_up() -> None:
    table = [
        ("CPU_LIMIT", "limits.cpu", None, "2"),
        ("CPU_LIMIT_M", "limits.cpu", "1m", "1500"),
        ("CPU_REQUEST", "requests.cpu", None, "1"),
        ("MEM_LIMIT", "limits.memory", None, "134217728"),
        ("MEM_REQUEST_MI", "requests.memory", "1Mi", "64"),
        ("MEM_LIMIT_G", "limits.memory", "1G", "1"),
    ]
    resources = {
        "limits": {"cpu": "1500m", "memory": "128Mi"},
        "requests": {"cpu": "250m", "memory": "64Mi"},
    }
    env = env_of({"resources": resources, "env": resource_refs(table)})
    assert env == {name: seen for name, *_, seen in table}


def test_resource_field_refs_read_the_node_allocatable_for_unset_limits() -> None:
    """defaultPodLimitsForDownwardAPI: an unset limit is the node's; a request stays 0."""
    table = [
        ("CPU_LIMIT", "limits.cpu", None, "4"),
        ("MEM_LIMIT", "limits.memory", None, str(8 * 2**30)),
        ("CPU_REQUEST", "requests.cpu", None, "0"),
    ]
    assert env_of({"env": resource_refs(table)}) == {name: seen for name, *_, seen in table}


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ({"resource": "limits.cpu", "containerName": "nope"}, "container nope not found"),
        ({"resource": "limits.gpu"}, "unsupported container resource : limits.gpu"),
    ],
)
def test_resource_field_ref_errors_are_container_config_errors(
    selector: Json, message: str
) -> None:
    with pytest.raises(ContainerConfigError) as caught:
        env_of({"env": [{"name": "X", "valueFrom": {"resourceFieldRef": selector}}]})
    assert str(caught.value) == message


def test_env_without_value_or_source_is_empty() -> None:
    assert env_of({"env": [{"name": "EMPTY"}, {"name": "ALSO", "value": ""}]}) == {
        "EMPTY": "",
        "ALSO": "",
    }


# --- plain fields -----------------------------------------------------------------------------


def test_container_fields_are_copied() -> None:
    cfg = config(
        {
            "workingDir": "/work",
            "tty": True,
            "stdin": True,
            "stdinOnce": True,
            "terminationMessagePath": "/tmp/msg",
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
        terminationGracePeriodSeconds=5,
    )
    assert cfg.pod == cri.PodRef(node="node-a", name="web", namespace="ns", uid="u-1")
    assert (cfg.name, cfg.image, cfg.attempt) == ("c", "busybox:1.36", 2)
    assert cfg.working_dir == "/work"
    assert (cfg.tty, cfg.stdin, cfg.stdin_once) == (True, True, True)
    assert cfg.termination_message_path == "/tmp/msg"
    assert cfg.termination_message_policy == "FallbackToLogsOnError"
    assert cfg.termination_grace_period == 5


def test_defaults() -> None:
    cfg = config({})
    assert cfg.working_dir is None
    assert cfg.termination_message_path == "/dev/termination-log"
    assert cfg.termination_message_policy == "File"
    assert cfg.termination_grace_period == 30
    assert cfg.mounts == ()


def test_mounts_are_passed_through() -> None:
    mount = cri.Mount("/var/lib/x", "/data", read_only=True)
    assert config({}, mounts=(mount,)).mounts == (mount,)


def test_spec_hash_is_stable_and_detects_changes() -> None:
    first = make_pod([{"name": "c", "image": "a:1", "env": [{"name": "X", "value": "1"}]}])
    same = make_pod([{"image": "a:1", "env": [{"value": "1", "name": "X"}], "name": "c"}])
    changed = make_pod([{"name": "c", "image": "a:2", "env": [{"name": "X", "value": "1"}]}])
    digest = spec_hash(first.containers[0])
    assert digest == spec_hash(same.containers[0])
    assert digest != spec_hash(changed.containers[0])
    int(digest, 16)
    assert config({}).spec_hash == spec_hash(
        make_pod([{"name": "c", "image": "busybox:1.36"}]).containers[0]
    )


# --- resources --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "exact", "milli", "whole"),
    [
        ("500m", Decimal("0.5"), 500, 1),
        ("0.5", Decimal("0.5"), 500, 1),
        ("2", Decimal(2), 2000, 2),
        ("1.5", Decimal("1.5"), 1500, 2),
        ("100u", Decimal("0.0001"), 1, 1),
        ("1k", Decimal(1000), 1_000_000, 1000),
        ("128Mi", Decimal(134217728), 134217728000, 134217728),
        ("1Gi", Decimal(2**30), 2**30 * 1000, 2**30),
        ("1G", Decimal(10**9), 10**12, 10**9),
        ("2Ti", Decimal(2 * 2**40), 2 * 2**40 * 1000, 2 * 2**40),
        ("64Ki", Decimal(65536), 65536000, 65536),
        ("3M", Decimal(3_000_000), 3_000_000_000, 3_000_000),
        ("1e3", Decimal(1000), 1_000_000, 1000),
    ],
)
def test_quantities(text: str, exact: Decimal, milli: int, whole: int) -> None:
    assert parse_quantity(text) == exact
    assert milli_value(text) == milli
    assert value(text) == whole


def test_numeric_quantities_and_invalid_ones() -> None:
    assert milli_value(2) == 2000
    assert milli_value(0.25) == 250
    for bad in ("", "abc", "1Q", "1.2.3", "Mi"):
        with pytest.raises(ValueError, match="quantit"):
            parse_quantity(bad)


@pytest.mark.parametrize(
    ("milli", "shares"),
    [(0, 2), (1, 2), (2, 2), (250, 256), (500, 512), (1000, 1024), (1500, 1536), (10**6, 262144)],
)
def test_milli_cpu_to_shares(milli: int, shares: int) -> None:
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(
    ("milli", "quota"), [(0, 0), (1, 1000), (5, 1000), (10, 1000), (250, 25000), (1500, 150000)]
)
def test_milli_cpu_to_quota(milli: int, quota: int) -> None:
    assert milli_cpu_to_quota(milli) == quota


def resources_for(resources: Json) -> cri.Resources:
    return container_resources(
        make_pod([{"name": "c", "image": "i", "resources": resources}]).containers[0]
    )


def test_limits_and_requests_become_docker_knobs() -> None:
    res = resources_for({"limits": {"cpu": "0.5", "memory": "256Mi"}, "requests": {"cpu": "250m"}})
    assert res == cri.Resources(
        cpu_period=100000, cpu_quota=50000, cpu_shares=256, memory_limit_bytes=256 * 2**20
    )


def test_shares_come_from_the_limit_when_there_is_no_request() -> None:
    res = resources_for({"limits": {"cpu": "2"}})
    assert (res.cpu_shares, res.cpu_quota, res.cpu_period) == (2048, 200000, 100000)


def test_no_resources_means_minimum_shares_and_no_limits() -> None:
    assert resources_for({}) == cri.Resources(cpu_shares=2)
    assert resources_for({"requests": {"cpu": "1"}}) == cri.Resources(cpu_shares=1024)


def test_tiny_limit_gets_the_minimum_quota() -> None:
    assert resources_for({"limits": {"cpu": "1m"}}).cpu_quota == 1000


# --- security ---------------------------------------------------------------------------------


def test_container_security_context_wins_over_the_pod() -> None:
    cfg = config(
        {
            "securityContext": {
                "runAsUser": 1000,
                "privileged": True,
                "readOnlyRootFilesystem": True,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                "allowPrivilegeEscalation": False,
            }
        },
        securityContext={"runAsUser": 0, "runAsGroup": 3000},
    )
    assert cfg.security == cri.SecurityConfig(
        run_as_user=1000,
        run_as_group=3000,
        privileged=True,
        read_only_rootfs=True,
        capabilities_add=("NET_ADMIN",),
        capabilities_drop=("ALL",),
        no_new_privileges=True,
    )


def test_pod_security_context_applies_when_the_container_is_silent() -> None:
    security = config({}, securityContext={"runAsUser": 2000, "runAsGroup": 0}).security
    assert (security.run_as_user, security.run_as_group) == (2000, 0)
    assert config({}).security == cri.SecurityConfig()


def test_allow_privilege_escalation_true_or_unset_keeps_privileges() -> None:
    assert not config(
        {"securityContext": {"allowPrivilegeEscalation": True}}
    ).security.no_new_privileges


# --- sandbox ----------------------------------------------------------------------------------


def test_sandbox_config() -> None:
    pod = make_pod(
        [
            {
                "name": "c",
                "image": "i",
                "ports": [
                    {"containerPort": 80, "hostPort": 8080},
                    {
                        "containerPort": 53,
                        "hostPort": 5353,
                        "protocol": "UDP",
                        "hostIP": "127.0.0.1",
                    },
                    {"containerPort": 9090},
                ],
            }
        ],
        hostPID=True,
    )
    sandbox = sandbox_config(pod, node="node-a", attempt=1, pause_image="pause:3.9")
    assert sandbox.pod == cri.PodRef(node="node-a", name="web", namespace="ns", uid="u-1")
    assert (sandbox.attempt, sandbox.image, sandbox.hostname) == (1, "pause:3.9", "web")
    assert sandbox.port_mappings == (
        cri.PortMapping(container_port=80, host_port=8080),
        cri.PortMapping(container_port=53, host_port=5353, protocol="UDP", host_ip="127.0.0.1"),
    )
    assert (sandbox.host_network, sandbox.host_pid, sandbox.host_ipc) == (False, True, False)


def test_sandbox_hostname_prefers_spec_hostname_and_is_truncated() -> None:
    pod = make_pod([], hostname="custom", hostNetwork=True, hostIPC=True)
    sandbox = sandbox_config(pod, node="n", attempt=0, pause_image="p")
    assert sandbox.hostname == "custom"
    assert (sandbox.host_network, sandbox.host_ipc) == (True, True)

    long_name = "a" * 62 + "-b" + "c" * 10
    raw = {
        "metadata": {"name": long_name, "namespace": "ns", "uid": "u"},
        "spec": {"containers": []},
    }
    hostname = sandbox_config(PodView.from_api(raw), node="n", attempt=0, pause_image="p").hostname
    assert hostname == "a" * 62  # cut at 63 characters, then the trailing '-' dropped
