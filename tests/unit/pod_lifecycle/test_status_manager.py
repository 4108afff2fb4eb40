"""The status manager: the pod workers hand it statuses and never wait on the API server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.podworkers.status_manager import StatusManager
from tests.cluster import wait_for
from tests.unit.harness import FakeStatus, pod_body


class GatedStatus(FakeStatus):
    """An API server that answers a status write only when the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def write(self, pod: Json, status: Json) -> Json | None:
        self.waiting.set()
        assert self.gate.wait(10), "the gate was never opened"
        return super().write(pod, status)


@pytest.fixture
def sink() -> GatedStatus:
    return GatedStatus()


@pytest.fixture
def deleted() -> list[str]:
    return []


@pytest.fixture
def manager(sink: GatedStatus, deleted: list[str]) -> Iterator[StatusManager]:
    manager = StatusManager(
        sink,
        lambda _ns, _name, uid: deleted.append(uid),
        journal=lambda *_a, **_k: None,
        supervisor=Supervisor(node="n1"),
        node="n1",
    )
    manager.start()
    yield manager
    sink.gate.set()
    manager.stop()


def _status(phase: str) -> Json:
    return {"phase": phase, "message": "ours"}  # never the pod's own status


def test_set_returns_while_the_write_waits_and_the_newest_status_is_the_base(
    manager: StatusManager, sink: GatedStatus
) -> None:
    pod = pod_body()
    uid = pod["metadata"]["uid"]
    manager.set(pod, _status("Pending"))
    assert sink.waiting.wait(5), "the write began on the manager's thread"
    manager.set(pod, _status("Running"))  # returns at once though the API has not answered
    manager.set(pod, _status("Succeeded"))
    assert manager.base(pod) == _status("Succeeded")
    sink.gate.set()
    wait_for(lambda: sink.history(uid)[-1:] == [_status("Succeeded")], 5, "the newest written")
    assert sink.history(uid) == [_status("Pending"), _status("Succeeded")], (
        "a status superseded before its turn is not written (syncBatch writes the newest)"
    )


def test_the_final_delete_waits_for_the_terminal_status(
    manager: StatusManager, sink: GatedStatus, deleted: list[str]
) -> None:
    pod = pod_body()
    uid = pod["metadata"]["uid"]
    manager.set(pod, _status("Failed"))
    manager.delete_when_written(pod)
    assert sink.waiting.wait(5)
    assert deleted == [], "not before the terminal status is in"
    sink.gate.set()
    wait_for(lambda: deleted == [uid], 5, "the final delete")
    assert sink.history(uid) == [_status("Failed")]
