"""One watch per ConfigMap or Secret that some pod on this node uses, as the kubelet does.

The kubelet's watch-based manager watches each referenced object by name
(`fieldSelector=metadata.name=<name>` in its namespace), which is also all that node
credentials may do, and drops the watch when the last pod using it goes.

Each watch costs a thread and an HTTP/1.1 connection here (Go multiplexes them over HTTP/2), so
the kubelet's two other limits matter more: a watch whose object nobody read for `max_idle`
(5 x the 60 s resync, as `NewWatchBasedManager`; objects used only by env are read once, at
container creation) is stopped and started again, with a fresh list, on the next `get`; and an
object marked `immutable` is not watched once read (it cannot change). `wait_synced` does not
count as a read: every pod sync calls it, and a stopped watch's object is already known.

And one bound the kubelet does not need: a pod's objects past its first WATCHES_PER_POD
watches are read by GET on one poller thread every POLL_PERIOD (the kubelet's `Cache`
change-detection strategy), so one pod with hundreds of references costs a few threads and
connections, not hundreds (issue 26). Node credentials may GET every object a pod of theirs
references.

The recycler and the poller are threads on demand: the recycler lives while a watch runs, the
poller while an object is polled, so a node whose pods reference nothing holds neither.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube import paths
from kubelet_sim.kube.informer import Informer, ListWatchSource, WatchTimeouts
from kubelet_sim.kube.paths import Collection
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor

# (kind, namespace, name); kind is "ConfigMap" or "Secret".
Ref = tuple[str, str, str]

MAX_IDLE = 300.0  # 5 x the kubelet's syncFrequency (watch_based_manager's maxIdleTime)
RECYCLE_PERIOD = 60.0  # how often idle watches are looked for (the kubelet's: every minute)
# A read of a stopped watch waits this long for the new list, as the kubelet's Get polls
# hasSynced for 1 s; past it the copy we had answers and the list's end queues the pod again.
RESTART_WAIT = 1.0
# Past this many watches of its own, a pod's further objects are read by GET on one poller
# thread instead (the kubelet's other change-detection strategy, `Cache`: a GET with a TTL):
# a pod with 300 references costs 4 threads and connections, not 300.
WATCHES_PER_POD = 4
POLL_PERIOD = 10.0


class _Polled:
    """An object read by GET every poll period: the last answer and whether one came."""

    def __init__(self) -> None:
        self.obj: Json | None = None
        self.version: str | None = None
        self.synced = threading.Event()


def own_pool(api: client.ApiClient, size: int) -> client.ApiClient:
    """A client like `api` with a connection pool of its own, `size` connections kept.

    Each watch holds a connection for its whole life; in the agent's shared pool (a few
    connections) every watch that ended found the pool full and had its connection thrown away
    (urllib3's "Connection pool is full" warning) and the next one opened a new one. A pool
    sized for the watches keeps them for reuse; connections are only opened when used.
    """
    configuration = copy.deepcopy(api.configuration)
    configuration.connection_pool_maxsize = size
    own = client.ApiClient(configuration=configuration)
    own.user_agent = api.user_agent
    return own


class ReferencedObjectWatches:
    """Reference-counts objects by the pods (uids) that use them; a watch lives while used."""

    def __init__(
        self,
        api: client.ApiClient,
        on_change: Callable[[Ref], None],
        *,
        timeouts: WatchTimeouts | None = None,
        backoff: Callable[[], Backoff] | None = None,
        node: str = "",
        supervisor: Supervisor,
        max_idle: float = MAX_IDLE,
        recycle_period: float = RECYCLE_PERIOD,
        pool_size: int | None = None,
        watches_per_pod: int = WATCHES_PER_POD,
        poll_period: float = POLL_PERIOD,
    ) -> None:
        self._api = api if pool_size is None else own_pool(api, pool_size)
        self._watches_per_pod = watches_per_pod
        self._poll_period = poll_period
        self._polled: dict[Ref, _Polled] = {}
        self._poll_now = threading.Event()
        self._recheck = threading.Event()  # a watch stopped: the recycler may have none left
        self._on_change = on_change
        self._timeouts = timeouts
        self._backoff = backoff
        self._users: dict[Ref, set[str]] = {}
        self._by_pod: dict[str, set[Ref]] = {}
        self._informers: dict[Ref, Informer] = {}
        self._last_read: dict[Ref, float] = {}  # time.monotonic() of the last `get`
        self._parked: set[Ref] = set()  # watch stopped (idle or immutable); cache kept
        self._immutable: set[Ref] = set()
        self._max_idle = max_idle
        self._recycle_period = recycle_period
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._log_context: dict[str, Any] = {"node": node} if node else {}
        self.log = get_logger("kubelet_sim.object_watches", **self._log_context)
        self._supervisor = supervisor
        self._recycler = self._supervisor.on_demand(
            "object watch recycler", self._recycle_loop, self._stopping
        )
        self._poller = self._supervisor.on_demand("object poller", self._poll_loop, self._stopping)
        self._recycler.start()
        self._poller.start()

    def set_pod_references(self, pod_uid: str, refs: Iterable[Ref]) -> None:
        """Record what a pod uses now; start watches it is the first user of, stop unused ones."""
        wanted = set(refs)
        with self._lock:
            before = self._by_pod.get(pod_uid, set())
            if wanted:
                self._by_pod[pod_uid] = wanted
            else:
                self._by_pod.pop(pod_uid, None)
            for ref in wanted - before:
                self._users.setdefault(ref, set()).add(pod_uid)
            for ref in before - wanted:
                self._users.get(ref, set()).discard(pod_uid)
            new = sorted(r for r in wanted if r not in self._informers and r not in self._polled)
            watched = sum(1 for r in wanted if r in self._informers)
            room = max(0, self._watches_per_pod - watched)
            to_start, to_poll = new[:room], new[room:]
            for ref in to_poll:
                self._polled[ref] = _Polled()
            had_polled = bool(self._polled)
            for ref in before - wanted:
                if not self._users.get(ref):
                    self._polled.pop(ref, None)
            if had_polled and not self._polled:
                self._poll_now.set()  # the poller has nothing left: it ends now
            to_stop = [
                ref
                for ref in before - wanted
                if not self._users.get(ref) and ref in self._informers
            ]
            started = {ref: self._new_informer(ref) for ref in to_start}
            self._informers.update(started)
            now = time.monotonic()
            self._last_read.update(dict.fromkeys(started, now))
            stopped = [self._informers.pop(ref) for ref in to_stop]
            for ref in to_stop:
                self._users.pop(ref, None)
                self._last_read.pop(ref, None)
                self._parked.discard(ref)
                self._immutable.discard(ref)
        self._wake_loops(started=bool(started), stopped=bool(stopped), polled=bool(to_poll))
        for informer in started.values():
            informer.start()
        for informer in stopped:
            informer.stop()
        self._log_refs("watching", to_start)
        self._log_refs("stopped watching", to_stop)

    def _wake_loops(self, *, started: bool, stopped: bool, polled: bool) -> None:
        """The recycler once a watch runs (and to end once none does), the poller once an
        object is polled."""
        if started:
            self._recycler.wake()
        if stopped:
            self._recheck.set()
        if polled:
            self._poll_now.set()
            self._poller.wake()

    def _log_refs(self, event: str, refs: Iterable[Ref]) -> None:
        for kind, namespace, name in refs:
            self.log.info(event, kind=kind, namespace=namespace, name=name)

    def forget_pod(self, pod_uid: str) -> None:
        self.set_pod_references(pod_uid, ())

    def get(self, ref: Ref) -> Json | None:
        """The object as last seen, or None if it does not exist (or is not listed yet).

        A read: it keeps the watch alive, restarts an idle one (waiting for its list), and
        stops watching an object that says it is immutable.
        """
        key = f"{ref[1]}/{ref[2]}"
        with self._lock:
            polled = self._polled.get(ref)
            if polled is not None:
                return copy.deepcopy(polled.obj) if polled.obj is not None else None
            informer = self._informers.get(ref)
            if informer is None:
                return None
            self._last_read[ref] = time.monotonic()
            restart = ref in self._parked and ref not in self._immutable
            if restart:
                old, informer = informer, self._new_informer(ref)
                self._informers[ref] = informer
                self._parked.discard(ref)
        if restart:
            informer.start()
            self._recycler.wake()
            self.log.info("watching again", kind=ref[0], namespace=ref[1], name=ref[2])
            if not informer.synced.wait(RESTART_WAIT):
                return old.get(key)  # the server is slow: the copy we had is the best we know
        found = informer.get(key)
        if found is not None and found.get("immutable") is True:
            self._park(ref, informer, immutable=True)
        return found

    def is_synced(self, ref: Ref) -> bool:
        with self._lock:
            polled = self._polled.get(ref)
            if polled is not None:
                return polled.synced.is_set()
            informer = self._informers.get(ref)
            parked = ref in self._parked
        return informer is not None and (parked or informer.synced.is_set())

    def active(self) -> int:
        """Watches running now (threads and connections they hold)."""
        with self._lock:
            return len(self._informers) - len(self._parked)

    def recycle(self) -> int:
        """Stop the watches nobody read for `max_idle` (listed ones only); how many."""
        deadline = time.monotonic() - self._max_idle
        with self._lock:
            idle = [
                (ref, informer)
                for ref, informer in self._informers.items()
                if ref not in self._parked
                and informer.synced.is_set()
                and self._last_read.get(ref, 0.0) < deadline
            ]
        for ref, informer in idle:
            self._park(ref, informer, immutable=False)
        return len(idle)

    def wait_synced(self, refs: Iterable[Ref], timeout: float) -> bool:
        """Block until every ref's first list is in (so "absent" really means absent)."""
        deadline = time.monotonic() + timeout
        for ref in refs:
            with self._lock:
                polled = self._polled.get(ref)
                informer = self._informers.get(ref)
                parked = ref in self._parked
            if polled is not None:
                if not polled.synced.wait(max(0.0, deadline - time.monotonic())):
                    return False
                continue
            if informer is None:
                return False
            if parked:
                continue  # listed before it was stopped; a `get` restarts it
            if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def users_of(self, ref: Ref) -> set[str]:
        """The pod uids that use an object (to resync them when it changes)."""
        with self._lock:
            return set(self._users.get(ref, set()))

    def watched(self) -> set[Ref]:
        with self._lock:
            return set(self._informers)

    def polled(self) -> set[Ref]:
        """Objects read by GET on the poller thread (past a pod's own watches)."""
        with self._lock:
            return set(self._polled)

    def informer(self, ref: Ref) -> Informer | None:
        return self._informers.get(ref)

    def stop(self, timeout: float = 5.0) -> None:
        """Waits `timeout` in all for the watch threads."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with self._lock:
            informers = list(self._informers.values())
            self._informers.clear()
            self._users.clear()
            self._by_pod.clear()
            self._parked.clear()
            self._last_read.clear()
        self._poll_now.set()
        self._recheck.set()
        for informer in informers:
            informer.stop(max(0.0, deadline - time.monotonic()))
        self._poller.stop(max(0.0, deadline - time.monotonic()))
        self._recycler.stop(max(0.0, deadline - time.monotonic()))

    def threads(self) -> int:
        """The recycler's and the poller's threads alive now (the watches' own not counted)."""
        return self._recycler.running() + self._poller.running()

    def _park(self, ref: Ref, informer: Informer, *, immutable: bool) -> None:
        """Stop a watch but keep its cache: an idle one restarts on the next `get`."""
        with self._lock:
            if self._informers.get(ref) is not informer or ref in self._parked:
                return
            self._parked.add(ref)
            if immutable:
                self._immutable.add(ref)
        informer.stop(timeout=0)
        self._recheck.set()
        why = "object is immutable" if immutable else "not read for a while"
        self.log.info("stopped watching", kind=ref[0], namespace=ref[1], name=ref[2], why=why)

    def _poll_loop(self) -> None:
        """GET every polled object each period (new ones at once); a change, or a first
        answer, queues its users as a watch event would. Returns once none is polled."""
        while not self._stopping.is_set():
            with self._lock:
                due = list(self._polled.items())
            if not due:
                return
            for ref, polled in due:
                if self._stopping.is_set():
                    return
                self._poll_one(ref, polled)
            self._poll_now.wait(self._poll_period)
            self._poll_now.clear()

    def _poll_one(self, ref: Ref, polled: _Polled) -> None:
        kind, namespace, name = ref
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        path = f"/api/v1/namespaces/{namespace}/{plural}/{name}"
        try:
            found: Json | None = request_json(self._api, "GET", path)
        except ApiError as exc:
            if not exc.not_found:
                self.log.warning("polling an object failed", kind=kind, namespace=namespace,
                                 name=name, error=str(exc)[:200])  # fmt: skip
                return
            found = None
        except Exception as exc:  # a connection error: next period
            self.log.warning("polling an object failed", kind=kind, error=str(exc)[:200])
            return
        version = (found or {}).get("metadata", {}).get("resourceVersion") if found else None
        first = not polled.synced.is_set()
        with self._lock:
            if self._polled.get(ref) is not polled:
                return  # no longer used
            changed = first or version != polled.version
            polled.obj, polled.version = found, version
        polled.synced.set()
        if changed:
            self._on_change(ref)

    def _recycle_loop(self) -> None:
        """Every period, stop idle watches; return once no watch runs (a start wakes it)."""
        next_at = time.monotonic() + self._recycle_period
        while True:
            self._recheck.clear()
            if self._stopping.is_set() or not self.active():
                return
            wait = next_at - time.monotonic()
            if wait > 0:
                self._recheck.wait(wait)  # set when a watch stops: maybe the last one
                continue
            self.recycle()
            next_at = time.monotonic() + self._recycle_period

    def _new_informer(self, ref: Ref) -> Informer:
        kind, namespace, name = ref
        method = (
            Collection(self._api, paths.CONFIG_MAPS_IN)
            if kind == "ConfigMap"
            else Collection(self._api, paths.SECRETS_IN)
        )
        source = ListWatchSource(
            description=f"{kind} {namespace}/{name}",
            list_method=method,
            args=(namespace,),
            kwargs={"field_selector": f"metadata.name={name}"},
        )
        return Informer(
            source,
            lambda _type, _obj: self._on_change(ref),
            # A first list that finds nothing has no event; its users wait for it all the same.
            observer=lambda seen: self._on_change(ref) if seen.kind == "LIST" else None,
            timeouts=self._timeouts,
            backoff=self._backoff() if self._backoff else None,
            supervisor=self._supervisor,
            **self._log_context,
        )
