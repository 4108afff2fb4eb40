"""The host-access gate's one rule set, over every kind of container and every request, with
--allow-privileged off and on: where a container is created, and at admission."""

from __future__ import annotations

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import REJECTED_PREFIX, Allocatable, Rejection, admit
from kubelet_sim.pod.host_access import container_refusal
from kubelet_sim.pod.spec import ContainerKind, PodView

NODE = Allocatable(cpu_milli=2000, memory_bytes=2**30, pods=10)
KINDS = (ContainerKind.INIT, ContainerKind.APP, ContainerKind.EPHEMERAL)
NOUN = {
    ContainerKind.INIT: "init container",
    ContainerKind.APP: "container",
    ContainerKind.EPHEMERAL: "ephemeral container",
}
PRIVILEGED = {
    ContainerKind.INIT: "privileged init container",  # canRunPod's words
    ContainerKind.APP: "privileged container",
    ContainerKind.EPHEMERAL: 'privileged ephemeral container "x"',  # it never saw these
}

# request name -> (the container's extra fields, what is refused: a template or None)
REQUESTS: dict[str, tuple[Json, str | None]] = {
    "privileged": ({"securityContext": {"privileged": True}}, "{privileged}"),
    "cap add SYS_ADMIN": (
        {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
        'added capabilities [SYS_ADMIN] for {noun} "x"',
    ),
    # Docker's defaults, so nothing more (Pod Security's baseline and restricted allow it)
    "cap add NET_BIND_SERVICE": (
        {"securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}},
        None,
    ),
    "drop ALL, add NET_BIND_SERVICE": (
        {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}},
        None,
    ),
    "cap add NET_RAW": (  # a Docker default, but not baseline's: ARP and DNS spoofing
        {"securityContext": {"capabilities": {"add": ["NET_RAW"]}}},
        'added capabilities [NET_RAW] for {noun} "x"',
    ),
    "cap add ALL": (
        {"securityContext": {"capabilities": {"add": ["ALL"]}}},
        'added capabilities [ALL] for {noun} "x"',
    ),
    "cap add chown, cap_sys_admin": (  # spelled as Docker also reads them; only one refused
        {"securityContext": {"capabilities": {"add": ["chown", "cap_sys_admin"]}}},
        'added capabilities [cap_sys_admin] for {noun} "x"',
    ),
    "procMount Unmasked": (
        {"securityContext": {"procMount": "Unmasked"}},
        'procMount Unmasked for {noun} "x"',
    ),
    "hostPort 80": (
        {"ports": [{"containerPort": 80, "hostPort": 80}]},
        'host port 80 for {noun} "x"',
    ),
    "hostPort 8080": ({"ports": [{"containerPort": 80, "hostPort": 8080}]}, None),
    "AppArmor Unconfined": (
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        'AppArmor profile Unconfined for {noun} "x"',
    ),
    "drop-only caps": ({"securityContext": {"capabilities": {"drop": ["ALL"], "add": []}}}, None),
    "privileged false, procMount Default": (
        {"securityContext": {"privileged": False, "procMount": "Default"}},
        None,
    ),
    "nothing": ({}, None),
}


def _pod(kind: ContainerKind, extra: Json) -> PodView:
    """A pod whose container "x", of the given kind, asks for `extra`; "main" asks nothing."""
    tested = {"name": "x", "image": "busybox", **extra}
    spec: Json = {"containers": [{"name": "main", "image": "busybox"}]}
    if kind is ContainerKind.APP:
        spec["containers"].append(tested)
    else:
        spec[str(kind)] = [tested]
    return PodView.from_api(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": spec}
    )


@pytest.mark.parametrize("allow_privileged", [False, True], ids=["no flag", "allow-privileged"])
@pytest.mark.parametrize("request_name", list(REQUESTS))
@pytest.mark.parametrize("kind", KINDS, ids=[k.name.lower() for k in KINDS])
def test_one_gate_for_every_container_kind(
    kind: ContainerKind, request_name: str, allow_privileged: bool
) -> None:
    extra, template = REQUESTS[request_name]
    pod = _pod(kind, extra)
    [x] = [c for c in pod.all_containers if c.name == "x"]
    assert pod.kind_of(x) is kind
    what = template and template.format(privileged=PRIVILEGED[kind], noun=NOUN[kind])
    expected = (
        None
        if what is None or allow_privileged
        else f'pod with UID "u-1" specified {what}, but is disallowed'
    )
    assert container_refusal(pod, x, allow_privileged=allow_privileged) == expected

    # Admission says the same of init and app containers (the pod is refused, Failed); an
    # ephemeral container is refused alone where it would be created, never its pod.
    admitted = admit(pod, active_pods=(), allocatable=NODE, allow_privileged=allow_privileged)
    if expected is None or kind is ContainerKind.EPHEMERAL:
        assert admitted is None
    else:
        assert admitted == Rejection("Forbidden", REJECTED_PREFIX + expected)


def test_the_first_request_of_a_container_is_the_one_named() -> None:
    both = {"securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}}
    pod = _pod(ContainerKind.EPHEMERAL, both)
    assert container_refusal(pod, pod.ephemeral_containers[0], allow_privileged=False) == (
        'pod with UID "u-1" specified privileged ephemeral container "x", but is disallowed'
    )


def test_at_admission_containers_come_before_the_pods_own_requests() -> None:
    """canRunPod's order: privileged containers, then host namespaces; then hostPath."""
    pod = _pod(ContainerKind.INIT, {"securityContext": {"privileged": True}})
    raw = {**pod.raw, "spec": {**pod.spec, "hostNetwork": True}}
    rejection = admit(
        PodView.from_api(raw), active_pods=(), allocatable=NODE, allow_privileged=False
    )
    assert rejection is not None
    assert rejection.event_message == (
        'pod with UID "u-1" specified privileged init container, but is disallowed'
    )
