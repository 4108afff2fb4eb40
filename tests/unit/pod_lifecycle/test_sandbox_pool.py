"""The warm sandbox pool on fakes: which pods may use it, the claim order, refill, the pod
limit, adoption after a crash and removal at stop. Docker's side:
tests/pod_lifecycle/test_sandbox_pool.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kubelet_sim import cri
from kubelet_sim.cli.node_options import parse_pool_size
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.sandbox_pool import (
    AUTO_CAP,
    RECENT_SECONDS,
    adoption,
    pool_refusal,
    pool_target,
)
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.pool import REFILL_AFTER_CLAIM, SandboxPool
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from kubelet_sim.validation import ConfigError
from tests.cluster import wait_for
from tests.fakeruntime import FakeRuntime
from tests.unit.harness import Node, container, pod_body


def _view(**spec: object) -> PodView:
    return PodView.from_api(pod_body(**spec))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"hostNetwork": True}, "hostNetwork"),
        ({"hostPID": True}, "hostPID"),
        ({"hostIPC": True}, "hostIPC"),
        (
            {"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}},
            "sysctls",
        ),
        ({"containers": [container(ports=[{"containerPort": 80, "hostPort": 8080}])]}, "hostPort"),
        ({"runtimeClassName": "gvisor"}, "runtimeClassName"),
        ({"hostUsers": False}, "hostUsers"),
    ],
)
def test_pods_whose_sandbox_is_made_for_them_skip_the_pool(spec: dict, reason: str) -> None:
    refusal = pool_refusal(_view(**spec))
    assert refusal is not None
    assert refusal.startswith(reason)


def test_an_ordinary_pod_may_use_the_pool() -> None:
    ports = [{"containerPort": 80}]  # exposed only: nothing is published for it
    assert pool_refusal(_view(containers=[container(ports=ports)], hostname="h")) is None
    assert pool_refusal(_view(shareProcessNamespace=True, subdomain="s")) is None


def test_the_pool_size_option_is_auto_or_a_fixed_size() -> None:
    assert parse_pool_size("auto") is None
    assert parse_pool_size(" Auto ") is None
    assert parse_pool_size("0") == 0
    assert parse_pool_size("3") == 3
    for bad in ("-1", "two", ""):
        with pytest.raises(ConfigError, match="--sandbox-pool-size"):
            parse_pool_size(bad)


def test_a_fixed_pool_fills_to_its_size_within_the_pod_limit() -> None:
    assert pool_target(size=2, recent_starts=0, pods_in_use=0, max_pods=110) == 2
    assert pool_target(size=2, recent_starts=0, pods_in_use=109, max_pods=110) == 1
    assert pool_target(size=2, recent_starts=9, pods_in_use=110, max_pods=110) == 0
    assert pool_target(size=2, recent_starts=0, pods_in_use=120, max_pods=110) == 0
    assert pool_target(size=0, recent_starts=9, pods_in_use=0, max_pods=110) == 0


def test_the_automatic_pool_follows_the_recent_starts_up_to_its_cap_and_the_pod_limit() -> None:
    assert pool_target(size=None, recent_starts=0, pods_in_use=0, max_pods=110) == 0
    assert pool_target(size=None, recent_starts=1, pods_in_use=1, max_pods=110) == 1
    assert pool_target(size=None, recent_starts=3, pods_in_use=3, max_pods=110) == 3
    assert pool_target(size=None, recent_starts=30, pods_in_use=30, max_pods=110) == AUTO_CAP
    assert pool_target(size=None, recent_starts=30, pods_in_use=108, max_pods=110) == 2
    assert pool_target(size=None, recent_starts=30, pods_in_use=110, max_pods=110) == 0


def test_adoption_keeps_the_oldest_running_and_removes_the_rest() -> None:
    found = [
        cri.PooledSandbox("c", 30.0, running=True),
        cri.PooledSandbox("a", 10.0, running=True),
        cri.PooledSandbox("s", 5.0, running=False),
        cri.PooledSandbox("b", 20.0, running=True),
    ]
    keep, remove = adoption(found, size=2)
    assert [s.id for s in keep] == ["a", "b"]
    assert sorted(s.id for s in remove) == ["c", "s"]


def _filled(node: Node, size: int) -> list[str]:
    node.pool.start()
    ready: list[str] = wait_for(
        lambda: node.pool.ready() if len(node.pool.ready()) == size else None,
        10,
        "the pool to fill",
    )
    return ready


@pytest.fixture
def pooled_node(tmp_path: Path):  # type: ignore[no-untyped-def]
    made = Node(tmp_path, pool_size=2)
    yield made
    made.close()


def test_a_pod_takes_the_oldest_pool_sandbox_with_its_hostname_and_the_pool_refills(
    pooled_node: Node,
) -> None:
    node = pooled_node
    oldest, _ = _filled(node, 2)
    uid = node.add(pod_body(name="web"))
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    assert node.runtime.operations("claim_sandbox") == [oldest]
    assert node.runtime.operations("run_sandbox") == []
    sandbox = next(c for c in node.runtime.list_containers() if c.is_sandbox)
    assert (sandbox.id, sandbox.pod.uid) == (oldest, uid)
    assert node.runtime.hostnames[oldest] == "web"
    assert node.last_status(uid)["podIP"] == sandbox.ip
    journal = node.runtime.files.read_journal(uid)
    assert [e["id"] for e in journal if e["step"] == "sandbox-from-pool"] == [oldest[:12]]
    wait_for(
        lambda: len(node.pool.ready()) == 2 and oldest not in node.pool.ready(),
        10,
        "the pool to refill",
    )
    assert len(node.runtime.operations("run_pool_sandbox")) == 3


def test_the_refill_waits_until_the_claiming_pods_containers_had_their_turn(
    pooled_node: Node,
) -> None:
    node = pooled_node
    _filled(node, 2)
    runtime = node.runtime
    claimed_at: list[float] = []
    made_at: list[float] = []
    claim, make = runtime.claim_sandbox, runtime.run_pool_sandbox

    def timed_claim(sandbox_id: str, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        claimed_at.append(time.monotonic())
        return claim(sandbox_id, cfg)

    def timed_make(image: str) -> str:
        made_at.append(time.monotonic())
        return make(image)

    runtime.claim_sandbox = timed_claim  # type: ignore[method-assign]
    runtime.run_pool_sandbox = timed_make  # type: ignore[method-assign]
    uid = node.add(pod_body(name="web"))
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    wait_for(lambda: made_at, 10, "the refill")
    assert len(claimed_at) == 1
    assert made_at[0] - claimed_at[0] >= REFILL_AFTER_CLAIM


def test_a_pod_that_needs_its_own_sandbox_leaves_the_pool_alone(pooled_node: Node) -> None:
    node = pooled_node
    ready = _filled(node, 2)
    ports = [{"containerPort": 80, "hostPort": 8080}]
    uid = node.add(pod_body(containers=[container(ports=ports)]))
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    assert node.runtime.operations("run_sandbox") == [uid]
    assert node.runtime.operations("claim_sandbox") == []
    assert node.pool.ready() == ready


def test_a_failed_claim_falls_back_to_a_new_sandbox_and_the_failed_one_is_removed(
    pooled_node: Node,
) -> None:
    node = pooled_node
    oldest, _ = _filled(node, 2)
    node.runtime.claim_error = "gone"
    uid = node.add(pod_body())
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    assert node.runtime.operations("run_sandbox") == [uid]
    wait_for(lambda: oldest in node.runtime.operations("remove"), 10, "the failed one removed")


def test_the_pool_is_removed_at_stop(tmp_path: Path) -> None:
    node = Node(tmp_path, pool_size=2)
    _filled(node, 2)
    node.close()
    assert node.runtime.pool_sandboxes() == []
    assert not node.pool.running()


def test_pool_size_zero_makes_none(node: Node) -> None:
    node.pool.start()
    uid = node.add(pod_body())
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    assert node.runtime.operations("run_pool_sandbox") == []
    assert node.runtime.operations("run_sandbox") == [uid]


def _pool(runtime: FakeRuntime, *, size: int, in_use: int, max_pods: int) -> SandboxPool:
    return SandboxPool(
        runtime,
        size=size,
        image=PAUSE_IMAGE,
        pods_in_use=lambda: in_use,
        max_pods=max_pods,
        supervisor=Supervisor(node=runtime.node_name),
    )


def test_a_restart_adopts_the_running_pool_and_removes_the_rest(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path, node_name="n1")
    left = [runtime.run_pool_sandbox(PAUSE_IMAGE) for _ in range(3)]
    runtime.stop_pooled(left[0])
    pool = _pool(runtime, size=1, in_use=0, max_pods=110)
    pool.start()
    try:
        wait_for(lambda: pool.ready() == [left[1]], 10, "the oldest running one adopted")
        wait_for(lambda: {left[0], left[2]} <= set(runtime.operations("remove")), 10, "removed")
        assert len(runtime.operations("run_pool_sandbox")) == 3  # none made: one was kept
    finally:
        pool.stop(5.0)
    assert runtime.pool_sandboxes() == []


def test_no_pool_sandbox_is_made_at_the_pod_limit(tmp_path: Path) -> None:
    runtime = FakeRuntime(tmp_path, node_name="n1")
    pool = _pool(runtime, size=2, in_use=10, max_pods=11)
    pool.start()
    try:
        wait_for(lambda: len(pool.ready()) == 1, 10, "one made, up to the limit")
    finally:
        pool.stop(5.0)
    assert runtime.operations("run_pool_sandbox") == [PAUSE_IMAGE]


def test_a_claimed_pool_sandbox_is_its_pods_by_name_an_unclaimed_one_no_pods() -> None:
    from kubelet_sim.runtime.parse import observed_from_inspect

    labels = {cri.LABEL_NODE: "n1", cri.LABEL_POOL: "true", cri.LABEL_CONTAINER_TYPE: "podsandbox"}
    attrs = {"Id": "abc", "Config": {"Labels": labels}, "State": {"Running": True, "Pid": 7}}
    assert observed_from_inspect({**attrs, "Name": "/k8s-pool_n1_0123456789ab"}) is None
    claimed = observed_from_inspect({**attrs, "Name": "/k8s_POD_web_ns_uid-1_0"})
    assert claimed is not None
    assert claimed.is_sandbox
    assert claimed.pod == cri.PodRef(node="n1", name="web", namespace="ns", uid="uid-1")
    assert (claimed.attempt, claimed.pid) == (0, 7)
    plain = {cri.LABEL_NODE: "n1", cri.LABEL_CONTAINER_TYPE: "podsandbox"}
    assert (
        observed_from_inspect(
            {**attrs, "Config": {"Labels": plain}, "Name": "/k8s_POD_web_ns_uid-1_0"}
        )
        is None
    )


def _pool_thread(node: Node) -> bool:
    """Whether the node's pool has a thread now (it has one only while it holds or wants)."""
    return f"sandbox-pool-{node.runtime.node_name}" in node.supervisor.health()


def test_the_automatic_pool_holds_none_on_an_idle_node_and_follows_its_starts(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path, pool_size=None)
    try:
        node.pool.start()
        wait_for(lambda: not _pool_thread(node), 10, "an idle pool's thread to end")
        assert node.runtime.pool_sandboxes() == []
        first = node.add(pod_body(name="first"))
        node.sync_until(first, lambda: node.condition(first, "Ready") == "True", "Ready")
        assert node.runtime.operations("run_sandbox") == [first]  # nothing pooled yet
        wait_for(lambda: len(node.pool.ready()) == 1, 10, "one made after one start")
        (pooled,) = node.pool.ready()
        second = node.add(pod_body(name="second"))
        node.sync_until(second, lambda: node.condition(second, "Ready") == "True", "Ready")
        assert node.runtime.operations("claim_sandbox") == [pooled]
        wait_for(lambda: len(node.pool.ready()) == 2, 10, "two made after two starts")
        assert len(node.runtime.pool_sandboxes()) == 2
        # Quiet for the window: the pool gives its sandboxes back, and its thread ends.
        node.clock.advance(RECENT_SECONDS + 1)
        node.pool.wake()
        wait_for(lambda: node.runtime.pool_sandboxes() == [], 10, "the idle pool emptied")
        assert node.pool.ready() == []
        wait_for(lambda: not _pool_thread(node), 10, "the pool's thread to end")
    finally:
        node.close()
