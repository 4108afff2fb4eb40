"""A typed view of the parts of a pod object that the pod logic decides on.

The API object stays a dict at the edge; this view is what `pod/` reasons about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kubelet_sim.formats.durations import grace_seconds, optional_grace_seconds, optional_seconds
from kubelet_sim.formats.jsontypes import Json


@dataclass(frozen=True)
class VolumeMountView:
    name: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerView:
    name: str
    image: str
    image_pull_policy: str
    raw: Json = field(repr=False, compare=False)
    volume_mounts: tuple[VolumeMountView, ...] = ()
    termination_message_policy: str = "File"
    restart_policy: str | None = None  # "Always" marks a sidecar (restartable init container)

    @property
    def is_sidecar(self) -> bool:
        """A restartable init container (v1.29+): started in the init sequence, kept running."""
        return self.restart_policy == "Always"

    @property
    def has_readiness_probe(self) -> bool:
        return "readinessProbe" in self.raw

    @property
    def has_startup_probe(self) -> bool:
        return "startupProbe" in self.raw


class ContainerKind(StrEnum):
    """Where a container is declared: the pod spec's field (GenerateContainerRef's paths)."""

    INIT = "initContainers"
    APP = "containers"
    EPHEMERAL = "ephemeralContainers"


@dataclass(frozen=True)
class PodView:
    uid: str
    name: str
    namespace: str
    restart_policy: str
    containers: tuple[ContainerView, ...]
    init_containers: tuple[ContainerView, ...]
    # The numbers are bounded here, where they enter (kubelet_sim.formats.durations): a grace
    # period of 2**63 - 1 s is the API's to store, not ours to hand to a timer.
    termination_grace_period: int
    active_deadline_seconds: int | None
    deletion_timestamp: str | None
    deletion_grace_period: int | None
    status: Json
    raw: Json = field(repr=False, compare=False)
    # kubectl debug's containers: started once in the running sandbox, never restarted
    ephemeral_containers: tuple[ContainerView, ...] = ()

    @classmethod
    def from_api(cls, pod: Json) -> PodView:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return cls(
            uid=str(meta.get("uid", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "default")),
            restart_policy=str(spec.get("restartPolicy") or "Always"),
            containers=tuple(_container(c) for c in spec.get("containers") or []),
            init_containers=tuple(_container(c) for c in spec.get("initContainers") or []),
            ephemeral_containers=tuple(
                _container(c) for c in spec.get("ephemeralContainers") or []
            ),
            termination_grace_period=grace_seconds(spec.get("terminationGracePeriodSeconds")),
            active_deadline_seconds=optional_seconds(spec.get("activeDeadlineSeconds")),
            deletion_timestamp=meta.get("deletionTimestamp"),
            deletion_grace_period=optional_grace_seconds(meta.get("deletionGracePeriodSeconds")),
            status=pod.get("status") or {},
            raw=pod,
        )

    @property
    def sidecars(self) -> tuple[ContainerView, ...]:
        return tuple(c for c in self.init_containers if c.is_sidecar)

    @property
    def all_containers(self) -> tuple[ContainerView, ...]:
        """Init, app and ephemeral containers (podutil.AllContainers' order)."""
        return (*self.init_containers, *self.containers, *self.ephemeral_containers)

    def kind_of(self, container: ContainerView) -> ContainerKind:
        """By name, which is unique among all of a pod's containers: an app container, an init
        container, else an ephemeral one (GenerateContainerRef's order)."""
        if any(c.name == container.name for c in self.containers):
            return ContainerKind.APP
        if any(c.name == container.name for c in self.init_containers):
            return ContainerKind.INIT
        return ContainerKind.EPHEMERAL

    @property
    def fs_group(self) -> int | None:
        """The pod's fsGroup: extra group of its containers and owner of its volumes."""
        group = (self.spec.get("securityContext") or {}).get("fsGroup")
        return None if group is None else int(group)

    @property
    def full_name(self) -> str:
        """The kubelet's format.Pod: name_namespace(uid), used in its messages."""
        return f"{self.name}_{self.namespace}({self.uid})"

    @property
    def creation_timestamp(self) -> str:
        """RFC 3339 in UTC with a Z, so that text order is time order."""
        return str((self.raw.get("metadata") or {}).get("creationTimestamp") or "")

    @property
    def being_deleted(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def api_phase(self) -> str:
        return str(self.status.get("phase") or "Pending")

    @property
    def spec(self) -> Json:
        """The raw `spec` of the pod object (empty when absent)."""
        spec = self.raw.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def host_network(self) -> bool:
        return bool(self.spec.get("hostNetwork"))

    @property
    def host_pid(self) -> bool:
        return bool(self.spec.get("hostPID"))

    @property
    def host_ipc(self) -> bool:
        return bool(self.spec.get("hostIPC"))


def _container(raw: Json) -> ContainerView:
    image = str(raw.get("image") or "")
    return ContainerView(
        name=str(raw["name"]),
        image=image,
        image_pull_policy=str(raw.get("imagePullPolicy") or default_pull_policy(image)),
        raw=raw,
        volume_mounts=tuple(
            VolumeMountView(str(m["name"]), str(m["mountPath"]), bool(m.get("readOnly")))
            for m in raw.get("volumeMounts") or []
        ),
        termination_message_policy=str(raw.get("terminationMessagePolicy") or "File"),
        restart_policy=raw.get("restartPolicy"),
    )


def default_pull_policy(image: str) -> str:
    """The API server's default: Always for :latest or no tag (and no digest)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"
