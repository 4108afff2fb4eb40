"""A node's pod workers on fakes only: the fake runtime and clock, and in-memory sinks for
status and events. Nothing here needs Docker or an API server.

A test adds pods, calls `sync` (the pod worker's one call per pod) and reads what the node did:
the statuses written, the events, the runtime's containers and calls.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import EventRef
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.container_config import ObjectLookup
from kubelet_sim.pod.dns import NodeDNS
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.assemble import SyncerPorts, pod_syncer
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.settings import SyncSettings
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE, PAUSE_IMAGE
from kubelet_sim.volumes import TokenSource, VolumeSetup
from tests.fakeruntime import FakeClock, FakeContainerCache, FakeRuntime
from tests.manifests import pod_manifest

NODE = "n1"
NODE_IP = "192.0.2.10"
IMAGE = BUSYBOX_IMAGE


class _DictIndex:
    """The harness's pods (a plain dict it edits) as the pod workers' index."""

    def __init__(self, pods: dict[str, Json]) -> None:
        self._pods = pods

    def get(self, uid: str) -> Json | None:
        return self._pods.get(uid)

    def pods(self) -> list[Json]:
        return list(self._pods.values())


@dataclass(frozen=True)
class Event:
    uid: str
    field_path: str
    type: str
    reason: str
    message: str


@dataclass
class FakeEvents:
    """The event sink: every event in order."""

    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, ref: EventRef, event_type: str, reason: str, message: str) -> None:
        with self.lock:
            self.events.append(Event(ref.uid, ref.field_path, event_type, reason, message))

    def reasons(self, uid: str = "") -> list[str]:
        with self.lock:
            return [e.reason for e in self.events if not uid or e.uid == uid]

    def of(self, reason: str) -> list[Event]:
        with self.lock:
            return [e for e in self.events if e.reason == reason]


@dataclass
class FakeStatus:
    """The status sink: what the API holds after each write; `error` makes writes fail."""

    written: dict[str, list[Json]] = field(default_factory=dict)
    error: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def base(self, pod: Json) -> Json:
        with self.lock:
            history = self.written.get(pod["metadata"]["uid"])
        return copy.deepcopy(history[-1]) if history else pod.get("status") or {}

    def write(self, pod: Json, status: Json) -> Json | None:
        if self.error is not None:
            raise self.error
        if status == self.base(pod):
            return None
        with self.lock:
            self.written.setdefault(pod["metadata"]["uid"], []).append(copy.deepcopy(status))
        return {**pod, "status": status}

    def has_written(self, uid: str) -> bool:
        with self.lock:
            return uid in self.written

    def forget(self, uid: str) -> None:
        with self.lock:
            self.written.pop(uid, None)

    def history(self, uid: str) -> list[Json]:
        with self.lock:
            return list(self.written.get(uid, []))


@dataclass
class FakeObjects:
    """ConfigMaps and Secrets by (kind, namespace, name); those in `unsynced` not listed yet."""

    objects: dict[tuple[str, str, str], Json] = field(default_factory=dict)
    unsynced: set[tuple[str, str, str]] = field(default_factory=set)

    def get(self, ref: tuple[str, str, str]) -> Json | None:
        return self.objects.get(ref)

    def is_synced(self, ref: tuple[str, str, str]) -> bool:
        return ref not in self.unsynced


@dataclass
class FakeVolumes:
    """Every volume a directory under `root`; a volume named in `failing` fails to mount."""

    root: Path
    failing: dict[str, str] = field(default_factory=dict)
    torn_down: list[str] = field(default_factory=list)

    def setup(self, pod: PodView, lookup: ObjectLookup, token: TokenSource | None) -> VolumeSetup:
        setup = VolumeSetup()
        for volume in pod.spec.get("volumes") or []:
            name = volume["name"]
            if name in self.failing:
                setup.errors.append(self.failing[name])
                continue
            path = self.root / pod.uid / name
            path.mkdir(parents=True, exist_ok=True)
            setup.paths[name] = path
        return setup

    def teardown(self, pod_uid: str) -> bool:
        self.torn_down.append(pod_uid)
        return True


class FakeTokens:
    def token(self, *args: Any) -> str:
        return "token"

    def forget_pod(self, pod_uid: str) -> None:
        pass


_uids = itertools.count(1)


def container(name: str = "app", **fields: Any) -> Json:
    return {"name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent", **fields}


def pod_body(name: str = "p", containers: list[Json] | None = None, **spec: Any) -> Json:
    """As the API server hands a bound pod to the node (tests/manifests.py, plus what the server
    adds: namespace, uid, resourceVersion, creationTimestamp, status)."""
    body = pod_manifest(
        name,
        containers if containers is not None else [container()],
        **{
            "nodeName": NODE,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            **spec,
        },
    )
    body["metadata"].update(
        namespace="ns",
        uid=f"uid-{next(_uids):04d}",
        resourceVersion="1",
        creationTimestamp="2025-01-01T00:00:00Z",
    )
    body["status"] = {"phase": "Pending"}
    return body


class Node:
    """The pod workers of one node, built only from fakes, as the composition root builds
    them from real parts."""

    def __init__(
        self,
        root: Path,
        *,
        workers_clock: FakeClock | None = None,
        pool_size: int | None = 0,
    ) -> None:
        self.clock = workers_clock or FakeClock()
        self.woken: list[str] = []
        self.forward: Callable[[str], None] = lambda _uid: None  # a queue to wake too
        self._wake_lock = threading.Condition()
        self.runtime = FakeRuntime(root / "runtime", clock=self.clock, node_name=NODE)
        self.runtime.add_image(IMAGE)
        self.runtime.add_image(PAUSE_IMAGE)
        self.cache = FakeContainerCache(self.runtime)
        self.status = FakeStatus()
        self.events = FakeEvents()
        self.objects = FakeObjects()
        self.volumes = FakeVolumes(root / "volumes")
        self.pods: dict[str, Json] = {}
        self.deleted: list[str] = []
        # (sandboxes made, containers started) so far, at each pace: before a new one of either
        self.paced: list[tuple[int, int]] = []
        self.delete_error: Exception | None = None
        self.services: list[Json] | None = []
        self.supervisor = Supervisor(node=NODE)
        self.pool = SandboxPool(
            self.runtime,
            size=pool_size,
            image=PAUSE_IMAGE,
            pods_in_use=lambda: len(self.pods),
            max_pods=110,
            supervisor=self.supervisor,
            clock=self.clock,
        )
        self.syncer = pod_syncer(
            SyncSettings(
                node_name=NODE,
                node_ip=NODE_IP,
                pause_image=PAUSE_IMAGE,
                allow_privileged=False,
                allocatable=Allocatable(cpu_milli=4000, memory_bytes=8 << 30, pods=110),
                dns=NodeDNS(("10.96.0.10",), "cluster.local", node_ips=(NODE_IP,)),
            ),
            SyncerPorts(
                self.runtime,
                self.cache,
                self.status,
                self.events,
                self.objects,
                final_delete=self._final_delete,
                pods=_DictIndex(self.pods),
                volumes=self.volumes,
                tokens=FakeTokens(),
                wake=self._wake,
                services=lambda: self.services,
                pool=self.pool if self.pool.enabled else None,
                pace=self._pace,
            ),
            self.supervisor,
            clock=self.clock,
            status_thread=False,
        )
        # The pod worker's requeue without its jitter: the clock is moved by what syncs ask.
        self.syncer.error_retry = Backoff(initial=10.0, cap=10.0, factor=1.0, jitter=0.0)

    # -- driving ---------------------------------------------------------------------------

    def add(self, pod: Json) -> str:
        uid: str = pod["metadata"]["uid"]
        self.pods[uid] = pod
        return uid

    def sync(self, uid: str) -> float | None:
        """One sync, then the status manager's writes (its own thread on a node)."""
        delay = self.syncer.sync(uid)
        self.syncer.status.flush()
        return delay

    def sync_until(
        self, uid: str, done: Callable[[], Any], message: str, syncs: int = 20
    ) -> float | None:
        """Sync again (moving the clock by what each sync asked for) until `done`."""
        delay: float | None = None
        for _ in range(syncs):
            delay = self.sync(uid)
            if done():
                return delay
            if delay:
                self.clock.advance(delay)
                self.syncer.stopper.kill_due()
        raise AssertionError(f"not after {syncs} syncs: {message}")

    def sync_until_ready(self, uid: str) -> None:
        self.sync_until(uid, lambda: self.condition(uid, "Ready") == "True", "Ready")

    def sync_until_deleted(self, uid: str) -> None:
        """Sync until the pod's final DELETE was sent."""
        self.sync_until(uid, lambda: self.deleted == [uid], "the final delete")

    def delete(self, uid: str, grace: int | None = None) -> None:
        """What the API server does on a graceful DELETE: a deletion timestamp and grace."""
        pod = copy.deepcopy(self.pods[uid])
        pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:10:00Z"
        if grace is not None:
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.pods[uid] = pod

    def update_status(self, uid: str) -> None:
        """The informer delivers the pod with what was last written (as the watch would)."""
        history = self.status.history(uid)
        if history:
            pod = copy.deepcopy(self.pods[uid])
            pod["status"] = history[-1]
            pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
            self.pods[uid] = pod

    def wait_woken(self, uid: str, timeout: float = 10.0) -> None:
        """Wait (with a deadline) until work off the workers brings the pod back."""
        deadline = time.monotonic() + timeout
        with self._wake_lock:
            while uid not in self.woken:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"pod {uid} was never woken")
                self._wake_lock.wait(left)
            self.woken.remove(uid)

    def close(self) -> None:
        self.pool.stop(5.0)
        self.syncer.shutdown()

    # -- reading -----------------------------------------------------------------------------

    def last_status(self, uid: str) -> Json:
        history = self.status.history(uid)
        assert history, "no status written"
        return history[-1]

    def container_status(self, uid: str, name: str) -> Json:
        status = self.last_status(uid)
        for key in ("containerStatuses", "initContainerStatuses"):
            for entry in status.get(key) or []:
                if entry["name"] == name:
                    return dict(entry)
        raise AssertionError(f"no status for container {name}")

    def containers(self, uid: str, name: str) -> list[cri.ObservedContainer]:
        return sorted(
            (c for c in self.cache.pod_containers(uid) if c.name == name), key=lambda c: c.attempt
        )

    def condition(self, uid: str, kind: str) -> str:
        """The condition's status in the last status written; "" if none yet."""
        history = self.status.history(uid)
        for cond in (history[-1] if history else {}).get("conditions") or []:
            if cond["type"] == kind:
                return str(cond["status"])
        return ""

    # -- internals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _pace(self) -> Iterator[None]:
        made = self.runtime.operations
        self.paced.append((len(made("run_sandbox")), len(made("start"))))
        yield

    def _wake(self, uid: str) -> None:
        with self._wake_lock:
            self.woken.append(uid)
            self._wake_lock.notify_all()
        self.forward(uid)

    def _final_delete(self, namespace: str, name: str, uid: str) -> None:
        if self.delete_error is not None:
            raise self.delete_error
        self.deleted.append(uid)


def api_error(status: int, reason: str = "") -> ApiError:
    return ApiError(status, reason, "from the fake")
