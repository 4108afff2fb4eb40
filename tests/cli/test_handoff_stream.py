"""The live handoff stream: each pod's trace steps printed once, as they happen, in order.

The rules (`PodHandoff`) are tested on made-up snapshots; one test runs `stream()` against an
agent, the API server and Docker.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.kube.client import connect
from kubelet_sim.tools.handoff import PodHandoff, _Stream, stream
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.handoff_order import STREAM_HOLD, handoff_steps, in_order
from tests.manifests import pod_manifest, to_schedule_on
from tests.observed import observed_container
from tests.pods import container, get_pod, make_pod

NODE = "n2"
UID = "uid-1"


def _pod(node: str = "", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "default",
            "uid": UID,
            "creationTimestamp": "2024-05-01T12:00:00Z",
        },
        "spec": {"containers": [{"name": "c"}], **({"nodeName": node} if node else {})},
        "status": status,
    }


def _bound(**extra: Any) -> dict[str, Any]:
    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": "2024-05-01T12:00:01Z",
    }
    return _pod(NODE, conditions=[scheduled], **extra)


SCHEDULED_EVENT = {
    "metadata": {"name": "web-1.a", "namespace": "default"},
    "reason": "Scheduled",
    "reportingComponent": "default-scheduler",
    "eventTime": "2024-05-01T12:00:01.016000Z",
    "message": f"Successfully assigned default/web-1 to {NODE}",
}


def _failed(message: str, at: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1.f", "namespace": "default"},
        "reason": "FailedScheduling",
        "reportingComponent": "default-scheduler",
        "eventTime": "2024-05-01T12:00:00.100000Z",
        "series": {"count": 2, "lastObservedTime": at},
        "message": message,
    }


def _journal(*steps: str) -> list[dict[str, Any]]:
    entries = {
        "seen": {
            "step": "seen",
            "time": "2024-05-01T12:00:01.030000Z",
            "event": "ADDED",
            "via": "watch",
            "resourceVersion": "812",
        },
        "admitted": {"step": "admitted", "time": "2024-05-01T12:00:01.031000Z"},
        "rejected": {
            "step": "rejected",
            "time": "2024-05-01T12:00:01.031000Z",
            "reason": "OutOfcpu",
        },
        "status-written": {
            "step": "status-written",
            "time": "2024-05-01T12:00:01.050000Z",
            "phase": "Pending",
        },
        "ready-written": {
            "step": "ready-written",
            "time": "2024-05-01T12:00:01.900000Z",
            "phase": "Running",
        },
    }
    return [entries[s] for s in steps]


def _container(name: str, created: str, started: str | None = None) -> cri.ObservedContainer:
    def at(value: str | None) -> datetime | None:
        return datetime.fromisoformat(f"2024-05-01T12:00:{value}+00:00") if value else None

    return observed_container(
        name,
        pod=cri.PodRef(NODE, "web-1", "default", UID),
        container_id=f"id-{name}",
        image="busybox",
        created_at=at(created),
        started_at=at(started),
    )


SANDBOX = cri.SANDBOX_CONTAINER_NAME


def _fields(line: str) -> list[str]:
    """time, pod, node, step, then detail and latency when there are any."""
    return re.split(r" {2,}", line)


def _steps(lines: list[str]) -> list[str]:
    return [_fields(line)[3] for line in lines]


def test_each_step_is_printed_once_in_the_timelines_order_with_its_latency() -> None:
    h = PodHandoff(_pod())
    fed = [
        h.update(_pod(), [], [], [], now=0.0),
        h.update(_pod(), [], [], [], now=0.25),  # nothing new
        h.update(_bound(), [SCHEDULED_EVENT], [], [], now=0.5),
        h.update(
            _bound(),
            [SCHEDULED_EVENT],
            _journal("seen", "admitted", "status-written"),
            [],
            now=0.75,
        ),
        h.update(
            _bound(),
            [SCHEDULED_EVENT],
            _journal("seen", "admitted", "status-written"),
            [_container(SANDBOX, "01.100", "01.200"), _container("c", "01.300")],
            now=1.0,
        ),
    ]
    done = [_container(SANDBOX, "01.100", "01.200"), _container("c", "01.300", "01.400")]
    everything = _journal("seen", "admitted", "status-written", "ready-written")
    fed.append(h.update(_bound(), [SCHEDULED_EVENT], everything, done, now=1.25))
    fed.append(h.update(_bound(), [SCHEDULED_EVENT], everything, done, now=1.5))
    assert [_steps(lines) for lines in fed] == [
        ["created"],
        [],
        ["scheduled", "bound"],
        ["seen by the node", "admitted", "first status written"],
        ["sandbox created", "sandbox started", "container c created"],
        ["container c started", "Ready written", "total"],
        [],
    ]
    lines = [line for batch in fed for line in batch]
    assert lines == [
        "12:00:00~     default/web-1  -  created",
        "12:00:01.016  default/web-1  n2  scheduled  by default-scheduler  +1.016s~",
        "12:00:01~     default/web-1  n2  bound  PodScheduled=True  ~",
        "12:00:01.030  default/web-1  n2  seen by the node  ADDED via watch, rv 812  +0.014s",
        "12:00:01.031  default/web-1  n2  admitted  +0.001s",
        "12:00:01.050  default/web-1  n2  first status written  phase Pending  +0.019s",
        "12:00:01.100  default/web-1  n2  sandbox created  +0.050s",
        "12:00:01.200  default/web-1  n2  sandbox started  +0.100s",
        "12:00:01.300  default/web-1  n2  container c created  +0.100s",
        "12:00:01.400  default/web-1  n2  container c started  +0.100s",
        "12:00:01.900  default/web-1  n2  Ready written  phase Running  +0.500s",
        "12:00:01.900  default/web-1  n2  total  created → Ready written  1.900s~",
    ]
    assert h.ready
    assert h.settled, "nothing left to poll for"


def test_a_later_step_waits_a_moment_for_an_earlier_one_seen_late() -> None:
    """The scheduler's event comes on its own watch: the node may be seen before it is."""
    h = PodHandoff(_pod(), hold=1.0)
    assert _steps(h.update(_pod(), [], [], [], now=0.0)) == ["created"]
    seen = _journal("seen")
    assert h.update(_bound(), [], seen, [], now=0.1) == [], "held for the Scheduled event"
    assert h.waiting
    assert h.update(_bound(), [], seen, [], now=0.6) == []
    late = h.update(_bound(), [SCHEDULED_EVENT], seen, [], now=0.7)
    assert _steps(late) == ["scheduled", "bound", "seen by the node"]
    assert not h.waiting


def test_a_failure_to_schedule_seen_after_the_binding_is_not_printed() -> None:
    """The scheduler's events come on their own watch, late: an attempt that failed before the
    one that bound the pod is history once the pod is bound (seen with a real scheduler)."""
    h = PodHandoff(_pod(), hold=1.0)
    h.update(_pod(), [], [], [], now=0.0)
    failed = _failed("0/3 nodes are available", "2024-05-01T12:00:00.500000Z")
    lines = h.update(_bound(), [SCHEDULED_EVENT, failed], _journal("seen"), [], now=0.1)
    assert "FailedScheduling" not in _steps(lines)


def test_a_step_that_never_comes_holds_the_rest_only_for_a_moment() -> None:
    h = PodHandoff(_pod(), hold=1.0)
    h.update(_pod(), [], [], [], now=0.0)
    seen = _journal("seen")
    assert h.update(_bound(), [], seen, [], now=0.5) == []
    assert _steps(h.update(_bound(), [], seen, [], now=1.6)) == ["seen by the node"]
    more = _journal("seen", "admitted")
    assert _steps(h.update(_bound(), [], more, [], now=1.7)) == ["admitted"], "not held again"
    # If the late step does come, it is printed then, once.
    assert _steps(h.update(_bound(), [SCHEDULED_EVENT], more, [], now=1.8)) == [
        "scheduled",
        "bound",
    ]


def test_a_step_passed_over_is_still_printed_when_it_comes_after_ready() -> None:
    """Docker's side may lag on a loaded machine: the pod is not settled (no longer polled)
    until the steps passed over are printed too."""
    h = PodHandoff(_bound(), hold=1.0)
    everything = _journal("seen", "admitted", "status-written", "ready-written")
    sandbox_only = [_container(SANDBOX, "01.100", "01.200")]
    h.update(_bound(), [SCHEDULED_EVENT], everything, sandbox_only, now=0.0)
    lines = h.update(_bound(), [SCHEDULED_EVENT], everything, sandbox_only, now=1.5)
    assert _steps(lines)[-2:] == ["Ready written", "total"], "held only for a moment"
    assert h.ready
    assert not h.settled, "the container's steps are still to come"
    done = [*sandbox_only, _container("c", "01.300", "01.400")]
    late = h.update(_bound(), [SCHEDULED_EVENT], everything, done, now=1.75)
    assert _steps(late) == ["container c created", "container c started"]
    assert h.settled


def test_a_pod_bound_at_creation_and_a_rejected_pod_wait_for_nothing() -> None:
    bound_at_creation = _pod(NODE)
    h = PodHandoff(bound_at_creation)
    lines = h.update(bound_at_creation, [], _journal("seen", "rejected"), [], now=0.0)
    assert _steps(lines) == ["created", "seen by the node", "rejected"]
    assert lines[-1].endswith("rejected  OutOfcpu  +0.001s")
    assert lines[1] == (
        "12:00:01.030  default/web-1  n2  seen by the node  ADDED via watch, rv 812  +1.030s~"
    )


def test_failed_scheduling_is_printed_once_per_message() -> None:
    h = PodHandoff(_pod())
    first = "0/3 nodes are available: 3 Insufficient cpu."
    second = "0/4 nodes are available: 4 Insufficient cpu."
    fed = [
        h.update(_pod(), [_failed(first, "2024-05-01T12:00:00.100000Z")], [], [], now=0),
        h.update(_pod(), [_failed(first, "2024-05-01T12:00:05.100000Z")], [], [], now=1),
        h.update(_pod(), [_failed(second, "2024-05-01T12:00:09.200000Z")], [], [], now=2),
        h.update(_pod(), [_failed(second, "2024-05-01T12:00:19.200000Z")], [], [], now=3),
    ]
    assert fed == [
        [
            "12:00:00~     default/web-1  -  created",
            f"12:00:00.100  default/web-1  -  FailedScheduling  {first}",
        ],
        [],
        [f"12:00:09.200  default/web-1  -  FailedScheduling  {second}"],
        [],
    ]


def test_deletion_lines_give_the_grace_period_and_the_time_since_deletion_began() -> None:
    h = PodHandoff(_pod())
    deleting = _bound()
    deleting["metadata"] |= {
        "deletionTimestamp": "2024-05-01T12:00:15Z",
        "deletionGracePeriodSeconds": 5,
    }
    lines = h.update(deleting, [SCHEDULED_EVENT], _journal("seen"), [], now=0.0)
    assert _steps(lines) == ["created", "scheduled", "bound", "seen by the node", "deleting"]
    assert lines[-1] == "12:00:10~     default/web-1  n2  deleting  grace period 5s"
    assert h.settled, "no more polling once the pod is being deleted"
    assert h.update(deleting, [SCHEDULED_EVENT], _journal("seen"), [], now=1.0) == []
    gone = h.gone(deleting, datetime(2024, 5, 1, 12, 0, 11, 500000, tzinfo=UTC))
    assert gone == ["12:00:11.500  default/web-1  n2  gone  since deletion began  +1.500s~"]


def test_a_pod_gone_without_a_graceful_deletion_says_only_gone() -> None:
    h = PodHandoff(_pod())
    h.update(_pod(), [], [], [], now=0.0)
    assert h.gone(_pod(), datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)) == [
        "12:00:03.000  default/web-1  -  gone"
    ]


def test_odd_pods_do_not_crash_the_rules() -> None:
    odd_pods: list[dict[str, Any]] = [
        {},
        {"metadata": {}},
        {"metadata": {"uid": "x"}, "spec": None, "status": None},
    ]
    for odd in odd_pods:
        h = PodHandoff(odd)
        assert h.update(odd, [{"reason": "FailedScheduling"}], [], [], now=0.0) == []


# -- the stream's own bookkeeping, without Docker or an API server -------------------------------


class _Files:
    def __init__(self, journal: list[dict[str, Any]]) -> None:
        self.journal = journal

    def read_journal(self, uid: str) -> list[dict[str, Any]]:
        return self.journal if uid == UID else []


class _Runtime:
    """A NodeRuntime's two reads the stream uses; counts the Docker ones."""

    def __init__(self, journal: list[dict[str, Any]], fail: bool = False) -> None:
        self.files = _Files(journal)
        self.lists = 0
        self.fail = fail

    def list_containers(self, node: str) -> list[cri.ObservedContainer]:
        self.lists += 1
        if self.fail:
            raise OSError("docker is away")
        return [_container(SANDBOX, "01.100", "01.200")]


def _other(node: str, name: str = "web-2") -> dict[str, Any]:
    pod = _pod(node)
    pod["metadata"] = pod["metadata"] | {"name": name, "uid": f"uid-{name}"}
    return pod


def test_the_stream_reads_docker_once_per_node_a_tick_and_polls_only_unfinished_pods() -> None:
    lines: list[str] = []
    runtime = _Runtime(_journal("seen", "admitted", "status-written"))
    state = _Stream({NODE: runtime}, lines.append, hold=0.0)  # type: ignore[dict-item]
    state.watched.on_pod("ADDED", _pod(NODE), synced=True)
    state.watched.on_pod("ADDED", _other(NODE), synced=True)
    state.watched.on_pod("ADDED", _other("elsewhere", "web-3"), synced=True)  # no runtime
    state.tick()
    assert runtime.lists == 1, "one Docker read for the node's two pods"
    web1 = [line for line in lines if "/web-1 " in line]
    assert "sandbox started" in _steps(web1)
    assert _steps([line for line in lines if "/web-3 " in line]) == ["created"]
    state.tick()
    assert runtime.lists == 2, "web-1 and web-2 are still starting"
    assert "uid-web-3" in state.handoffs, "a node not in runtimes: API steps only"


def test_one_pods_failure_does_not_end_the_stream() -> None:
    lines: list[str] = []
    runtime = _Runtime([], fail=True)
    state = _Stream({NODE: runtime}, lines.append, hold=0.0)  # type: ignore[dict-item]
    state.watched.on_pod("ADDED", _other(NODE), synced=True)
    state.watched.on_pod("ADDED", _other(NODE, "broken"), synced=True)
    state.handoffs["uid-broken"] = PodHandoff({})
    state.handoffs["uid-broken"].update = None  # type: ignore[assignment,method-assign]
    state.tick()
    assert _steps(lines) == ["created"], "Docker away and one pod broken: the other still shows"


def test_a_pod_created_and_bound_between_two_ticks_still_waits_for_its_scheduled_event() -> None:
    lines: list[str] = []
    state = _Stream({NODE: _Runtime(_journal("seen"))}, lines.append, hold=1.0)  # type: ignore[dict-item]
    state.watched.on_pod("ADDED", _pod(), synced=True)
    state.watched.on_pod("MODIFIED", _bound(), synced=True)  # only this version is evaluated
    state.tick()
    assert _steps(lines) == ["created"], "seen by the node waits for the scheduler's step"
    assert state.handoffs[UID].waiting
    state.watched.on_event("ADDED", SCHEDULED_EVENT | {"involvedObject": {"uid": UID}})
    state.tick()
    assert _steps(lines) == ["created", "scheduled", "bound", "seen by the node"]


def test_pods_ready_or_ended_before_the_stream_get_one_line() -> None:
    lines: list[str] = []
    state = _Stream({}, lines.append, hold=0.0)
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:00:04Z"}
    state.watched.on_pod("ADDED", _pod(NODE, conditions=[ready]), synced=False)
    state.watched.on_pod("ADDED", _other(NODE) | {"status": {"phase": "Succeeded"}}, synced=False)
    state.watched.on_pod("ADDED", _other(NODE, "web-3"), synced=False)  # still starting
    state.tick()
    assert lines == [
        "12:00:04~     default/web-1  n2  already Ready  before the stream started",
        "12:00:00~     default/web-2  n2  already Succeeded  before the stream started",
        "12:00:00~     default/web-3  n2  created",
    ]
    state.watched.on_pod("DELETED", _pod(NODE, conditions=[ready]), synced=True)
    state.tick()
    assert _steps(lines[3:]) == ["gone"]


# -- end to end ----------------------------------------------------------------------------------

E2E_STEPS = [*handoff_steps(containers=["c"]), "total"]


@dataclass
class _Streamed:
    printed: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def of(self, cluster: ApiUnderTest, name: str) -> list[list[str]]:
        """The fields of each line about one pod of the test's namespace, in printed order."""
        pod = f"{cluster.namespace}/{name}"
        return [_fields(line) for line in list(self.printed) if f"  {pod}  " in line]

    def has(self, cluster: ApiUnderTest, name: str, step: str) -> bool:
        return any(f[3] == step for f in self.of(cluster, name)) or bool(self.errors)


@contextlib.contextmanager
def _streaming(cluster: ApiUnderTest, running: RunningAgent) -> Iterator[_Streamed]:
    """`stream()` on its thread, as the demo runs it (all namespaces), until the block ends."""
    streamed = _Streamed()
    stop, listening = threading.Event(), threading.Event()

    def run() -> None:
        try:
            stream(
                connect(cluster.kubeconfig),
                {cluster.node_name: running.agent.runtime},
                streamed.printed.append,
                stop,
                listening=listening,
                hold=STREAM_HOLD,
            )
        except BaseException as exc:
            streamed.errors.append(exc)
            raise

    thread = threading.Thread(target=run, name="handoff stream", daemon=True)
    thread.start()
    try:
        wait_for(lambda: listening.is_set() or streamed.errors, 15, "the stream's watches synced")
        yield streamed
    finally:
        stop.set()
        thread.join(10)
    assert not streamed.errors, streamed.errors
    assert not thread.is_alive(), "the stream stops when told"


@pytest.mark.docker
def test_the_stream_shows_a_pods_handoff_through_ready_and_its_deletion(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        with _streaming(cluster, running) as streamed:
            make_pod(cluster, "streamed", container())
            wait_for(
                lambda: streamed.has(cluster, "streamed", "total"), 30, "the Ready and total lines"
            )
            cluster.core.delete_namespaced_pod("streamed", cluster.namespace)
            wait_for(lambda: get_pod(cluster, "streamed") is None, 30, "the pod gone")
            wait_for(lambda: streamed.has(cluster, "streamed", "gone"), 10, "the gone line")
    finally:
        running.stop()
    lines = streamed.of(cluster, "streamed")
    steps = [f[3] for f in lines]
    assert in_order(steps, [*E2E_STEPS, "deleting", "gone"]), (steps, streamed.printed)
    assert all(f[2] == cluster.node_name for f in lines), "each line names the node"
    by_step = {f[3]: f for f in lines}
    assert by_step["seen by the node"][4].startswith("ADDED via watch, rv ")
    assert by_step["deleting"][4] == "grace period 5s"
    assert by_step["gone"][4] == "since deletion began"
    for step in E2E_STEPS[1:-1]:  # latencies: between the pod's printed steps
        assert by_step[step][-1].startswith(("+", "-")), by_step[step]


SCHEDULER = "default-scheduler"


def _for_the_scheduler(name: str, node: str) -> dict[str, Any]:
    """A pod without spec.nodeName, for the scheduler to place on `node` (or nowhere)."""
    return pod_manifest(name, [container(imagePullPolicy="Never")], **to_schedule_on(node))


@pytest.mark.docker
def test_the_stream_shows_the_schedulers_part(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """With a real scheduler: who placed the pod and where, and why another fits nowhere."""
    cluster.require_scheduler()
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        with _streaming(cluster, running) as streamed:
            nowhere = _for_the_scheduler("nowhere", f"{cluster.node_name}-absent")
            cluster.core.create_namespaced_pod(cluster.namespace, nowhere)
            placed = _for_the_scheduler("placed", cluster.node_name)
            cluster.core.create_namespaced_pod(cluster.namespace, placed)
            wait_for(lambda: streamed.has(cluster, "placed", "total"), 60, "placed: Ready")
            wait_for(
                lambda: streamed.has(cluster, "nowhere", "FailedScheduling"),
                30,
                "nowhere: the scheduler's FailedScheduling",
            )
    finally:
        running.stop()
    placed_lines = streamed.of(cluster, "placed")
    steps = [f[3] for f in placed_lines]
    assert in_order(steps, ["created", "scheduled", "bound", *E2E_STEPS[1:]]), str(steps)
    scheduled = placed_lines[1]
    assert (scheduled[2], scheduled[4]) == (cluster.node_name, f"by {SCHEDULER}")
    nowhere_lines = streamed.of(cluster, "nowhere")
    assert nowhere_lines[0][3] == "created"
    messages = [f[4] for f in nowhere_lines if f[3] == "FailedScheduling"]
    assert messages
    assert "nodes are available" in messages[0] or "no nodes available" in messages[0]
    assert all(a != b for a, b in itertools.pairwise(messages)), "once per message"
