"""The demo from start to clean exit: leftovers, images, control plane, nodes, sample, stream.

Every step is said as it happens with its time since the command started; Ctrl-C undoes it
all in reverse: nodes stopped, their containers removed, the control plane ended, its data
removed (unless `keep`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubelet_sim.assembly.nodeset import NodeSet, NodeSetSettings
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.controlplane.binaries import Binaries
from kubelet_sim.controlplane.cluster import ControlPlane
from kubelet_sim.controlplane.reference_node import ReferenceNode
from kubelet_sim.demo import sample
from kubelet_sim.demo.state_dir import DemoState
from kubelet_sim.formats.pem import copy_private
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.localcluster.images import ensure_images
from kubelet_sim.localcluster.local_cluster import (
    READY_TIMEOUT,
    LocalCluster,
    LocalClusterError,
    wait_default_account,
    wait_nodes_ready,
)
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.tools import handoff

REFERENCE_NODE = "kubelet-ref"  # --reference-node: the upstream kubelet's node


@dataclass(frozen=True)
class DemoSettings:
    state: DemoState
    binaries: Binaries
    # The nodes as the node options make them (the CLI's NodeOptions, shared with
    # `kubelet-sim`); the demo adds what its control plane knows: each node's credentials and
    # serving certificate, the kubelet API's client CA, and the sandbox image it settles on.
    nodes: NodeSetSettings
    default_images: tuple[str, str]  # (sample, sandbox) when the user named none
    image: str
    replicas: int = 3
    sample: bool = True
    keep: bool = False
    # --reference-node: the upstream kubelet on a containerd of its own, as node REFERENCE_NODE
    reference_node: bool = False
    # Called once the nodes are Ready, with the admin kubeconfig and the nodes' runtimes (`--ui`).
    on_nodes_ready: Callable[[Path, Mapping[str, NodeRuntime]], None] | None = None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.settings.node_name for n in self.nodes.nodes)


class Demo:
    def __init__(self, settings: DemoSettings, say: Callable[[str], None]) -> None:
        self.settings = settings
        self._say = say
        self._began = time.monotonic()
        self.local: LocalCluster | None = None
        self.nodes: NodeSet | None = None
        self.engine: DockerEngine | None = None
        self.reference: ReferenceNode | None = None

    def say(self, message: str) -> None:
        self._say(f"[{time.monotonic() - self._began:6.1f}s] {message}")

    def run(self, stop: threading.Event) -> list[tuple[str, str]]:
        """Until `stop`; then clean up. Returns the nodes' failures."""
        try:
            self._start(stop)
            assert self.nodes is not None
            return self.nodes.wait(stop)
        finally:
            stop.set()
            if self.nodes is not None:
                self.nodes.wait(stop)  # nothing may start a container while we remove them
            self.cleanup()

    def _start(self, stop: threading.Event) -> None:
        s = self.settings
        if s.reference_node and (why := ReferenceNode.unavailable(s.binaries.kubelet)):
            raise DemoError(f"--reference-node: {why}")
        leftovers = s.state.claim()
        self.engine = engine = engine_for(
            s.nodes.docker_network, pull_progress_deadline=s.nodes.image_pull_progress_deadline
        )
        containers, _volumes = engine.remove_owned(s.state.owner_labels)
        if leftovers is not None or containers:
            pid = f" (pid {leftovers.pid})" if leftovers else ""
            ended = leftovers.processes if leftovers else 0
            self.say(
                f"cleaned up after a demo that did not exit{pid}: ended {ended} processes,"
                f" removed {containers} containers"
            )
        image, pause = ensure_images(
            engine, s.image, s.nodes.pods.pause_image, defaults=s.default_images, say=self.say
        )
        self.local = local = LocalCluster(
            s.binaries,
            s.state.data / "control-plane",
            engine,
            pause_image=pause,
            owner_labels=dict(s.state.owner_labels),
            on_step=lambda what, seconds: self.say(f"{what} ready in {seconds:.1f} s"),
        )
        self.say(f"starting a control plane from {s.binaries.apiserver.parent}")
        local.start()
        self.say(local.pods_reach)
        assert local.plane is not None
        plane = local.plane
        s.state.write(children=[(pid, argv) for _name, pid, argv in plane.processes])
        admin = local.admin
        self.nodes = NodeSet(local.join(s.nodes), engine)
        self.nodes.start(stop)
        wait_nodes_ready(admin, s.node_names, stop, on_ready=lambda name: self.say(f"{name} Ready"))
        if s.reference_node and not stop.is_set():
            self._start_reference(plane, image, pause)
        copy_private(plane.admin_kubeconfig, s.state.kubeconfig)
        if s.on_nodes_ready is not None and not stop.is_set():
            s.on_nodes_ready(s.state.kubeconfig, self.nodes.runtimes)
        self._tell_what_next()
        if s.sample and not stop.is_set():
            self._sample(admin, image, stop)

    def _start_reference(self, plane: ControlPlane, image: str, pause: str) -> None:
        """The upstream kubelet beside the virtual nodes, on the same control plane: the
        scheduler places the sample's pods on it too (its images copied from Docker)."""
        self.say(f"starting {REFERENCE_NODE}: the upstream kubelet on a containerd of its own")
        self.reference = ReferenceNode(
            plane,
            REFERENCE_NODE,
            self.settings.state.data / "reference-node",
            pause_image=pause,
            busybox_image=image,
            kubelet=plane.binaries.kubelet,  # the control plane's version (--kube-version)
        )
        self.reference.start(READY_TIMEOUT)
        self.say(f"{REFERENCE_NODE} Ready (pods on {self.reference.subnet})")

    def _tell_what_next(self) -> None:
        s = self.settings
        kubectl = s.binaries.kubectl or shutil.which("kubectl")
        k = str(kubectl) if kubectl and not shutil.which("kubectl") else "kubectl"
        lines = [
            f"export KUBECONFIG={s.state.kubeconfig}",
            "then, in another terminal:",
            f"  {k} get pods -o wide                       # who runs where",
            f"  {k} logs deploy/{sample.SAMPLE_NAME}                      # through a virtual"
            " node's kubelet API, TLS verified",
            f"  {k} scale deploy/{sample.SAMPLE_NAME} --replicas 6        # watch the handoff here",
        ]
        if kubectl is None:
            lines.append("(no kubectl found: `kubelet-sim demo --download` fetches one)")
        for line in lines:
            self._say(line)
        self.say(f"nodes' logs: {s.state.log}; Ctrl-C stops it all")

    def _sample(self, admin: KubeConnection, image: str, stop: threading.Event) -> None:
        s = self.settings
        assert self.nodes is not None
        listening = threading.Event()
        thread = threading.Thread(
            target=handoff.stream,
            args=(admin, self.nodes.runtimes, self._say, stop),
            kwargs={"namespace": sample.SAMPLE_NAMESPACE, "listening": listening},
            name="handoff stream",
            daemon=True,
        )
        thread.start()
        wait_default_account(admin, sample.SAMPLE_NAMESPACE, stop)
        while not listening.wait(0.2) and not stop.is_set():
            pass
        sample.apply(admin, image, s.replicas)
        self.say(
            f"applied Deployment {sample.SAMPLE_NAME} ({s.replicas} replicas of {image});"
            " the handoff of each pod follows"
        )

    def cleanup(self) -> None:
        began = time.monotonic()
        if self.nodes is not None:
            self.nodes.close()
        if self.engine is not None:
            containers, _ = self.engine.remove_owned(self.settings.state.owner_labels)
            self.say(f"removed {containers} containers")
            self.engine.close()
        if self.reference is not None:
            self.reference.stop()
            self.say(f"{REFERENCE_NODE} stopped")
        if self.local is not None:
            self.local.stop(remove=not self.settings.keep)
            self.say("control plane stopped")
        self.settings.state.release(keep=self.settings.keep)
        kept = f"; data kept in {self.settings.state.directory}" if self.settings.keep else ""
        self.say(f"cleaned up in {time.monotonic() - began:.1f} s{kept}")


class DemoError(LocalClusterError):
    """The demo could not come up; the message says why."""
