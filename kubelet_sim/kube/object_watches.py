"""One watch per ConfigMap or Secret that some pod on this node uses, as the kubelet does.

The kubelet's watch-based manager watches each referenced object by name
(`fieldSelector=metadata.name=<name>` in its namespace), which is also all that node
credentials may do, and drops the watch when the last pod using it goes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from kubelet_sim.backoff import Backoff
from kubelet_sim.kube.informer import Informer, ListWatchSource, WatchTimeouts
from kubelet_sim.kube.rest import Json
from kubelet_sim.logs import get_logger

# (kind, namespace, name); kind is "ConfigMap" or "Secret".
Ref = tuple[str, str, str]


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
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._on_change = on_change
        self._timeouts = timeouts
        self._backoff = backoff
        self._users: dict[Ref, set[str]] = {}
        self._by_pod: dict[str, set[Ref]] = {}
        self._informers: dict[Ref, Informer] = {}
        self._lock = threading.Lock()
        self._log_context: dict[str, Any] = {"node": node} if node else {}
        self.log = get_logger("kubelet_sim.object_watches", **self._log_context)

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
            to_start = [ref for ref in wanted if ref not in self._informers]
            to_stop = [
                ref
                for ref in before - wanted
                if not self._users.get(ref) and ref in self._informers
            ]
            started = {ref: self._new_informer(ref) for ref in to_start}
            self._informers.update(started)
            stopped = [self._informers.pop(ref) for ref in to_stop]
            for ref in to_stop:
                self._users.pop(ref, None)
        for informer in started.values():
            informer.start()
        for informer in stopped:
            informer.stop()
        for ref in to_start:
            self.log.info("watching", kind=ref[0], namespace=ref[1], name=ref[2])
        for ref in to_stop:
            self.log.info("stopped watching", kind=ref[0], namespace=ref[1], name=ref[2])

    def forget_pod(self, pod_uid: str) -> None:
        self.set_pod_references(pod_uid, ())

    def get(self, ref: Ref) -> Json | None:
        """The object as last seen, or None if it does not exist (or is not listed yet)."""
        informer = self._informers.get(ref)
        return None if informer is None else informer.get(f"{ref[1]}/{ref[2]}")

    def is_synced(self, ref: Ref) -> bool:
        informer = self._informers.get(ref)
        return informer is not None and informer.synced.is_set()

    def wait_synced(self, refs: Iterable[Ref], timeout: float) -> bool:
        """Block until every ref's first list is in (so "absent" really means absent)."""
        deadline = time.monotonic() + timeout
        for ref in refs:
            informer = self._informers.get(ref)
            if informer is None:
                return False
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

    def informer(self, ref: Ref) -> Informer | None:
        return self._informers.get(ref)

    def stop(self, timeout: float = 5.0) -> None:
        """Waits `timeout` in all for the watch threads."""
        deadline = time.monotonic() + timeout
        with self._lock:
            informers = list(self._informers.values())
            self._informers.clear()
            self._users.clear()
            self._by_pod.clear()
        for informer in informers:
            informer.stop(max(0.0, deadline - time.monotonic()))

    def _new_informer(self, ref: Ref) -> Informer:
        kind, namespace, name = ref
        method = (
            self._core.list_namespaced_config_map
            if kind == "ConfigMap"
            else self._core.list_namespaced_secret
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
            **self._log_context,
        )
