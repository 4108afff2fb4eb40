"""The Docker engine: one per process, the same for every node it runs. With its siblings the
only place that imports `docker`.

What is the engine's lives here once: the client, its version and health (the nodes' runtime
probe), its network (the pods' network and its gateway), its images, its capabilities and its
events stream. Each node's own containers are a NodeRuntime's (node_runtime.py) on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import docker
from docker.errors import APIError, DockerException, NotFound
from structlog.stdlib import BoundLogger

from kubelet_sim import cri
from kubelet_sim.linux import namespaces
from kubelet_sim.logs import get_logger
from kubelet_sim.runtime import containers, translate
from kubelet_sim.runtime.capabilities import EngineCapabilities
from kubelet_sim.runtime.images import EngineImages
from kubelet_sim.runtime.stats import RuntimeStats


class RuntimeUnavailable(Exception):
    """The Docker engine does not answer; pods cannot run and the node is not Ready."""


class EventStream(Protocol):
    """Docker's decoded events, until closed."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def close(self) -> None: ...


DOCKER_CONNECTIONS = 64  # docker-py keeps 10 by default and drops the rest after each call


@dataclass(frozen=True, eq=False)
class DockerEngine:
    """A connected Docker client and what every node on it shares; fixed once made.

    `network` is the Docker network pod sandboxes join (kind's is `kind`); pulls that make no
    progress for `pull_progress_deadline` seconds are cancelled (dockershim's
    --image-pull-progress-deadline). `stats` counts the calls made for no node (the demo's
    images, the probe shared by many nodes); a node's calls are counted in its own.
    """

    client: docker.DockerClient
    network: str = "bridge"
    pull_progress_deadline: float = 60.0
    stats: RuntimeStats = field(default_factory=RuntimeStats)
    images: EngineImages = field(init=False, repr=False)
    capabilities: EngineCapabilities = field(init=False, repr=False)
    log: BoundLogger = field(init=False, repr=False)

    def __post_init__(self) -> None:
        log = get_logger("kubelet_sim.runtime")
        object.__setattr__(self, "log", log)
        object.__setattr__(self, "images", EngineImages(self.api, self.pull_progress_deadline))
        object.__setattr__(self, "capabilities", EngineCapabilities(self.api, log))

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        *,
        network: str = "bridge",
        pull_progress_deadline: float = 60.0,
    ) -> DockerEngine:
        """Connect ($DOCKER_HOST or the default socket) and ping, so a dead engine fails fast."""
        try:
            # connections kept for reuse: a node's pod workers, stoppers and probes call at once
            docker_client = (
                docker.DockerClient(base_url=base_url, max_pool_size=DOCKER_CONNECTIONS)
                if base_url
                else docker.from_env(max_pool_size=DOCKER_CONNECTIONS)
            )
            if str(docker_client.api.base_url).startswith("http+docker://"):
                # A local socket takes no proxy: without this, requests reads every proxy
                # variable and looks for ~/.netrc at each call (a third of its CPU per call).
                docker_client.api.trust_env = False
            docker_client.ping()
        except DockerException as exc:
            where = base_url or "DOCKER_HOST or unix:///var/run/docker.sock"
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeUnavailable(f"Docker not reachable at {where}: {reason}") from exc
        return cls(docker_client, network=network, pull_progress_deadline=pull_progress_deadline)

    @property
    def api(self) -> Any:
        """The low-level client, untyped: several of its stubs lack annotations."""
        return self.client.api

    # The engine's health and facts: the nodes' RuntimeProbe (node/status.py)

    def version(self) -> str:
        """The engine version, as nodeInfo.containerRuntimeVersion wants it (docker://X)."""
        return str(self.client.version().get("Version", "unknown"))

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except DockerException:
            return False

    def list_images(self) -> list[cri.ImageSummary]:
        return self.images.list_images(self.stats)

    def network_gateway(self) -> str:
        """This host's address on `network` (its gateway): where pods and kind's nodes reach
        the node. Raises RuntimeUnavailable, in one line, if the network does not exist."""
        try:
            attrs = cast(dict[str, Any], self.api.inspect_network(self.network))
        except NotFound:
            raise RuntimeUnavailable(f"Docker network {self.network!r} does not exist") from None
        for config in (attrs.get("IPAM") or {}).get("Config") or []:
            gateway = str(config.get("Gateway") or "")
            if gateway and ":" not in gateway:
                return gateway
        raise RuntimeUnavailable(f"Docker network {self.network!r} has no IPv4 gateway")

    def network_subnet(self) -> str | None:
        """The IPv4 subnet of the sandboxes' network (where other nodes' addresses are
        on-link), or None if Docker does not say."""
        try:
            attrs = cast(dict[str, Any], self.api.inspect_network(self.network))
        except (NotFound, APIError):
            return None
        for config in (attrs.get("IPAM") or {}).get("Config") or []:
            subnet = str(config.get("Subnet") or "")
            if subnet and ":" not in subnet:
                return subnet
        return None

    def events(self, label: str, since: str) -> EventStream:
        """Docker's events of the containers with `label` (`key` or `key=value`), from `since`
        (seconds.nanoseconds): one stream for every node (runtime/observe.py reads it)."""
        return cast(
            EventStream,
            self.api.events(
                decode=True,
                filters={"type": "container", "label": label},
                since=since,  # the stub says int; the API takes seconds.nanos
            ),
        )

    def close(self) -> None:
        self.client.close()

    # For the process itself (the demo's images and endpoint, testing/'s clean-up): no node's

    def image_status(self, ref: str) -> cri.ImageInfo | None:
        return self.images.image_status(ref, self.stats)

    def pull_image(self, ref: str, auth: cri.RegistryAuth | None = None) -> cri.ImageInfo:
        return self.images.pull_image(ref, auth, self.stats, self.log)

    def run_anchor(
        self, name: str, image: str, labels: dict[str, str]
    ) -> tuple[str, namespaces.Namespace]:
        """Start a container of `image` (a sandbox image: it only waits) on the pods' network
        with `labels`, whose network namespace holds something for pods, as kind's
        control-plane node does (`remove_owned(labels)` removes it); its IP and its network
        namespace, opened now (`_open_netns`): whoever enters it later uses that handle, never
        a pid that may by then be another process's."""
        body = translate.anchor_body(image, labels, self.network)
        self.stats.add("creates")
        container_id = containers.create(self.api, name, body, None, self.log)
        try:
            self.stats.add("starts")
            containers.start(self.api, container_id)
            return self._open_netns(container_id)
        except (cri.ContainerStartError, APIError, NotFound, OSError) as exc:
            with contextlib.suppress(Exception):
                self._remove(container_id)
            raise cri.ContainerStartError(f"{name}: {exc}") from None

    def _open_netns(self, container_id: str) -> tuple[str, namespaces.Namespace]:
        """(IP, network namespace) of a running container: its process's namespace opened
        between two inspections that show the same process running, so the pid was not
        reused in between."""
        ip, pid = self._address_and_pid(container_id)
        netns = namespaces.Namespace.of(pid, "net")
        try:
            if self._address_and_pid(container_id)[1] != pid:
                raise cri.ContainerStartError("its process changed while its namespace was opened")
        except BaseException:
            netns.close()
            raise
        return ip, netns

    def _address_and_pid(self, container_id: str) -> tuple[str, int]:
        attrs = cast(dict[str, Any], self.api.inspect_container(container_id))
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = str((networks.get(self.network) or {}).get("IPAddress") or "")
        state = attrs.get("State") or {}
        pid = int(state.get("Pid") or 0)
        if not state.get("Running") or not pid:
            raise cri.ContainerStartError("not running")
        if not ip:
            raise cri.ContainerStartError(f"no address on {self.network!r}")
        return ip, pid

    def remove_owned(self, labels: dict[str, str]) -> tuple[int, int]:
        """Force-remove every container, then every volume, that carries all of `labels`
        (what a runtime with those `owner_labels` made); (containers, volumes) removed."""
        selector = [f"{k}={v}" for k, v in labels.items()]
        found = self.api.containers(all=True, filters={"label": selector}) or []
        for container in found:
            self._remove(str(container["Id"]))
        volumes = (self.api.volumes(filters={"label": selector}) or {}).get("Volumes") or []
        for volume in volumes:
            with contextlib.suppress(NotFound, APIError):
                self.api.remove_volume(volume["Name"], force=True)
        return len(found), len(volumes)

    def label_values(self, key: str, among: dict[str, str] | None = None) -> set[str]:
        """The values of label `key` over every container that has it and all of `among`
        (one list call)."""
        selector = [key, *(f"{k}={v}" for k, v in (among or {}).items())]
        listed = self.api.containers(all=True, filters={"label": selector}) or []
        return {str((c.get("Labels") or {}).get(key, "")) for c in listed} - {""}

    def _remove(self, container_id: str) -> None:
        self.stats.add("removes")
        containers.remove(self.api, container_id)
