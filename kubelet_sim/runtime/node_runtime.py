"""One node's runtime on the process's Docker engine: the pod workers' ports.

Speaks the CRI contract (`kubelet_sim.cri`) the way dockershim did, for the containers
labelled with this node's name (and owned by it, see `owns`): the pod workers'
RuntimeService and ImageService (podworkers/ports.py). What is the engine's (the client,
images, capabilities, the network) is the DockerEngine's, shared by every node; what is kept
here is this node's own: its containers' sandboxes, hostnames and stop signals. Every Docker
call made for the node is counted in its `stats`.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from docker.errors import APIError, NotFound
from structlog.stdlib import BoundLogger

from kubelet_sim import cri
from kubelet_sim.formats.memo import BoundedMemo
from kubelet_sim.linux.safe_paths import resolve_within
from kubelet_sim.logs import get_logger
from kubelet_sim.runtime import containers, translate, uts
from kubelet_sim.runtime.containers import explain, stop_signal
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.exec_sync import EXEC_OUTPUT_LIMIT, exec_sync
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.node_streams import NodeStreams
from kubelet_sim.runtime.parse import observed_from_inspect, stats_from_docker
from kubelet_sim.runtime.pod_files import PodFiles
from kubelet_sim.runtime.stats import RuntimeStats

DEFAULT_ROOT_DIR = Path("/var/lib/kubelet-sim")
# kubecontainer.MaxContainerTerminationMessageLogLines / ...LogLength (FallbackToLogsOnError)
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
STOP_SIGNALS_REMEMBERED = 4096


@dataclass(frozen=True, eq=False)
class NodeRuntime:
    """`node_name` selects the node's containers (LABEL_NODE); `root_dir` holds its pod files
    (termination logs among them), which must be on the file system the engine sees (it
    bind-mounts them).

    `owner_labels` go on every container and volume this runtime makes: the demo marks what
    it owns so that it removes exactly that, also after a crash, and nothing a user's own
    node made. None: every container of the node, whoever made it (the trace tool reads them
    all)."""

    engine: DockerEngine
    node_name: str = ""
    root_dir: Path = DEFAULT_ROOT_DIR
    log_rotation: LogRotation = field(default_factory=LogRotation)  # json-file max-size/-file
    owner_labels: dict[str, str] | None = field(default_factory=dict)
    stats: RuntimeStats = field(default_factory=RuntimeStats)
    files: PodFiles = field(init=False, repr=False)
    streams: NodeStreams = field(init=False, repr=False)  # the kubelet API's (server/ports.py)
    log: BoundLogger = field(init=False, repr=False)
    # sandbox id → (host network, host pid): containers share the sandbox's namespaces.
    _sandbox_ns: dict[str, tuple[bool, bool]] = field(default_factory=dict, init=False, repr=False)
    # Claimed pool sandbox id → the pod's hostname, and a container made in one → the same:
    # Docker gives a container that joins a sandbox the sandbox's *configured* hostname (the
    # pool's) in its UTS namespace and its HOSTNAME variable, so the pod's is set in its
    # environment at its create and in its UTS namespace as it starts.
    _pool_hostnames: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _pending_hostnames: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    # Container id → its stop signal, from the inspect that the events stream makes of each
    # container anyway: a stop then needs no inspect of its own (one Docker call less, and in a
    # burst of deletions each call waits behind the engine's other work). Oldest first.
    _stop_signals: BoundedMemo[str, str] = field(
        default_factory=lambda: BoundedMemo(STOP_SIGNALS_REMEMBERED), init=False, repr=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", PodFiles(self.root_dir))
        object.__setattr__(self, "streams", NodeStreams(self.engine, self.stats))
        object.__setattr__(self, "log", get_logger("kubelet_sim.runtime", node=self.node_name))

    @property
    def _api(self) -> Any:
        return self.engine.api

    # Images: the engine's, counted as this node's calls

    def image_status(self, ref: str) -> cri.ImageInfo | None:
        """The local image for `ref`, or None; never touches the network."""
        return self.engine.images.image_status(ref, self.stats)

    def list_images(self) -> list[cri.ImageSummary]:
        return self.engine.images.list_images(self.stats)

    def pull_image(self, ref: str, auth: cri.RegistryAuth | None = None) -> cri.ImageInfo:
        """Pull `ref`; ImagePullError carries the message the pod's ErrImagePull shows."""
        return self.engine.images.pull_image(ref, auth, self.stats, self.log)

    # Sandboxes

    def run_sandbox(self, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        """Create and start the pod's pause container; returned inspected, with the pod IP."""
        log = self.log.bind(pod=f"{cfg.pod.namespace}/{cfg.pod.name}", container="POD")
        body = translate.sandbox_body(
            cfg, self.engine.network, log_config=self.log_rotation.log_config()
        )
        container_id = self._create(translate.sandbox_name(cfg), body)
        self._sandbox_ns[container_id] = (cfg.host_network, cfg.host_pid)
        try:
            self.start_container(container_id)
        except cri.ContainerStartError:
            self.remove_container(container_id)  # a retry reuses the name
            raise
        observed = self.inspect(container_id)
        if observed is None:
            raise cri.ContainerStartError(f"sandbox {container_id[:12]} vanished after start")
        log.debug("sandbox running", id=container_id[:12], ip=observed.ip)
        return observed

    def run_pool_sandbox(self, image: str) -> str:
        """Create and start a sandbox for the node's pool (podworkers/pool.py); its id."""
        body = translate.pool_sandbox_body(
            self.node_name, image, self.engine.network, log_config=self.log_rotation.log_config()
        )
        name = f"{cri.POOL_NAME_PREFIX}{self.node_name}_{uuid.uuid4().hex[:12]}"
        container_id = self._create(name, body)
        try:
            self.start_container(container_id)
        except cri.ContainerStartError:
            self.remove_container(container_id)
            raise
        return container_id

    def pool_sandboxes(self) -> list[cri.PooledSandbox]:
        """The node's unclaimed pool sandboxes (this runtime's: see `owns`), running or not."""
        selector = [f"{cri.LABEL_NODE}={self.node_name}", f"{cri.LABEL_POOL}=true"]
        self.stats.add("lists")
        listed = self._api.containers(all=True, filters={"label": selector}) or []
        return [
            cri.PooledSandbox(
                id=str(s["Id"]),
                created=float(s.get("Created") or 0),
                running=s.get("State") == "running",
            )
            for s in listed
            if self.owns(s.get("Labels") or {})
            and any(n.lstrip("/").startswith(cri.POOL_NAME_PREFIX) for n in s.get("Names") or [])
        ]

    def claim_sandbox(self, sandbox_id: str, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        """Make a pool sandbox the pod's: its hostname (UTS namespace and /etc/hostname) first,
        then its name, which is the claim (a crash before it leaves a pool sandbox whose next
        claim sets the hostname again). ContainerStartError if it cannot be had."""
        if cfg.host_network or cfg.host_pid or cfg.host_ipc or cfg.sysctls or cfg.port_mappings:
            raise cri.ContainerStartError("this sandbox must be made for its pod")
        self.stats.add("inspects")
        try:
            attrs = cast(dict[str, Any], self._api.inspect_container(sandbox_id))
        except NotFound:
            raise cri.ContainerStartError(f"pool sandbox {sandbox_id[:12]} is gone") from None
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if not pid:
            raise cri.ContainerStartError(f"pool sandbox {sandbox_id[:12]} is not running")
        try:
            uts.set_hostname(pid, cfg.hostname)
            Path(f"/proc/{pid}/root/etc/hostname").write_text(cfg.hostname + "\n")
            self._api.rename(sandbox_id, translate.sandbox_name(cfg))
        except (OSError, APIError) as exc:
            reason = explain(exc) if isinstance(exc, APIError) else str(exc)
            raise cri.ContainerStartError(f"claiming pool sandbox: {reason}") from None
        self._sandbox_ns[sandbox_id] = (False, False)
        self._pool_hostnames[sandbox_id] = cfg.hostname
        observed = self.inspect(sandbox_id)
        if observed is None or observed.pod.uid != cfg.pod.uid:
            raise cri.ContainerStartError(f"pool sandbox {sandbox_id[:12]} was not claimed")
        return observed

    # Containers

    def create_container(self, cfg: cri.ContainerConfig, sandbox_id: str) -> str:
        """Create (not start) a container in the sandbox's namespaces, or ContainerStartError."""
        host_network, host_pid = self._sandbox_namespaces(sandbox_id)
        hostname = self._pool_hostnames.get(sandbox_id)
        if hostname is not None:  # Docker would say the pool's; the pod's own env still wins
            cfg = replace(cfg, env=(("HOSTNAME", hostname), *cfg.env))
        log_path: str | None = None
        try:
            if cfg.termination_message_path:
                log_path = str(
                    self.files.create_termination_log(cfg.pod.uid, cfg.name, cfg.attempt)
                )
            if cfg.security.seccomp.startswith("localhost/"):
                cfg = replace(cfg, security=replace(cfg.security, seccomp=self._seccomp(cfg)))

            def body() -> dict[str, Any]:
                capabilities = self.engine.capabilities
                return translate.container_body(
                    cfg,
                    sandbox_id,
                    termination_log=log_path,
                    host_network=host_network,
                    host_pid=host_pid,
                    log_config=self.log_rotation.log_config(),
                    privileged=capabilities.privileged_parts() if cfg.security.privileged else None,
                )

            first = body()
        except (OSError, ValueError) as exc:
            raise cri.ContainerStartError(str(exc)) from None
        name = translate.container_name(cfg)
        container_id = self.engine.capabilities.create(
            lambda made: self._create(name, made), first, body, self.log
        )
        if hostname is not None:
            self._pending_hostnames[container_id] = hostname
        self.log.debug(
            "container created",
            pod=f"{cfg.pod.namespace}/{cfg.pod.name}",
            container=cfg.name,
            id=container_id[:12],
        )
        return container_id

    def _seccomp(self, cfg: cri.ContainerConfig) -> str:
        """A Localhost profile: its JSON, from <root-dir>/seccomp (the kubelet's seccomp dir)."""
        name = cfg.security.seccomp.removeprefix("localhost/")
        base = (self.root_dir / "seccomp").resolve()
        path = base / resolve_within(base, base / name, "seccomp profile")  # ValueError if out
        try:
            return path.read_text()
        except OSError as exc:
            raise ValueError(
                f"failed to generate seccomp spec opts: cannot load seccomp profile {str(path)!r}:"
                f" {exc.strerror or exc}"
            ) from None

    def start_container(self, container_id: str) -> None:
        """Start; ContainerStartError with Docker's words (e.g. executable not found)."""
        self.stats.add("starts")
        containers.start(self._api, container_id)
        hostname = self._pending_hostnames.pop(container_id, None)
        if hostname is not None:
            self._set_hostname(container_id, hostname)

    def _set_hostname(self, container_id: str, hostname: str) -> None:
        """The pod's hostname in a just-started container of a claimed pool sandbox."""
        self.stats.add("inspects")
        try:
            pid = int(self._api.inspect_container(container_id)["State"].get("Pid") or 0)
            if pid:
                uts.set_hostname(pid, hostname)
        except (NotFound, APIError, OSError) as exc:  # it ended already, or we are not root
            self.log.warning("hostname not set", id=container_id[:12], error=str(exc)[:200])

    def stop_container(self, container_id: str, grace_seconds: float) -> None:
        """SIGTERM (or the image's STOPSIGNAL), SIGKILL when the grace period ends; Docker waits."""
        self.stats.add("stops")
        try:
            self._api.stop(container_id, timeout=max(0, math.ceil(grace_seconds)))
        except NotFound:
            return
        except APIError as exc:
            if "is not running" not in explain(exc):
                raise

    def signal_stop(self, container_id: str) -> bool:
        """Send the container's stop signal (its STOPSIGNAL, else SIGTERM) without waiting.

        The SIGKILL at the end of the grace period is the caller's (kill_container), so that a
        stop never holds a thread for a grace period and a shorter one can cut it short.
        False if the container is not running (or gone).
        """
        self.stats.add("stops")
        try:
            signal = self._stop_signals.get(container_id)
            if signal is None:
                self.stats.add("inspects")
                attrs = cast(dict[str, Any], self._api.inspect_container(container_id))
                signal = stop_signal(attrs)
            self._api.kill(container_id, signal=signal)
        except NotFound:
            return False
        except APIError as exc:
            if "is not running" in explain(exc):
                return False
            raise
        return True

    def kill_container(self, container_id: str) -> None:
        """SIGKILL now; a container that already stopped or is gone is fine."""
        self.stats.add("stops")
        try:
            self._api.kill(container_id, signal="SIGKILL")
        except NotFound:
            return
        except APIError as exc:
            if "is not running" not in explain(exc):
                raise

    def update_container_resources(self, container_id: str, resources: cri.Resources) -> None:
        """An in-place resize (cri-dockerd's UpdateContainerResources: `docker update`). A CPU
        limit dropped is -1 (no quota); memory and swap move together, as at creation."""
        self.stats.add("updates")
        self._api.update_container(
            container_id,
            cpu_period=resources.cpu_period,
            cpu_quota=resources.cpu_quota if resources.cpu_quota else -1,
            cpu_shares=resources.cpu_shares,
            mem_limit=resources.memory_limit_bytes,
            memswap_limit=resources.memory_limit_bytes,
        )

    def remove_container(self, container_id: str) -> None:
        """Force-remove (with anonymous volumes); a container already gone is fine."""
        self.stats.add("removes")
        self._sandbox_ns.pop(container_id, None)
        self._pool_hostnames.pop(container_id, None)
        self._pending_hostnames.pop(container_id, None)
        self._stop_signals.pop(container_id)
        containers.remove(self._api, container_id)

    # The pod's files and output

    def remove_pod_dir(self, pod_uid: str) -> None:
        """Drop the pod's termination logs and memory volumes once its containers are gone."""
        self.files.remove_pod_dir(pod_uid)
        listed = self._api.volumes(filters={"label": f"{cri.LABEL_POD_UID}={pod_uid}"})
        for volume in (listed or {}).get("Volumes") or []:
            with contextlib.suppress(NotFound, APIError):
                self._api.remove_volume(volume["Name"], force=True)

    def termination_message(self, observed: cri.ObservedContainer) -> str:
        """What the container wrote to terminationMessagePath (last 4 KiB), "" if nothing."""
        return self.files.read_termination_message(
            observed.pod.uid, observed.name, observed.attempt
        )

    def logs_tail(
        self, container_id: str, max_lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES
    ) -> str:
        """The end of stdout+stderr, for FallbackToLogsOnError: last lines, then last bytes."""
        try:
            raw = self._api.logs(container_id, stdout=True, stderr=True, tail=max_lines)
        except (NotFound, APIError):
            return ""
        return str(raw[-max_bytes:].decode("utf-8", errors="replace"))

    def exec_probe(
        self,
        container_id: str,
        command: Sequence[str],
        timeout: float,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> cri.ExecResult:
        """Run `command` in the container for a probe or hook (ExecSync: one deadline, a
        command past it killed): its exit code and first output."""
        self.stats.add("execs")
        return exec_sync(self._api, container_id, command, timeout, limit)

    def container_stats(self, container_id: str) -> cri.ContainerStats | None:
        """One sample of a running container's CPU and memory (None if it is gone)."""
        self.stats.add("stats")
        try:
            raw = self._api.stats(container_id, stream=False, one_shot=True)
        except (NotFound, APIError):
            return None
        return stats_from_docker(raw)

    # Observation

    def inspect(self, container_id: str) -> cri.ObservedContainer | None:
        """One container as Docker sees it now; None if gone or not one of ours."""
        self.stats.add("inspects")
        try:
            attrs = cast(dict[str, Any], self._api.inspect_container(container_id))
        except NotFound:
            self._stop_signals.pop(container_id)
            return None
        self._stop_signals.put(container_id, stop_signal(attrs))
        image_id = self.engine.images.image_id_for(str(attrs.get("Image", "")), self.stats)
        return observed_from_inspect(attrs, image_id)

    def list_containers(self, node_name: str | None = None) -> list[cri.ObservedContainer]:
        """All containers of the node (running or not): one list call, then one inspect each."""
        node = node_name if node_name is not None else self.node_name
        if not node:
            raise ValueError("list_containers needs a node name")
        self.stats.add("lists")
        summaries = self._api.containers(all=True, filters={"label": f"{cri.LABEL_NODE}={node}"})
        mine = (s for s in summaries if self.owns(s.get("Labels") or {}))
        found = (self.inspect(str(s["Id"])) for s in mine)
        return [c for c in found if c is not None]

    def owns(self, labels: dict[str, str]) -> bool:
        """Whether a container with these labels is this runtime's (see cri.LABEL_OWNER)."""
        if self.owner_labels is None:
            return True
        if self.owner_labels:
            return all(labels.get(k) == v for k, v in self.owner_labels.items())
        return cri.LABEL_OWNER not in labels

    # Internals

    def _create(self, name: str, body: dict[str, Any]) -> str:
        self.stats.add("creates")
        return containers.create(self._api, name, body, self.owner_labels, self.log)

    def _sandbox_namespaces(self, sandbox_id: str) -> tuple[bool, bool]:
        """Host network/pid of a sandbox: known if we ran it, else inspected once and cached."""
        known = self._sandbox_ns.get(sandbox_id)
        if known is not None:
            return known
        self.stats.add("inspects")
        try:
            attrs = cast(dict[str, Any], self._api.inspect_container(sandbox_id))
        except NotFound:
            raise cri.ContainerStartError(f"sandbox {sandbox_id[:12]} not found") from None
        host = attrs.get("HostConfig") or {}
        known = (host.get("NetworkMode") == "host", host.get("PidMode") == "host")
        self._sandbox_ns[sandbox_id] = known
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if labels.get(cri.LABEL_POOL) == "true" and pid:  # claimed before this agent started
            with contextlib.suppress(OSError):
                hostname = Path(f"/proc/{pid}/root/etc/hostname").read_text().strip()
                self._pool_hostnames[sandbox_id] = hostname
        return known
