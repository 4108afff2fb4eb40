"""Node status: computed every 10 s, written when it changed or 5 min after the last write.

That is the kubelet's nodeStatusUpdateFrequency / nodeStatusReportFrequency split: the Lease is
the cheap heartbeat, and status writes carry real changes (Ready flipping when Docker stops
answering) plus a periodic refresh of lastHeartbeatTime.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from structlog.stdlib import BoundLogger

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError, resource_version
from kubelet_sim.loops.timers import Periodic, Timers
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.node_object import (
    PRESSURE_CONDITIONS,
    StatusFacts,
    conditions_differ,
    desired_status,
    node_status,
    ready_condition,
    runtime_errors,
    status_changed,
)
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.pod.generation import KubeletGeneration

OUR_CONDITIONS = frozenset({kind for kind, _, _ in PRESSURE_CONDITIONS} | {"Ready"})


IMAGE_LIST_PERIOD = 30.0  # the kubelet's image cache refresh (ImageGCManager's 30 s)


class RuntimeProbe(Protocol):
    """What the node needs from the container runtime (the engine, or a node's runtime on it)."""

    def ping(self) -> bool: ...

    def version(self) -> str: ...

    def list_images(self) -> list[cri.ImageSummary]: ...


class NodeStatusController:
    """Writes node status on the process's timers; re-registers the Node when it was deleted."""

    def __init__(
        self,
        settings: NodeSettings,
        api: NodeApi,
        host: HostFacts,
        probe: RuntimeProbe,
        register: Callable[[threading.Event], Json | None],
        log: BoundLogger,
        timers: Timers,
        generation: Callable[[], KubeletGeneration],
    ) -> None:
        """`generation`: whose rules the status follows (the API server's version's kubelet)."""
        self._settings = settings
        self.generation = generation
        self._timers = timers
        self._timer: Periodic | None = None
        self._api = api
        self._host = host
        self._probe = probe
        self._register = register
        self._log = log
        self._stop = threading.Event()
        self._reregister = threading.Event()
        self._lock = threading.Lock()
        self._runtime_ever_answered = False
        self._runtime_version = "unknown"
        self._image_list: list[cri.ImageSummary] = []
        self._images_listed: float | None = None  # time.monotonic() of the last list
        self._conditions: list[Json] = []  # our conditions as the server last had them
        self._last_sent: Json | None = None
        self._last_write: float | None = None  # time.monotonic() of the last write
        self.name_addresses: tuple[str, ...] = ()  # the node name, resolved (set at start)
        self._spec: Json | None = None
        self._server: tuple[int, Json] = (0, {})  # (resourceVersion, status) newest seen

    # --- called by the lifecycle and the node -----------------------------------------------

    def observe_runtime(self) -> tuple[str, list[str]]:
        """Ping the runtime: its version (last known if it is down) and the kubelet's errors."""
        try:
            answers = self._probe.ping()
            if answers:
                self._runtime_version = self._probe.version()
        except Exception:  # a probe that raises is a runtime that does not answer
            answers = False
        self._runtime_ever_answered |= answers
        return self._runtime_version, runtime_errors(answers, self._runtime_ever_answered)

    def facts(self) -> StatusFacts:
        """What a status is made of: the runtime pinged, its images (unless it fails), now."""
        version, errors = self.observe_runtime()
        images = self.images() if not errors else ()
        now = datetime.now(UTC)
        return StatusFacts(version, errors, now, images, self.name_addresses, self.generation())

    def images(self) -> list[cri.ImageSummary]:
        """The runtime's images, listed at most every IMAGE_LIST_PERIOD as the kubelet's image
        cache is refreshed; the last list when the runtime cannot answer."""
        now = time.monotonic()
        if self._images_listed is not None and now - self._images_listed < IMAGE_LIST_PERIOD:
            return self._image_list
        try:
            self._image_list = self._probe.list_images()
            self._images_listed = now
        except Exception as exc:  # the status goes out anyway, as the setter's error is logged
            self._log.debug("listing images failed", error=str(exc))
        return self._image_list

    def adopt(self, node: Json) -> None:
        """Start from the registered Node: its conditions carry the transition times we keep."""
        status = node.get("status") or {}
        self._saw(node)
        with self._lock:
            self._conditions = [
                c for c in status.get("conditions") or [] if c.get("type") in OUR_CONDITIONS
            ]
            self._last_sent = None  # compare with what we send, not with the server's copy
            self._spec = _spec_summary(node)

    def start(self) -> None:
        self._stop.clear()
        self._timer = self._timers.every(
            "node-status",
            self._settings.node_name,
            self._settings.status_update_interval,
            self.sync,
            jitter=0.0,
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel(wait=timeout)  # a write in flight ends first (then the Node may go)

    def node_deleted(self) -> None:
        """The informer saw our Node deleted: register it again at once."""
        self._reregister.set()
        if self._timer is not None:
            self._timer.wake()

    def node_changed(self, node: Json) -> None:
        """Log what the cluster changed in our spec (cordon, taints); the kubelet only reacts."""
        self._saw(node)
        summary = _spec_summary(node)
        with self._lock:
            previous, self._spec = self._spec, summary
        if previous is None:
            return
        if previous["unschedulable"] != summary["unschedulable"]:
            self._log.info("node cordoned" if summary["unschedulable"] else "node uncordoned")
        added = sorted(summary["taints"] - previous["taints"])
        removed = sorted(previous["taints"] - summary["taints"])
        if added or removed:
            self._log.info("node taints changed", added=added, removed=removed)

    def _saw(self, node: Json) -> None:
        """Keep the newest status the server holds: the base of the next two-way patch."""
        rv = resource_version(node)
        with self._lock:
            if rv >= self._server[0]:
                self._server = (rv, node.get("status") or {})

    # --- the loop ------------------------------------------------------------------------------

    def sync(self) -> None:
        """One status update: re-register if needed, compute, write when changed or due."""
        if self._reregister.is_set():
            self._reregister.clear()
            self._register_again("node deleted; registering it again")
        if self._update() == "missing":
            self._register_again("node not found while updating its status; registering it")
            self._update()

    def _update(self) -> str:
        facts = self.facts()
        with self._lock:
            # The server's conditions, as the kubelet sets its status on the Node it GETs: a
            # node lifecycle controller that marked us Unknown (a lost connection) is
            # answered at the next update, with a new transition time.
            served = list(self._server[1].get("conditions") or [])
            previous_conditions = served or list(self._conditions)
            last_sent = self._last_sent
        status = node_status(self._settings, self._host, facts, previous_conditions)
        if (
            not self._report_due()
            and not status_changed(last_sent, status)
            and not conditions_differ(served, status["conditions"])
        ):
            return "unchanged"
        result = self._write(status)
        if result == "written":
            self._log_ready_transition(previous_conditions, status["conditions"])
        return result

    def _report_due(self) -> bool:
        last = self._last_write
        return last is None or time.monotonic() - last >= self._settings.status_report_interval

    def _write(self, status: Json) -> str:
        """PATCH the status: "written", "missing" (the Node is gone) or "failed"."""
        with self._lock:
            original = self._server[1]
        try:
            updated = self._api.patch_node_status(
                self._settings.node_name, original, desired_status(original, status)
            )
        except ApiError as exc:
            if exc.not_found:
                return "missing"
            self._log.warning("error updating node status, will retry", error=str(exc))
            return "failed"
        except Exception as exc:  # a transport failure: the next update retries
            self._log.warning("error updating node status, will retry", error=str(exc))
            return "failed"
        self._saw(updated)
        with self._lock:
            self._last_sent = status
            self._conditions = status["conditions"]
            self._last_write = time.monotonic()
        return "written"

    def _register_again(self, why: str) -> None:
        self._log.warning(why)
        node = self._register(self._stop)
        if node is not None:
            self.adopt(node)
            with self._lock:
                self._last_write = None  # write the full status right after

    def _log_ready_transition(self, before: list[Json], after: list[Json]) -> None:
        old, new = ready_condition(before), ready_condition(after)
        if new is None or (old is not None and old.get("status") == new.get("status")):
            return
        if new["status"] == "True":
            self._log.info("node is Ready", reason=new["reason"])
        else:
            self._log.warning("node is NotReady", reason=new["reason"], message=new["message"])


def _spec_summary(node: Json) -> Json:
    spec = node.get("spec") or {}
    taints = {
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec.get("taints") or []
    }
    return {"unschedulable": bool(spec.get("unschedulable")), "taints": taints}
