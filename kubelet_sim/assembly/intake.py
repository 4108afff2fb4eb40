"""Where pods enter the node: the API's watch and the static pods' files, into the pod manager.

As the kubelet's pod config sources: each pod seen is put in the index (podworkers/
pod_manager.py), its ConfigMaps and Secrets are watched, and its worker is woken; a pod gone
is removed and its worker cleans up. The API's copy of a static pod (its mirror) goes to the
static pods' source, never to a worker of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.informer import DELETED
from kubelet_sim.kube.object_watches import Ref, ReferencedObjectWatches
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.workqueue import WorkQueue
from kubelet_sim.pod.references import referenced_objects
from kubelet_sim.pod.static import is_mirror_pod
from kubelet_sim.podworkers.pod_manager import PodManager
from kubelet_sim.staticpods.source import StaticPods

Journal = Callable[..., None]  # (uid, step, **fields): the pod's journal (`kubelet-sim trace`)


class PodIntake:
    """The handlers the node's watches and files call: quick, they only index and enqueue.

    `static` is set once the static pods' source is made (it calls back into this)."""

    static: StaticPods | None = None

    def __init__(
        self,
        node_name: str,
        pods: PodManager,
        objects: ReferencedObjectWatches,
        queue: WorkQueue[str],
        journal: Journal,
        listed: threading.Event,
    ) -> None:
        """`listed`: set once the pod watch's first list is in (a pod seen after it came by
        the watch)."""
        self.pods = pods
        self._objects = objects
        self._queue = queue
        self._journal = journal
        self._listed = listed
        self.log = get_logger("kubelet_sim.node", node=node_name)

    def on_pod_event(self, kind: str, pod: Json) -> None:
        if is_mirror_pod(pod):  # the API's copy of a static pod: never run for itself
            if self.static is not None:
                self.static.mirror_event(kind, pod)
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        log = self.log.bind(pod=f"{meta.get('namespace')}/{meta.get('name')}", uid=uid)
        if kind == DELETED:
            self.pods.remove(uid)
            self._objects.forget_pod(uid)
            log.info("pod removed from the API")
            self._queue.add_idle(uid)
            return
        self.pods.put(uid, pod)
        self._objects.set_pod_references(uid, referenced_objects(pod))
        if kind == "ADDED":
            log.info("pod bound to this node", phase=(pod.get("status") or {}).get("phase"))
            self._journal(
                uid,
                "seen",
                event=kind,
                via="watch" if self._listed.is_set() else "list",
                resourceVersion=meta.get("resourceVersion"),
            )
        self._wake(uid)

    def on_static_pod(self, uid: str, pod: Json | None) -> None:
        """A static pod read from its file (None: gone and terminated), into the index."""
        if pod is None:
            self.pods.remove(uid)
            self._objects.forget_pod(uid)
            self._queue.add_idle(uid)
            return
        new = self.pods.put(uid, pod)
        self._objects.set_pod_references(uid, referenced_objects(pod))
        if new:
            meta = pod["metadata"]
            self.log.info(
                "static pod from a file", pod=f"{meta['namespace']}/{meta['name']}", uid=uid
            )
            self._journal(uid, "seen", event="ADDED", via="file")
        self._wake(uid)

    def on_object_change(self, ref: Ref) -> None:
        for uid in self._objects.users_of(ref):
            self._wake(uid)

    def _wake(self, uid: str, *_: Any) -> None:
        if uid:
            self._queue.add(uid)
