"""A static pod's status goes to its mirror pod (the status manager's TranslatePodUID).

The pod workers sync a static pod by its own UID and write its status through this sink, which
writes it to the mirror pod that stands for it (the mirror's name, namespace and UID). With no
mirror yet, nothing is written: the status is kept, and the mirror's arrival brings the pod back
to its worker, whose next write tells all of it. A fresh mirror (one made again after a user
deleted the last) has said nothing yet: the status written before is the base the next one is
generated from, as the kubelet's status cache is, so its start time and restart counts go on.
Pods from the API pass through unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.pod_api import PodStatusWriter
from kubelet_sim.pod.static import is_static_pod


class MirrorStatus:
    """The pod workers' StatusSink (podworkers/ports.py) for a node with static pods."""

    def __init__(
        self,
        inner: PodStatusWriter,
        mirror_of: Callable[[str], Json | None],
        owns: Callable[[str], bool],
    ) -> None:
        self._inner = inner
        self._mirror_of = mirror_of
        self._owns = owns
        self._lock = threading.Lock()
        self._last: dict[str, Json] = {}  # static uid → the last status generated for it
        self._written_to: dict[str, set[str]] = {}  # static uid → mirror uids written

    @property
    def writes(self) -> int:
        return self._inner.writes

    @property
    def unchanged(self) -> int:
        return self._inner.unchanged

    def base(self, pod: Json) -> Json:
        if not is_static_pod(pod):
            return self._inner.base(pod)
        uid = str(pod["metadata"]["uid"])
        mirror = self._mirror_of(uid)
        held = self._inner.base(mirror) if mirror is not None else {}
        if held.get("startTime"):  # the mirror holds what we said
            return held
        with self._lock:
            return self._last.get(uid, held)

    def write(self, pod: Json, status: Json) -> Json | None:
        if not is_static_pod(pod):
            return self._inner.write(pod, status)
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            self._last[uid] = status
        mirror = self._mirror_of(uid)
        if mirror is None:
            return None
        qos = (mirror.get("status") or {}).get("qosClass")
        if qos and "qosClass" not in status:  # the server's, from the mirror's spec
            status = {**status, "qosClass": qos}
        with self._lock:
            self._written_to.setdefault(uid, set()).add(str(mirror["metadata"]["uid"]))
        return self._inner.write(mirror, status)

    def has_written(self, uid: str) -> bool:
        if not self._owns(uid):
            return self._inner.has_written(uid)
        mirror = self._mirror_of(uid)
        if mirror is None:
            with self._lock:
                return uid in self._last
        return self._inner.has_written(str(mirror["metadata"]["uid"]))

    def forget(self, uid: str) -> None:
        with self._lock:
            self._last.pop(uid, None)
            mirrors = self._written_to.pop(uid, set())
        for mirror_uid in mirrors:
            self._inner.forget(mirror_uid)
        self._inner.forget(uid)
