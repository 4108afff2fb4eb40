"""The one writer of pod status, beside the pod workers (the kubelet's status_manager.go).

A pod worker hands each status it generates to `set` and goes on with the runtime: it never
waits on the API server. The manager keeps the newest status of every pod (a versioned cache:
the base of the next status the worker generates) and writes it on its own thread, the newest
only, as the kubelet's syncBatch does; a failed write is retried with backoff, said once per
error. A deleted pod's final DELETE goes after its terminal status is in, as the kubelet's
status manager sends it once the pod can be deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.workqueue import WorkQueue
from kubelet_sim.podworkers.ports import StatusSink

__all__ = ["StatusFailure", "StatusManager"]

Journal = Callable[..., None]  # (uid, step, **fields)
FinalDelete = Callable[[str, str, str], None]  # (namespace, name, uid)
DELETE_RETRY = 1.0  # a final DELETE the server refused: tried again this much later


@dataclass
class StatusFailure:
    """Writes of one pod that keep failing: the error, and when to try again."""

    error: str
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=300.0))
    attempts: int = 0
    next_attempt: float = 0.0  # the clock's monotonic time

    def retry_in(self, now: float) -> float:
        return max(self.next_attempt - now, 0.0)


@dataclass
class _Entry:
    pod: Json  # the pod as the worker last saw it: its uid, name and version for the patch
    status: Json
    version: int = 1
    written: int = 0  # the version the API holds (or that needed no write)
    delete: bool = False  # send the final DELETE once `version` is written
    gone: bool = False  # finally deleted: nothing more is sent
    failure: StatusFailure | None = None
    delete_error: str = ""  # the final DELETE's last refusal, said once
    journaled: set[str] = field(default_factory=set)


@dataclass(eq=False)
class StatusManager:
    """`threaded=False` (the unit tests' harness): each status is written in the caller's
    thread as it is set, and retries wait for `flush()`."""

    sink: StatusSink
    final_delete: FinalDelete
    _: KW_ONLY
    journal: Journal
    supervisor: InitVar[Supervisor]
    node: str
    clock: Clock = SYSTEM_CLOCK
    threaded: bool = True
    workers: int = 2

    def __post_init__(self, supervisor: Supervisor) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._queue: WorkQueue[str] | None = None
        if self.threaded:
            self._queue = WorkQueue(supervisor)
            self._threads = supervisor.on_demand(
                "status-manager", self._work, self._halt, limit=self.workers
            )
            self._queue.serve(self._threads.wake)
        self.log = get_logger("kubelet_sim.podworkers.status", node=self.node)

    # -- the pod workers' side ---------------------------------------------------------------

    def base(self, pod: Json) -> Json:
        """The newest status of the pod: one not written yet, else what the API holds."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            entry = self._entries.get(uid)
            if entry is not None and entry.written < entry.version:
                return entry.status
        return self.sink.base(pod)

    def set(self, pod: Json, status: Json) -> None:
        """The pod's newest status; written beside the caller, which never waits for it."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            entry = self._entries.get(uid)
            if entry is None:
                self._entries[uid] = _Entry(pod, status)
            elif entry.gone:
                return
            else:  # the same status too: the writer holds it to what the API has now (a
                # static pod's new mirror, a status someone else changed), as syncBatch does
                entry.pod, entry.status, entry.version = pod, status, entry.version + 1
        self._queue_write(uid)

    def delete_when_written(self, pod: Json) -> None:
        """The pod may be deleted from the API once its newest status is in (canBeDeleted)."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            entry = self._entries.get(uid)
            if entry is None:
                entry = self._entries[uid] = _Entry(pod, self.sink.base(pod), written=1)
            if entry.gone:
                return
            entry.pod, entry.delete = pod, True
        self._queue_write(uid)

    def has_set(self, uid: str) -> bool:
        with self._lock:
            return uid in self._entries

    def failure(self, uid: str) -> StatusFailure | None:
        with self._lock:
            entry = self._entries.get(uid)
            return entry.failure if entry is not None else None

    def forget(self, uid: str) -> None:
        with self._lock:
            self._entries.pop(uid, None)
        self.sink.forget(uid)

    # -- its own side ------------------------------------------------------------------------

    def start(self) -> None:
        if self._queue is not None:
            self._threads.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._halt.set()
        if self._queue is not None:
            self._queue.shut_down()
            self._threads.stop(timeout)

    def flush(self) -> None:
        """Write every pod whose turn has come, in the caller's thread (the harness's)."""
        for uid in list(self._entries):
            self._sync(uid)

    def _queue_write(self, uid: str) -> None:
        if self._queue is None:
            self._sync(uid)
        else:
            self._queue.add(uid)

    def _work(self) -> None:
        assert self._queue is not None
        for uid in self._queue.ready():
            try:
                retry = self._sync(uid)
                if retry is not None:
                    self._queue.add_after(uid, retry)
            finally:
                self._queue.done(uid)

    def _sync(self, uid: str) -> float | None:
        """Write the pod's newest status, then its final DELETE if due; when to try again."""
        with self._lock:
            entry = self._entries.get(uid)
            if entry is None or entry.gone:
                return None
            if entry.failure is not None:
                wait = entry.failure.retry_in(self.clock.monotonic())
                if wait > 0:
                    return wait
            pod, status, version = entry.pod, entry.status, entry.version
            unwritten, delete = entry.written < version, entry.delete
        if unwritten:
            retry = self._write(uid, entry, pod, status, version)
            if retry is not None:
                return retry
        with self._lock:
            if entry.written < entry.version:  # a newer one came meanwhile: its turn is queued
                return None
        if delete:
            return self._delete(uid, entry, pod)
        return None

    def _write(
        self, uid: str, entry: _Entry, pod: Json, status: Json, version: int
    ) -> float | None:
        try:
            written = self.sink.write(pod, status)
        except ApiError as exc:
            if exc.not_found or exc.uid_changed:  # gone or replaced: nothing to say to it
                with self._lock:  # (a static pod's next mirror is written the next time)
                    entry.written = max(entry.written, version)
                return None
            return self._failed(uid, entry, pod, str(exc))
        except Exception as exc:  # the API unreachable: retried with backoff
            return self._failed(uid, entry, pod, str(exc)[:200])
        with self._lock:
            entry.written = max(entry.written, version)
            failure, entry.failure = entry.failure, None
        if failure is not None:
            self.log.info(
                "status write succeeded after failures",
                pod=_name(pod),
                attempts=failure.attempts,
            )
        if written is not None:
            self._journal_written(uid, entry, status)
        return None

    def _delete(self, uid: str, entry: _Entry, pod: Json) -> float | None:
        meta = pod["metadata"]
        try:
            self.final_delete(meta["namespace"], meta["name"], uid)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                first, entry.delete_error = entry.delete_error != str(exc), str(exc)
                (self.log.warning if first else self.log.debug)(
                    "final delete failed", pod=_name(pod), error=str(exc)
                )
                return DELETE_RETRY
        with self._lock:
            entry.gone, entry.delete = True, False
        self._journal_once(uid, entry, "deleted")
        self.log.info("pod deleted from the API", pod=_name(pod), uid=uid)
        return None

    def _failed(self, uid: str, entry: _Entry, pod: Json, error: str) -> float:
        """Back off, and say so once per pod and error rather than on every retry."""
        with self._lock:
            failure = entry.failure
            first = failure is None or failure.error != error
            if failure is None or first:
                failure = entry.failure = StatusFailure(error)
            failure.attempts += 1
            wait = failure.backoff.next_delay()
            failure.next_attempt = self.clock.monotonic() + wait
        (self.log.warning if first else self.log.debug)(
            "status write failed; retrying with backoff",
            pod=_name(pod),
            error=error,
            retry_in_seconds=round(wait, 1),
        )
        return wait

    def _journal_written(self, uid: str, entry: _Entry, status: Json) -> None:
        """The first status write and the first saying Ready, for `kubelet-sim trace`."""
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        self._journal_once(uid, entry, "status-written", phase=status.get("phase"))
        if ready:
            self._journal_once(uid, entry, "ready-written", phase=status.get("phase"))

    def _journal_once(self, uid: str, entry: _Entry, step: str, **fields: Any) -> None:
        with self._lock:
            if step in entry.journaled:
                return
            entry.journaled.add(step)
        self.journal(uid, step, **fields)


def _name(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
