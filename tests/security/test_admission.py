"""The kubelet's admission of a bound pod: privilege gate, then the scheduler's resource fit."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import (
    Allocatable,
    Rejection,
    Requests,
    admit,
    admit_in_order,
    pod_requests,
    total_requests,
)
from kubelet_sim.pod.spec import PodView

NODE = Allocatable(cpu_milli=2000, memory_bytes=4 * 2**30, pods=3)


def container(name: str = "c", requests: Json | None = None, **extra: Any) -> Json:
    body: Json = {"name": name, "image": "busybox", **extra}
    if requests is not None:
        body["resources"] = {"requests": requests}
    return body


def pod(*containers: Json, uid: str = "u-1", init: tuple[Json, ...] = (), **spec: Any) -> PodView:
    return PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": uid},
            "spec": {"containers": list(containers), "initContainers": list(init), **spec},
        }
    )


def check(candidate: PodView, *active: PodView, allow_privileged: bool = False) -> Rejection | None:
    return admit(candidate, active_pods=active, allocatable=NODE, allow_privileged=allow_privileged)


def test_a_pod_that_fits_is_admitted() -> None:
    running = pod(container(requests={"cpu": "1", "memory": "1Gi"}), uid="a")
    assert check(pod(container(requests={"cpu": "1", "memory": "3Gi"})), running) is None


def test_a_pod_without_requests_only_needs_a_pod_slot() -> None:
    hog = pod(container(requests={"cpu": "2", "memory": "4Gi"}), uid="a")
    assert check(pod(container()), hog) is None


@pytest.mark.parametrize(
    ("active", "requests", "what"),
    [
        ([None, None, None], None, "pods, requested: 1, used: 3, capacity: 3"),
        ([{"cpu": "500m"}], {"cpu": "1.6"}, "cpu, requested: 1600, used: 500, capacity: 2000"),
        (
            [{"memory": "3Gi"}],
            {"memory": "1536Mi"},
            "memory, requested: 1610612736, used: 3221225472, capacity: 4294967296",
        ),
    ],
    ids=["too-many-pods", "cpu-in-millicores", "memory-in-bytes"],
)
def test_a_pod_that_does_not_fit_is_rejected_with_the_resource_and_its_numbers(
    active: list[Json | None], requests: Json | None, what: str
) -> None:
    """`active` holds the requests of each running pod (None: a container without any); the
    reason is OutOf<resource>, the resource being the message's first word."""
    running = [pod(container(requests=r), uid=f"a{i}") for i, r in enumerate(active)]
    resource = what.partition(",")[0]
    assert check(pod(container(requests=requests)), *running) == Rejection(
        f"OutOf{resource}", f"Pod was rejected: Node didn't have enough resource: {what}"
    )


def test_cpu_is_reported_before_memory() -> None:
    rejection = check(pod(container(requests={"cpu": "3", "memory": "5Gi"})))
    assert rejection is not None
    assert rejection.reason == "OutOfcpu"


def test_exact_fit_is_admitted() -> None:
    running = pod(container(requests={"cpu": "1500m"}), uid="a")
    assert check(pod(container(requests={"cpu": "500m", "memory": "4Gi"})), running) is None


def test_effective_requests_are_the_max_of_app_sum_and_init_containers() -> None:
    app = (container("a", {"cpu": "300m", "memory": "100"}), container("b", {"cpu": "200m"}))
    small_init = pod(*app, init=(container("i", {"cpu": "400m", "memory": "500"}),))
    assert pod_requests(small_init) == Requests(cpu_milli=500, memory_bytes=500)
    big_init = pod(*app, init=(container("i", {"cpu": "1"}), container("j", {"cpu": "700m"})))
    assert pod_requests(big_init).cpu_milli == 1000


def test_init_container_requests_can_reject_a_pod() -> None:
    rejection = check(
        pod(container(requests={"cpu": "100m"}), init=(container("i", {"cpu": "3"}),))
    )
    assert rejection is not None
    assert rejection.message.endswith("cpu, requested: 3000, used: 0, capacity: 2000")


def test_sidecars_add_to_the_app_containers_and_to_later_init_steps() -> None:
    sidecar = container("side", {"cpu": "200m"}, restartPolicy="Always")
    later_init = container("migrate", {"cpu": "1"})
    candidate = pod(container(requests={"cpu": "500m"}), init=(sidecar, later_init))
    assert pod_requests(candidate).cpu_milli == 1200  # max(500 + 200, 200 + 1000)


def test_limits_stand_in_for_missing_requests_and_overhead_counts() -> None:
    limited = pod(
        {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Mi"}}}
    )
    assert pod_requests(limited) == Requests(cpu_milli=1000, memory_bytes=2**20)
    with_overhead = pod(container(requests={"cpu": "100m"}), overhead={"cpu": "250m"})
    assert pod_requests(with_overhead).cpu_milli == 350
    assert total_requests([limited, with_overhead]) == Requests(1350, 2**20)


@pytest.mark.parametrize(
    ("candidate", "what"),
    [
        (pod(container(securityContext={"privileged": True})), "privileged container"),
        (
            pod(container(), init=(container("i", securityContext={"privileged": True}),)),
            "privileged init container",
        ),
        (pod(container(), hostNetwork=True), "host networking"),
        (pod(container(), hostPID=True), "host PID"),
        (pod(container(), hostIPC=True), "host ipc"),
        (
            pod(container(), volumes=[{"name": "sock", "hostPath": {"path": "/run/docker.sock"}}]),
            'hostPath volume "sock"',
        ),
        (
            pod(container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
            'added capabilities [SYS_ADMIN] for container "c"',
        ),
        (
            pod(
                container(),
                init=(container("i", securityContext={"capabilities": {"add": ["NET_RAW"]}}),),
            ),
            'added capabilities [NET_RAW] for init container "i"',
        ),
        (
            pod(container(ports=[{"containerPort": 80, "hostPort": 80}])),
            'host port 80 for container "c"',
        ),
    ],
)
def test_privileged_requests_are_forbidden_unless_allowed(candidate: PodView, what: str) -> None:
    assert check(candidate) == Rejection(
        "Forbidden", f'Pod was rejected: pod with UID "u-1" specified {what}, but is disallowed'
    )
    assert check(candidate, allow_privileged=True) is None


def test_privileged_false_is_fine() -> None:
    assert check(pod(container(securityContext={"privileged": False}))) is None


def test_what_stays_allowed_without_the_flag() -> None:
    """Dropping capabilities, high host ports and node-local volumes never reach the host."""
    harmless = pod(
        container(
            securityContext={"capabilities": {"drop": ["ALL"], "add": []}},
            ports=[{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}],
        ),
        volumes=[{"name": "e", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "s"}}],
    )
    assert check(harmless) is None


def test_the_privilege_gate_comes_before_resources() -> None:
    rejection = check(pod(container(requests={"cpu": "99"}), hostNetwork=True))
    assert rejection is not None
    assert rejection.reason == "Forbidden"


def created(view_pod: PodView, at: str) -> PodView:
    raw = {**view_pod.raw, "metadata": {**view_pod.raw["metadata"], "creationTimestamp": at}}
    return PodView.from_api(raw)


def in_order(
    *undecided: PodView, admitted: tuple[PodView, ...] = (), here: set[str] | None = None
) -> dict[str, Rejection | None]:
    return admit_in_order(
        undecided,
        admitted=admitted,
        already_here=here or set(),
        allocatable=NODE,
        allow_privileged=False,
    )


def test_a_burst_loses_only_the_pod_that_no_longer_fits() -> None:
    burst = [pod(container(requests={"cpu": "800m"}), uid=f"p{i}") for i in range(3)]
    decisions = in_order(*burst)
    assert [decisions[p.uid] is None for p in burst] == [True, True, False]
    rejection = decisions["p2"]
    assert rejection is not None
    assert rejection.reason == "OutOfcpu"
    assert rejection.message.endswith("requested: 800, used: 1600, capacity: 2000")


def test_pods_are_admitted_oldest_first_whatever_order_they_came_in() -> None:
    young = created(pod(container(requests={"cpu": "1500m"}), uid="young"), "2026-01-01T00:00:09Z")
    old = created(pod(container(requests={"cpu": "1500m"}), uid="old"), "2026-01-01T00:00:01Z")
    decisions = in_order(young, old)
    assert decisions["old"] is None
    assert decisions["young"] is not None


def test_only_admitted_pods_count() -> None:
    running = pod(container(requests={"cpu": "1"}), uid="running")
    decisions = in_order(pod(container(requests={"cpu": "1"}), uid="new"), admitted=(running,))
    assert decisions == {"new": None}
    full = pod(container(requests={"cpu": "1500m"}), uid="full")
    assert in_order(pod(container(requests={"cpu": "1"}), uid="new"), admitted=(full,))["new"]


def test_pods_already_running_here_are_kept_even_when_the_node_shrank() -> None:
    a = created(pod(container(requests={"cpu": "1500m"}), uid="a"), "2026-01-01T00:00:01Z")
    b = created(pod(container(requests={"cpu": "1500m"}), uid="b"), "2026-01-01T00:00:02Z")
    newcomer = created(pod(container(requests={"cpu": "100m"}), uid="c"), "2026-01-01T00:00:00Z")
    decisions = in_order(a, b, newcomer, here={"a", "b"})
    assert decisions["a"] is None
    assert decisions["b"] is None
    rejected = decisions["c"]
    assert rejected is not None
    assert rejected.reason == "OutOfcpu"
