"""The node's life: register the Node, keep its Lease and status fresh, optionally delete it.

`start()` blocks until the Node is registered (retrying while the API server fails) and then
runs the lease and status loops on the process's timers; `stop()`
ends them within a second or so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.timers import Timers
from kubelet_sim.node.host import HostFacts, resolve_name
from kubelet_sim.node.lease import LeaseController
from kubelet_sim.node.node_object import build_node
from kubelet_sim.node.registration import Registrar
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.node.status import NodeStatusController, RuntimeProbe
from kubelet_sim.pod.generation import KubeletGeneration

__all__ = ["NodeLifecycle", "RuntimeProbe"]


class NodeLifecycle:
    """Registration, Lease heartbeat and node status for one node, as the kubelet runs them."""

    def __init__(
        self,
        settings: NodeSettings,
        node_api: NodeApi,
        runtime_probe: RuntimeProbe,
        timers: Timers,
        host: HostFacts,
        generation: Callable[[], KubeletGeneration],
        resolve: Callable[[str], tuple[str, ...]] = resolve_name,
    ) -> None:
        """`timers`: the process's, which renew the Lease and write the status."""
        self.settings = settings
        self.timers = timers  # the process's
        self.host = host  # the process's, read once for every node
        self._resolve = resolve
        self._api = node_api
        self._stop = threading.Event()
        self._log = get_logger("kubelet_sim.node", node=settings.node_name)
        self._registrar = Registrar(settings, node_api, self.host, self._initial_node, self._log)
        self._status = NodeStatusController(
            settings,
            node_api,
            self.host,
            runtime_probe,
            self._registrar.register,
            self._log,
            timers,
            generation,
        )
        self._lease = LeaseController(settings, node_api, self._log, timers)
        self._registered = False
        self._deleted = False
        self._stop_lock = threading.Lock()

    def start(self) -> bool:
        """Register (blocking, with retries), then start the threads. False if stopped first.

        The node name is resolved once, here: the Node advertises it as its Hostname address
        only if it leads to the node IP (`node_object.addresses`)."""
        name_addresses = self._resolve(self.settings.node_name)
        self._status.name_addresses = name_addresses
        self._log.info(
            "registering node",
            node_ip=self.settings.node_ip or self.host.node_ip,
            name_resolves_to=list(name_addresses),
            taints=len(self.settings.register_with_taints),
        )
        node = self._registrar.register(self._stop)
        if node is None:
            return False
        self._registered = True
        self._status.adopt(node)
        self._status.start()
        self._lease.start()
        return True

    def stop(self) -> None:
        """Stop the threads; with delete_node_on_exit, delete the Node (needs admin rights).

        Safe to call more than once and from another thread while `start` still registers:
        the Node is deleted once, by whichever call comes after the registration.
        """
        self._stop.set()
        with self._stop_lock:
            self._status.stop()
            self._lease.stop()
            if self.settings.delete_node_on_exit and self._registered and not self._deleted:
                self._deleted = True
                self._delete_node()

    def interrupt(self) -> None:
        """End a registration still retrying, at once; `stop` ends the rest."""
        self._stop.set()

    def node_deleted(self) -> None:
        """For the node's Node watch: our Node was deleted, register it again."""
        self._status.node_deleted()

    def node_changed(self, node: Json) -> None:
        """For the node's Node watch: log spec changes (cordon, taints)."""
        self._status.node_changed(node)

    def _initial_node(self) -> Json:
        return build_node(self.settings, self.host, self._status.facts())

    def _delete_node(self) -> None:
        name = self.settings.node_name
        try:
            self._api.delete_node(name, self._registrar.uid)
        except ApiError as exc:
            if exc.not_found:
                self._log.info("node already deleted")
            elif exc.conflict:
                self._log.info("node deleted and made again by someone else: left alone")
            elif exc.status == 403:
                self._log.error(
                    "cannot delete the Node on exit: node credentials (system:node:<name>) may"
                    " not delete their own Node; run with credentials allowed to delete nodes,"
                    f" or delete it yourself: kubectl delete node {name}",
                    error=str(exc),
                )
            else:
                self._log.error("failed to delete the Node on exit", error=str(exc))
            return
        except Exception as exc:  # transport failure: nothing more to do on the way out
            self._log.error("failed to delete the Node on exit", error=str(exc))
            return
        self._log.info("deleted node on exit")
