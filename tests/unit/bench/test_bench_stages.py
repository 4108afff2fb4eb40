"""bench/stages.py: which stage of a pod each party's record shows (the pod from a watch,
containerd's events, the kubelet's log), for bench.versus. No Docker, no API server."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from bench import stages


def pod(conditions: dict[str, str], states: list[str], deleting: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        "containerStatuses": [{"name": "app", "state": {s: {}}} for s in states],
    }
    meta = {"name": "p", "uid": "u1", **({"deletionTimestamp": "x"} if deleting else {})}
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def test_a_new_pinned_pod_is_bound_and_nothing_else() -> None:
    assert stages.watch_marks(pod({}, [])) == [stages.BOUND]


def test_the_nodes_first_write_is_known_by_its_conditions_or_container_statuses() -> None:
    v124 = pod({"Initialized": "True", "Ready": "False"}, [])
    assert stages.NODE_STATUS in stages.watch_marks(v124)
    waiting = pod({}, ["waiting"])
    assert stages.watch_marks(waiting) == [stages.BOUND, stages.NODE_STATUS]
    started = pod({"PodReadyToStartContainers": "True", "Ready": "True"}, ["running"])
    assert stages.watch_marks(started) == [
        stages.BOUND,
        stages.NODE_STATUS,
        stages.READY_TO_START,
        stages.RUNNING,
        stages.READY,
    ]


def test_terminated_counts_only_once_the_pod_is_being_deleted() -> None:
    assert stages.STOPPED not in stages.watch_marks(pod({}, ["terminated"]))
    assert stages.STOPPED in stages.watch_marks(pod({}, ["terminated"], deleting=True))
    assert stages.STOPPED not in stages.watch_marks(pod({}, ["running"], deleting=True))


def test_pod_times_keep_the_first_sighting_relative_to_each_call() -> None:
    times = stages.PodTimes("p", "ours", "one", sent=100.0)
    times.see("ADDED", pod({}, []), 100.1)
    times.see("MODIFIED", pod({"Ready": "True"}, ["running"]), 100.5)
    times.see("MODIFIED", pod({"Ready": "True"}, ["running"]), 100.9)
    assert times.start[stages.BOUND] == pytest.approx(0.1)
    assert times.start[stages.READY] == pytest.approx(0.5)
    assert times.uid == "u1"
    times.see("DELETED", pod({}, []), 101.0)
    assert times.delete == {}  # no delete call sent: not a deletion of ours
    times.delete_sent = 102.0
    times.see("MODIFIED", pod({}, ["terminated"], deleting=True), 102.3)
    times.see("DELETED", pod({}, ["terminated"], deleting=True), 102.4)
    assert times.delete[stages.STOPPED] == pytest.approx(0.3)
    assert times.delete[stages.GONE] == pytest.approx(0.4)


def test_containerd_lines_and_steps() -> None:
    line = (
        '2026-11-29 01:41:59.548117508 +0000 UTC k8s.io /tasks/start {"container_id":"s1","pid":1}'
    )
    parsed = stages.containerd_event(line)
    assert parsed is not None
    when, topic, payload = parsed
    assert topic == "/tasks/start"
    assert payload == {"container_id": "s1", "pid": 1}
    assert when == pytest.approx(
        datetime.fromisoformat("2026-11-29T01:41:59.548117+00:00").timestamp()
    )
    assert stages.containerd_event("not an event") is None
    events = [
        (1.0, "/containers/create", {"id": "s1"}),
        (1.5, "/tasks/start", {"container_id": "s1"}),
        (2.0, "/containers/create", {"id": "c1"}),
        (2.5, "/tasks/start", {"container_id": "c1"}),
        (3.0, "/tasks/start", {"container_id": "c1"}),  # a restart: the first start is kept
        (3.5, "/containers/create", {"id": "other"}),  # not a container of a known pod
    ]
    known = {"s1": ("u1", "sandbox", ""), "c1": ("u1", "container", "app")}
    assert stages.containerd_steps(events, known) == {
        "u1": {
            "sandbox created": 1.0,
            "sandbox started": 1.5,
            "container app created": 2.0,
            "container app started": 2.5,
        }
    }


def test_the_kubelets_sync_loop_add_names_each_pod() -> None:
    log = "\n".join(
        [
            'I1129 01:41:59.100000   123 kubelet.go:2406] "SyncLoop ADD" source="api"'
            ' pods=["ns/a","ns/b"]',
            'I1129 01:42:00.000000   123 kubelet.go:2406] "SyncLoop ADD" source="api"'
            ' pods=["ns/a"]',
            'I1129 01:42:01.000000   123 kubelet.go:2422] "SyncLoop DELETE" source="api"'
            ' pods=["ns/a"]',
        ]
    )
    seen = stages.kubelet_seen(log, 2026)
    first = datetime(2026, 11, 29, 1, 41, 59, 100000).timestamp()
    assert seen == {"ns/a": pytest.approx(first), "ns/b": pytest.approx(first)}
    v124 = 'I1129 01:41:59.100000   123 kubelet.go:2092] "SyncLoop ADD" source="api" pods=[ns/c]'
    assert stages.kubelet_seen(v124, 2026) == {"ns/c": pytest.approx(first)}


def test_stage_medians_per_side_and_only_stages_reached() -> None:
    pods = [
        stages.PodTimes("a", "ours", "one", start={stages.READY: 1.0}),
        stages.PodTimes("b", "ours", "one", start={stages.READY: 3.0}),
        stages.PodTimes("c", "ours", "one", start={stages.READY: 2.0}),
        stages.PodTimes(
            "d", "kubelet", "one", start={stages.READY: 4.0}, delete={stages.GONE: 1.0}
        ),
    ]
    found = stages.stage_medians(pods, ["ours", "kubelet"], "app")
    assert found == [
        ("start", stages.READY, {"ours": 2.0, "kubelet": 4.0}),
        ("delete", stages.GONE, {"ours": None, "kubelet": 1.0}),
    ]
