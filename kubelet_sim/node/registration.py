"""Registering the Node as the kubelet does (`registerWithAPIServer`, `tryRegisterWithAPIServer`).

Create it; if it already exists (a restart), adopt it: re-assert our default labels and leave
its spec (taints, unschedulable) alone. Retry with backoff (100 ms doubling to 7 s) until the
API server accepts, since a node may start before its control plane. A node with a `creator`
token adopts only a Node that carries it (`NotOurNode` otherwise, retried and logged like any
refusal): joining a cluster it does not own, it never takes over someone else's Node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from structlog.stdlib import BoundLogger

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.node_object import created_by, reconcile_existing
from kubelet_sim.node.settings import NodeSettings

REGISTRATION_MAX_BACKOFF = 7.0


class NotOurNode(ApiError):
    """A Node of our name exists that this node's creator did not make: never adopted."""

    def __init__(self, name: str) -> None:
        super().__init__(
            409,
            "AlreadyExists",
            f"a Node named {name} exists that this process did not create; it is left alone"
            " (delete it, or run this node under another name)",
        )


@dataclass(eq=False)
class Registrar:
    """Creates or adopts the Node; `register` blocks until it succeeds or `stop` is set."""

    settings: NodeSettings
    api: NodeApi
    host: HostFacts
    build: Callable[[], Json]
    log: BoundLogger
    # The uid of the Node last registered: what a delete on exit may remove.
    uid: str = field(default="", init=False)

    def register(self, stop: threading.Event) -> Json | None:
        """The registered Node (created or existing), or None if stopped first."""
        backoff = Backoff(initial=0.1, cap=REGISTRATION_MAX_BACKOFF)
        while not stop.is_set():
            try:
                return self.try_register()
            except Exception as exc:  # ApiError, or any transport failure: retry the same way
                delay = backoff.next_delay()
                self.log.warning(
                    "unable to register node with API server; retrying",
                    error=str(exc),
                    retry_in_seconds=round(delay, 2),
                )
                if isinstance(exc, NotOurNode):
                    self.log.error(str(exc))
                elif isinstance(exc, ApiError) and exc.status == 403:
                    self.log.error(
                        "the API server forbids this: the credentials need create/get/update"
                        f" on nodes (as user system:node:{self.settings.node_name})"
                    )
                stop.wait(delay)
        return None

    def try_register(self) -> Json:
        """One attempt: create, or adopt the existing Node. Raises `ApiError` to retry."""
        try:
            node = self.api.create_node(self.build())
        except ApiError as exc:
            if not exc.already_exists:
                raise
            node = self._adopt_existing()
        else:
            self.log.info("successfully registered node")
        self.uid = str((node.get("metadata") or {}).get("uid") or "")
        return node

    def _adopt_existing(self) -> Json:
        for _ in range(5):  # a conflict means someone else wrote meanwhile: read again
            existing = self.api.get_node(self.settings.node_name)
            if existing is None:
                raise ApiError(404, "NotFound", "node deleted while registering")
            creator = self.settings.creator
            if creator is not None and not created_by(existing, creator):
                raise NotOurNode(self.settings.node_name)
            updated = reconcile_existing(existing, self.settings, self.host)
            if updated is None:
                self.log.info("node was previously registered")
                return existing
            try:
                node = self.api.update_node(updated)
            except ApiError as exc:
                if not exc.conflict:
                    raise
                continue
            self.log.info("node was previously registered; default labels updated")
            return node
        raise ApiError(409, "Conflict", "node kept changing while updating its labels")
