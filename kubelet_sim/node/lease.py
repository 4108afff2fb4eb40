"""The node heartbeat: a Lease in kube-node-lease renewed every 10 s, as the kubelet keeps it.

Follows client-go's lease controller (`component-helpers/apimachinery/lease/controller.go`):
update from the last Lease we wrote (no GET per renewal); on failure fall back to get-or-create
with backoff (200 ms doubling to 7 s); on 409 re-read and retry, up to 5 times per renewal.
The node controller marks the node Unknown when renewTime is older than the lease duration.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from structlog.stdlib import BoundLogger

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.loops.timers import URGENT, Periodic, Timers
from kubelet_sim.node.node_object import format_micro_time
from kubelet_sim.node.settings import NodeSettings

LEASE_NAMESPACE = "kube-node-lease"
MAX_UPDATE_RETRIES = 5
MAX_BACKOFF = 7.0
JITTER = 0.04


class LeaseController:
    """Keeps the node's Lease fresh until `stop()`, on the process's `timers` (first of the
    work due there: a late Lease costs more than anything else late)."""

    def __init__(
        self,
        settings: NodeSettings,
        api: NodeApi,
        log: BoundLogger,
        timers: Timers,
    ) -> None:
        self._settings = settings
        self._api = api
        self._log = log.bind(lease=f"{LEASE_NAMESPACE}/{settings.node_name}")
        self._stop = threading.Event()
        self._timers = timers
        self._timer: Periodic | None = None
        self._latest: Json | None = None

    def start(self) -> None:
        self._stop.clear()
        self._timer = self._timers.every(
            "lease",
            self._settings.node_name,
            self._settings.lease_renew_interval,
            self.sync,
            jitter=JITTER,
            priority=URGENT,
            sliding=False,  # a slow answer does not space the renewTimes further apart
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel(wait=timeout)  # a write in flight ends first (then the Node may go)

    def sync(self) -> None:
        """One renewal: update from the last written Lease, else get-or-create then update."""
        if self._latest is not None:
            if self._retry_update(self._latest):
                return
            self._log.info("failed to update lease using latest lease, fallback to ensure lease")
        lease, created = self._backoff_ensure()
        self._latest = lease
        if lease is not None and not created and not self._retry_update(lease):
            self._log.error(
                "will retry updating lease", interval=self._settings.lease_renew_interval
            )

    def _backoff_ensure(self) -> tuple[Json | None, bool]:
        sleep = 0.1
        while not self._stop.is_set():
            try:
                return self._ensure()
            except Exception as exc:  # ApiError or a transport failure: back off and retry
                sleep = min(2 * sleep, MAX_BACKOFF)
                self._log.error(
                    "failed to ensure lease exists, will retry", error=str(exc), interval=sleep
                )
                self._stop.wait(sleep)
        return None, False

    def _ensure(self) -> tuple[Json | None, bool]:
        """The current Lease, creating it when missing; (None, False) if the Node is missing."""
        lease = self._api.get_lease(LEASE_NAMESPACE, self._settings.node_name)
        if lease is not None:
            return lease, False
        fresh = self._new_lease(None)
        if not fresh["metadata"].get("ownerReferences"):
            return None, False  # create with the owner reference once the Node can be read
        created = self._api.create_lease(fresh)
        self._log.info("created node lease")
        return created, True

    def _retry_update(self, base: Json) -> bool:
        for _ in range(MAX_UPDATE_RETRIES):
            if self._stop.is_set():
                return False
            try:
                self._latest = self._api.update_lease(self._new_lease(base))
                return True
            except Exception as exc:  # ApiError or a transport failure
                self._log.warning("failed to update lease", error=str(exc))
                if isinstance(exc, ApiError) and exc.conflict:
                    refreshed, _ = self._backoff_ensure()
                    if refreshed is None:
                        return False
                    base = refreshed
        return False

    def _new_lease(self, base: Json | None) -> Json:
        """A copy of `base` (or a new Lease) with holder, duration, renewTime and owner set."""
        name = self._settings.node_name
        lease = _empty_lease(name) if base is None else _copy_for_renewal(base)
        spec = lease["spec"]
        spec.setdefault("holderIdentity", name)
        spec["leaseDurationSeconds"] = self._settings.lease_duration_seconds
        spec["renewTime"] = format_micro_time(datetime.now(UTC))
        if not lease["metadata"].get("ownerReferences"):
            self._set_owner(lease)
        return lease

    def _set_owner(self, lease: Json) -> None:
        """Owner reference to the Node, so the Lease is garbage-collected with it."""
        try:
            node = self._api.get_node(self._settings.node_name)
        except Exception as exc:  # ApiError or a transport failure: try again next renewal
            self._log.warning("failed to get node to set the lease's owner", error=str(exc))
            return
        if node is None:
            self._log.warning("node not found; the lease gets its owner reference once it exists")
            return
        lease["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self._settings.node_name,
                "uid": node["metadata"]["uid"],
            }
        ]


def _copy_for_renewal(base: Json) -> Json:
    """A copy of the parts a renewal changes (spec, metadata's ownerReferences); the rest is
    shared with `base` and never changed: a process of thousands of nodes renews hundreds of
    Leases a second, and deep copies of them (managedFields and all) showed in its profile."""
    return {**base, "metadata": {**base["metadata"]}, "spec": {**(base.get("spec") or {})}}


def _empty_lease(name: str) -> Json:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {"holderIdentity": name},
    }
