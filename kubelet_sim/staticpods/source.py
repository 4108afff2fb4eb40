"""Static pods: the file source beside the API source, and their mirror pods in the API.

As the kubelet (`pkg/kubelet/config/file.go`, `pod/pod_manager.go`, `pod/mirror_client.go`):
- the manifests are read again every `interval` (1 s; the kubelet: every 20 s and on inotify);
  a pod whose file is gone or changed (a new content is a new UID) is terminated as a deleted
  pod is, with its grace period, and a new version of the same full name starts only once the
  old one has terminated (the pod workers' static pod serialization);
- each running static pod has a mirror pod in the API, created with the node's credentials;
  one that is being deleted or stands for another version is deleted (grace 0, UID
  precondition) and made again; one whose static pod is gone and terminated is deleted.

Mirror pods reach the node through its pod watch (they are bound to the node) and are handed
here, never to the pod workers. The pod workers see the static pods in the node's one pod
index, put there and taken out through `on_pod`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass
from datetime import UTC, datetime
from pathlib import Path

from kubelet_sim.formats.durations import grace_seconds
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import WARNING, EventRecorder, EventRef
from kubelet_sim.kube.pod_api import MirrorPodApi
from kubelet_sim.kube.rest import ApiError, resource_version
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.timers import Periodic, Timers
from kubelet_sim.pod.static import (
    CONFIG_SEEN,
    FILE_SOURCE,
    full_name,
    mirror_hash,
    mirror_pod,
    seen_timestamp,
)
from kubelet_sim.staticpods.manifests import ManifestReader

POLL_SECONDS = 1.0
FAILED_VALIDATION = "FailedValidation"  # the kubelet's events.FailedValidation
FullName = tuple[str, str]  # namespace, name


@dataclass(eq=False)
class StaticPods:
    """The static pods of one node and their mirrors.

    `on_pod(uid, pod)` puts a static pod in the node's pod index (None: takes it out, it is gone);
    `wake(uid)` brings a static pod to its worker (its mirror changed: status to write);
    `node()` is the node's own Node as last seen (its UID owns the mirror pods);
    `known(uid)` tells whether the pod workers still hold state for a uid (a pod that comes
    back with the UID of one just finished waits until its cleanup is done)."""

    path: Path
    node_name: str
    api: MirrorPodApi
    _: KW_ONLY
    events: EventRecorder
    on_pod: Callable[[str, Json | None], None]
    wake: Callable[[str], None]
    node: Callable[[], Json | None]
    known: Callable[[str], bool]
    timers: InitVar[Timers]
    interval: float = POLL_SECONDS

    def __post_init__(self, timers: Timers) -> None:
        self._timers = timers
        self._duplicates: set[str] = set()  # uids ignored for another's name, already told
        self._reader = ManifestReader(self.path, self.node_name)
        self._lock = threading.RLock()
        self._active: dict[str, Json] = {}  # uid → the static pod in the index, to run
        self._terminating: dict[str, Json] = {}  # uid → gone from its file, still stopping
        self._waiting: dict[str, Json] = {}  # uid → a new version waiting for the old's end
        self._seen: dict[str, str] = {}  # uid → kubernetes.io/config.seen, from its first read
        self._mirrors: dict[FullName, Json] = {}  # mirror pods as the pod watch last told
        self._timer: Periodic | None = None
        self.log = get_logger("kubelet_sim.staticpods", node=self.node_name)

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Read the manifests once (their pods enter the index before the pod workers start,
        so their running containers are adopted, never taken for orphans), then poll."""
        self.log.info("reading static pod manifests", path=str(self.path))
        self.sync_files()
        self._timer = self._timers.every(
            "static-pods", self.node_name, self.interval, self.run_once, first_in=0.0
        )

    def stop(self, timeout: float) -> None:
        if self._timer is not None:
            self._timer.cancel(wait=timeout)  # no mirror made after the node stopped

    def _poke(self) -> None:
        """Run a pass soon (a mirror changed, a static pod terminated)."""
        if self._timer is not None:
            self._timer.wake()

    def run_once(self) -> None:
        self.sync_files()
        self.sync_mirrors()

    # -- the index's side ----------------------------------------------------------------

    def owns(self, uid: str) -> bool:
        """Whether `uid` is a static pod of this node (running or stopping)."""
        with self._lock:
            return uid in self._active or uid in self._terminating

    def mirror_of(self, uid: str) -> Json | None:
        """The mirror pod that stands for the static pod `uid` (its hash is the uid), if any:
        where its status goes (the status manager's TranslatePodUID)."""
        with self._lock:
            pod = self._active.get(uid) or self._terminating.get(uid)
            if pod is None:
                return None
            mirror = self._mirrors.get(full_name(pod))
        if mirror is None or mirror_hash(mirror) != uid:
            return None
        return mirror

    def finished(self, uid: str) -> None:
        """The pod workers are done with a static pod gone from its file (its containers have
        stopped and its terminal status is told): it leaves the index, and its mirror goes."""
        with self._lock:
            pod = self._terminating.pop(uid, None)
            self._seen.pop(uid, None)
        if pod is None:
            return
        self.log.info("static pod terminated", pod="/".join(full_name(pod)), uid=uid)
        self.on_pod(uid, None)
        self._poke()

    def mirror_event(self, kind: str, pod: Json) -> None:
        """A mirror pod from the pod watch (on the informer's thread: quick)."""
        key = full_name(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self._lock:
            held = self._mirrors.get(key)
            held_uid = str(((held or {}).get("metadata") or {}).get("uid") or "")
            if kind == "DELETED":
                if held_uid == uid:
                    del self._mirrors[key]
            elif held is None or resource_version(pod) >= resource_version(held):
                self._mirrors[key] = pod
            static = next((u for u, p in self._active.items() if full_name(p) == key), None)
        if static is not None:
            self.wake(static)
        self._poke()

    # -- files -----------------------------------------------------------------------------

    def sync_files(self) -> None:
        """Read the manifests; start, stop and replace static pods to match them."""
        manifests = self._reader.read()
        if manifests is None:  # the path is not to be trusted now: what runs is kept
            return
        wanted: dict[str, Json] = {}
        names: set[FullName] = set()
        duplicates: set[str] = set()
        now = seen_timestamp(datetime.now(UTC))
        for manifest in manifests:
            assert manifest.pod is not None
            uid = manifest.pod["metadata"]["uid"]
            with self._lock:
                seen = self._seen.get(uid)
            # the first read's time, kept while the pod is known
            pod = manifest.pod_seen(seen if seen is not None else now)
            key = full_name(pod)
            if key in names:  # the kubelet's filterInvalidPods: the first file wins
                duplicates.add(uid)
                if uid not in self._duplicates:
                    self._tell_duplicate(pod, manifest.path)
                continue
            names.add(key)
            wanted[uid] = pod
        self._duplicates = duplicates
        self._apply(wanted)

    def _tell_duplicate(self, pod: Json, path: str) -> None:
        """filterInvalidPods' log line and FailedValidation event, once per ignored version
        (the kubelet repeats them on each read; its recorder counts them)."""
        namespace, name = full_name(pod)
        uid = pod["metadata"]["uid"]
        self.log.warning(
            "static pod ignored: another manifest has its name",
            pod=f"{namespace}/{name}",
            path=path,
        )
        self.events.event(
            EventRef(namespace, name, uid),
            WARNING,
            FAILED_VALIDATION,
            f"Error validating pod {name}_{namespace}({uid}) from {FILE_SOURCE} due to"
            f' duplicate pod name "{name}", ignoring',
        )

    def _apply(self, wanted: dict[str, Json]) -> None:
        started: list[tuple[str, Json]] = []
        stopped: list[tuple[str, Json]] = []
        with self._lock:
            for uid in [u for u in self._active if u not in wanted]:
                pod = self._active.pop(uid)
                self._terminating[uid] = stopping = _being_deleted(pod)
                stopped.append((uid, stopping))
            for uid in [u for u in self._waiting if u not in wanted]:
                del self._waiting[uid]
                self._seen.pop(uid, None)
            for uid, pod in wanted.items():
                if uid in self._active:
                    continue
                if uid not in self._waiting and uid not in self._terminating:
                    self._seen.setdefault(uid, pod["metadata"]["annotations"][CONFIG_SEEN])
                    self.log.info("static pod manifest read", pod="/".join(full_name(pod)), uid=uid)
                self._waiting[uid] = pod
            for uid, pod in list(self._waiting.items()):
                if self._may_start(uid, pod):
                    del self._waiting[uid]
                    self._active[uid] = pod
                    started.append((uid, pod))
        for uid, pod in stopped:
            self.log.info("static pod manifest gone or changed: stopping", uid=uid)
            self.on_pod(uid, pod)
        for uid, pod in started:
            self.on_pod(uid, pod)

    def _may_start(self, uid: str, pod: Json) -> bool:
        """allowStaticPodStart: no other pod of its full name runs or stops, and the pod workers
        hold nothing of a pod of this uid that has just finished."""
        key = full_name(pod)
        others = (*self._active.values(), *self._terminating.values())
        if any(full_name(p) == key for p in others):
            return False
        return uid not in self._terminating and not self.known(uid)

    # -- mirror pods -----------------------------------------------------------------------

    def sync_mirrors(self) -> None:
        """Every static pod's mirror as it should be (the kubelet does it in syncPod, and
        removes orphans in HandlePodCleanups): one API call or two per change."""
        with self._lock:
            active = {full_name(p): p for p in self._active.values()}
            stopping = {full_name(p) for p in self._terminating.values()}
            mirrors = dict(self._mirrors)
        for key, mirror in mirrors.items():
            if key not in active and key not in stopping:
                self._delete(mirror, "its static pod is gone")
        for key, pod in active.items():
            self._sync_mirror(pod, mirrors.get(key))

    def _sync_mirror(self, pod: Json, mirror: Json | None) -> None:
        """syncPod's part: a mirror being deleted, or of another version, is deleted (and made
        again at once); a static pod without one gets one."""
        if mirror is not None:
            if (mirror.get("metadata") or {}).get("deletionTimestamp"):
                why = "it is being deleted"
            elif mirror_hash(mirror) != pod["metadata"]["uid"]:
                why = "it stands for another version"
            else:
                return
            if not self._delete(mirror, why):
                return
        self._create(pod)

    def _delete(self, mirror: Json, why: str) -> bool:
        """DeleteMirrorPod: grace 0, with the mirror's UID as precondition. True once gone."""
        namespace, name = full_name(mirror)
        uid = str(mirror["metadata"].get("uid") or "")
        try:
            self.api.delete(namespace, name, uid)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                self.log.warning(
                    "mirror pod not deleted", pod=f"{namespace}/{name}", error=str(exc)
                )
                return False
        self.log.info("mirror pod deleted", pod=f"{namespace}/{name}", uid=uid, why=why)
        with self._lock:
            held = self._mirrors.get((namespace, name))
            if held is not None and held["metadata"].get("uid") == uid:
                del self._mirrors[(namespace, name)]
        return True

    def _create(self, pod: Json) -> None:
        """CreateMirrorPod, owned by the Node (not while the Node is unknown or deleted)."""
        node = self.node()
        meta = (node or {}).get("metadata") or {}
        if not meta.get("uid") or meta.get("deletionTimestamp"):
            return
        body = mirror_pod(pod, self.node_name, str(meta["uid"]))
        namespace, name = full_name(pod)
        try:
            created = self.api.create(body)
        except ApiError as exc:
            if not exc.already_exists:  # one of a name the watch has not told yet: next pass
                self.log.warning(
                    "failed creating a mirror pod", pod=f"{namespace}/{name}", error=str(exc)
                )
            return
        except Exception as exc:  # API unreachable: the next pass tries again
            self.log.warning(
                "failed creating a mirror pod", pod=f"{namespace}/{name}", error=str(exc)
            )
            return
        self.log.info(
            "mirror pod created",
            pod=f"{namespace}/{name}",
            uid=created["metadata"].get("uid"),
            static_uid=pod["metadata"]["uid"],
        )
        self.mirror_event("ADDED", created)


def _being_deleted(pod: Json) -> Json:
    """The static pod as the pod workers must see it once its file is gone: deleted, with its
    own grace period (HandlePodRemoves kills it as a pod deleted from the API is killed)."""
    stopping = copy.deepcopy(pod)
    meta = stopping["metadata"]
    meta["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    grace = grace_seconds((pod.get("spec") or {}).get("terminationGracePeriodSeconds"))
    meta["deletionGracePeriodSeconds"] = int(grace)
    return stopping
