"""The running agent: wires the API edge, the Docker runtime and the controllers together."""

from __future__ import annotations

import threading

from kubelet_sim.kube.client import KubeConnection, wait_for_api_server
from kubelet_sim.kube.informer import DELETED, Informer
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.object_watches import Ref, ReferencedObjectWatches
from kubelet_sim.kube.rest import Json
from kubelet_sim.kube.watches import own_node, pods_on_node
from kubelet_sim.logs import get_logger
from kubelet_sim.node.lifecycle import NodeLifecycle
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.pod.references import referenced_objects
from kubelet_sim.runtime.docker_runtime import DockerRuntime


class Agent:
    """Owns every long-running part of the node; `run` returns once `stop` is set.

    Start order: API server reachable → Node registered (Lease and status threads) → watches
    on the Node and on the pods bound to it. Stop order is the reverse; running pods are
    left alone, as the kubelet leaves them.
    """

    def __init__(
        self, settings: NodeSettings, kube: KubeConnection, runtime: DockerRuntime
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.runtime = runtime
        self.node_name = settings.node_name
        self.log = get_logger("kubelet_sim.agent", node=self.node_name)
        self.lifecycle = NodeLifecycle(settings, NodeApi(kube.api), runtime)
        self.objects = ReferencedObjectWatches(
            kube.api, self._on_object_change, node=self.node_name
        )
        self.node_informer = Informer(
            own_node(kube.api, self.node_name), self._on_node_event, node=self.node_name
        )
        self.pod_informer = Informer(
            pods_on_node(kube.api, self.node_name), self._on_pod_event, node=self.node_name
        )

    def run(self, stop: threading.Event) -> None:
        self.log.info(
            "starting",
            api_server=self.kube.host,
            config_source=self.kube.source,
            docker_version=self.runtime.version(),
        )
        if wait_for_api_server(self.kube, stop) is None:
            self.log.info("stopped before the API server answered")
            return
        stopper = threading.Thread(target=self._stop_lifecycle_on, args=(stop,), daemon=True)
        stopper.start()
        if self.lifecycle.start():
            self.node_informer.start()
            self.pod_informer.start()
            self.log.info("running")
            stop.wait()
            self.log.info("stopping")
            self.pod_informer.stop()
            self.node_informer.stop()
            self.objects.stop()
        stopper.join()  # the lifecycle's stop may still be deleting the Node

    def _stop_lifecycle_on(self, stop: threading.Event) -> None:
        """Stop the node lifecycle as soon as asked, even during a registration retry loop."""
        stop.wait()
        self.lifecycle.stop()

    def _on_node_event(self, kind: str, node: Json) -> None:
        if kind == DELETED:
            self.log.warning("own Node deleted; registering it again")
            self.lifecycle.node_deleted()
        else:
            self.lifecycle.node_changed(node)

    def _on_pod_event(self, kind: str, pod: Json) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        log = self.log.bind(pod=f"{meta.get('namespace')}/{meta.get('name')}", uid=uid)
        if kind == DELETED:
            self.objects.forget_pod(uid)
            log.info("pod removed from the API")
            return
        refs = referenced_objects(pod)
        self.objects.set_pod_references(uid, refs)
        if kind == "ADDED":
            log.info("pod bound to this node", phase=(pod.get("status") or {}).get("phase"))

    def _on_object_change(self, ref: Ref) -> None:
        self.log.debug("referenced object changed", kind=ref[0], namespace=ref[1], name=ref[2])
