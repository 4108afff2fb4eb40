"""The ports the pod workers own: the narrow interfaces of everything they act on or read.

The pod workers name no Docker, no API client and no concrete cache: the composition root
(kubelet_sim/assembly/build.py) passes the adapters in once, at construction. A node's runtime
on Docker (kubelet_sim/runtime/node_runtime.py) implements `PodRuntime`; tests pass an
in-memory fake (tests/fakeruntime/), held to the same contract
(tests/runtime/test_runtime_contract.py). The runtime's cut follows the CRI's RuntimeService
and ImageService. Time is the one Clock (kubelet_sim/loops/clock.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import EventRef
from kubelet_sim.kube.tokens import TokenRequest
from kubelet_sim.pod.container_config import ObjectLookup
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes import TokenSource, VolumeSetup

Ref = tuple[str, str, str]  # kind, namespace, name of a ConfigMap or Secret
Wake = Callable[[str], None]  # queue a pod uid for its worker again


class PodFilesPort(Protocol):
    """The pod's own directory on the node: managed files and the per-pod journal."""

    def pod_dir(self, pod_uid: str) -> Path: ...

    def write_managed(self, pod_uid: str, name: str, text: str) -> Path: ...

    def append_journal(self, pod_uid: str, entry: dict[str, Any]) -> None: ...


class RuntimeService(Protocol):
    """The CRI's RuntimeService as the pod workers use it: sandboxes and containers."""

    @property
    def node_name(self) -> str: ...

    @property
    def files(self) -> PodFilesPort: ...

    def run_sandbox(self, cfg: cri.SandboxConfig) -> cri.ObservedContainer: ...

    # The warm sandbox pool (podworkers/pool.py): made before their pods, no pod's until
    # claimed; a claimed one is the pod's sandbox in every call above and below.
    def run_pool_sandbox(self, image: str) -> str: ...

    def pool_sandboxes(self) -> list[cri.PooledSandbox]: ...  # unclaimed, running or not

    def claim_sandbox(self, sandbox_id: str, cfg: cri.SandboxConfig) -> cri.ObservedContainer: ...

    def create_container(self, cfg: cri.ContainerConfig, sandbox_id: str) -> str: ...

    def start_container(self, container_id: str) -> None: ...

    def stop_container(self, container_id: str, grace_seconds: float) -> None: ...

    def signal_stop(self, container_id: str) -> bool: ...  # False: not running (or gone)

    def kill_container(self, container_id: str) -> None: ...

    # An in-place resize (UpdateContainerResources): the running container's new limits.
    def update_container_resources(self, container_id: str, resources: cri.Resources) -> None: ...

    def remove_container(self, container_id: str) -> None: ...

    def inspect(self, container_id: str) -> cri.ObservedContainer | None: ...

    def list_containers(self, node_name: str | None = None) -> list[cri.ObservedContainer]: ...

    def exec_probe(
        self, container_id: str, command: Sequence[str], timeout: float
    ) -> cri.ExecResult: ...

    def termination_message(self, observed: cri.ObservedContainer) -> str: ...

    def logs_tail(self, container_id: str) -> str: ...

    def remove_pod_dir(self, pod_uid: str) -> None: ...


class ImageService(Protocol):
    """The CRI's ImageService: what is on the node, and pulling more."""

    def image_status(self, ref: str) -> cri.ImageInfo | None: ...

    def pull_image(self, ref: str, auth: cri.RegistryAuth | None = None) -> cri.ImageInfo: ...

    def list_images(self) -> list[cri.ImageSummary]: ...


class PodRuntime(RuntimeService, ImageService, Protocol):
    """Both services, as one container engine gives them."""


class ContainerCache(Protocol):
    """The node's containers as last observed (the kubelet's PLEG cache); never lists."""

    def pod_containers(self, pod_uid: str) -> list[cri.ObservedContainer]: ...

    def get(self, container_id: str) -> cri.ObservedContainer | None: ...

    def all_containers(self) -> list[cri.ObservedContainer]: ...

    def record(self, observed: cri.ObservedContainer) -> None: ...


class EventSink(Protocol):
    """Events about a pod or one of its containers; never blocks."""

    def event(self, ref: EventRef, event_type: str, reason: str, message: str) -> None: ...


class StatusSink(Protocol):
    """The pod status the API holds, and writing a new one (the kubelet's status manager)."""

    def base(self, pod: Json) -> Json: ...

    def write(self, pod: Json, status: Json) -> Json | None: ...  # None: unchanged

    def has_written(self, uid: str) -> bool: ...

    def forget(self, uid: str) -> None: ...


class PodIndex(Protocol):
    """The node's pods by uid (podworkers/pod_manager.py), as the informers last told."""

    def get(self, uid: str) -> Json | None: ...

    def pods(self) -> list[Json]: ...


class ObjectSource(Protocol):
    """The ConfigMaps and Secrets pods reference, once their first list is in."""

    def get(self, ref: Ref) -> Json | None: ...

    def is_synced(self, ref: Ref) -> bool: ...


def object_lookup(objects: ObjectSource) -> ObjectLookup:
    """The ConfigMaps and Secrets as pod logic asks for them: by kind, namespace and name."""

    def lookup(kind: str, namespace: str, name: str) -> Json | None:
        return objects.get((kind, namespace, name))

    return lookup


class PodVolumes(Protocol):
    """The node's volume manager: a pod's volumes set up (again) on every sync, torn down."""

    def setup(
        self, pod: PodView, lookup: ObjectLookup, token: TokenSource | None
    ) -> VolumeSetup: ...

    def teardown(self, pod_uid: str) -> bool: ...


class TokenIssuer(Protocol):
    """Service account tokens for projected volumes (TokenRequest), cached per pod."""

    def token(self, request: TokenRequest) -> str: ...

    def forget_pod(self, pod_uid: str) -> None: ...
