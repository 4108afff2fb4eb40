"""The Docker engine behind the node: the only place (with its siblings) that imports `docker`.

Speaks the CRI contract (`kubelet_sim.cri`) the way dockershim did. Every engine call is
counted in `stats`: Docker calls are what a node with many pods pays for.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import docker
from docker.errors import APIError, DockerException, NotFound

from kubelet_sim import cri
from kubelet_sim.logs import get_logger
from kubelet_sim.memo import BoundedMemo
from kubelet_sim.paths import resolve_within
from kubelet_sim.runtime import images, privileged, streams, translate, uts
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.parse import observed_from_inspect, stats_from_docker
from kubelet_sim.runtime.pod_files import PodFiles

DEFAULT_ROOT_DIR = Path("/var/lib/kubelet-sim")
# kubecontainer.MaxContainerTerminationMessageLogLines / ...LogLength (FallbackToLogsOnError)
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
EXEC_OUTPUT_LIMIT = 10 * 1024  # the kubelet keeps the first 10 KiB of a probe's output
STOP_SIGNALS_REMEMBERED = 4096

_CONFLICT = re.compile(r'already in use by container "?([0-9a-f]{12,64})"?')

status_image_id = images.status_image_id  # re-exported: the imageID string of an ImageInfo


class RuntimeUnavailable(Exception):
    """The Docker engine does not answer; pods cannot run and the node is not Ready."""


@dataclass
class RuntimeStats:
    """Engine calls made so far, by kind (thread-safe counters)."""

    lists: int = 0
    inspects: int = 0
    image_inspects: int = 0
    image_lists: int = 0
    creates: int = 0
    starts: int = 0
    stops: int = 0
    removes: int = 0
    pulls: int = 0
    execs: int = 0
    streams: int = 0  # exec and attach sessions of the kubelet API (probes count as execs)
    port_forwards: int = 0
    logs: int = 0
    stats: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)


@dataclass
class DockerRuntime:
    """A connected Docker client plus what the node reports about it.

    `node_name` selects our containers (LABEL_NODE); `root_dir` holds termination-log files,
    which must be on the file system the engine sees (it bind-mounts them).
    """

    client: docker.DockerClient
    node_name: str = ""
    root_dir: Path = DEFAULT_ROOT_DIR
    network: str = "bridge"  # the Docker network pod sandboxes join (kind's is `kind`)
    pull_progress_deadline: float = 60.0  # dockershim's --image-pull-progress-deadline (1m)
    log_rotation: LogRotation = field(default_factory=LogRotation)  # json-file max-size/-file
    # Labels on every container and volume this runtime makes: the demo marks what it owns so
    # that it removes exactly that, also after a crash, and nothing a user's own node made.
    # None: every container of the node, whoever made it (the trace tool reads them all).
    owner_labels: dict[str, str] | None = field(default_factory=dict)
    stats: RuntimeStats = field(default_factory=RuntimeStats)
    _image_ids: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    # sandbox id → (host network, host pid): containers share the sandbox's namespaces.
    _sandbox_ns: dict[str, tuple[bool, bool]] = field(default_factory=dict, init=False, repr=False)
    # Claimed pool sandbox id → the pod's hostname, and a container made in one → the same:
    # Docker gives a container that joins a sandbox the sandbox's *configured* hostname (the
    # pool's), so the pod's is set in the container's UTS namespace as it starts.
    _pool_hostnames: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _pending_hostnames: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    # Container id → its stop signal, from the inspect that the events stream makes of each
    # container anyway: a stop then needs no inspect of its own (one Docker call less, and in a
    # burst of deletions each call waits behind the engine's other work). Oldest first.
    _stop_signals: BoundedMemo[str, str] = field(
        default_factory=lambda: BoundedMemo(STOP_SIGNALS_REMEMBERED), init=False, repr=False
    )
    # The engine's capability bounding set, read once (None: unknown, Docker's flag is used),
    # and the capabilities this engine refused by name (Docker 20.10 has no CAP_PERFMON).
    _engine_caps: int | None = field(default=None, init=False, repr=False)
    _engine_caps_read: bool = field(default=False, init=False, repr=False)
    _unknown_caps: set[str] = field(default_factory=set, init=False, repr=False)
    _caps_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.files = PodFiles(self.root_dir)
        self.log = get_logger("kubelet_sim.runtime", node=self.node_name)

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        *,
        node_name: str = "",
        root_dir: Path = DEFAULT_ROOT_DIR,
        network: str = "bridge",
    ) -> DockerRuntime:
        """Connect ($DOCKER_HOST or the default socket) and ping, so a dead engine fails fast."""
        try:
            docker_client = (
                docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
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
        return cls(client=docker_client, node_name=node_name, root_dir=root_dir, network=network)

    def network_gateway(self) -> str:
        """This host's address on `network` (its gateway): where pods and kind's nodes reach
        the node. Raises RuntimeUnavailable, in one line, if the network does not exist."""
        try:
            attrs = cast(dict[str, Any], self.client.api.inspect_network(self.network))
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
            attrs = cast(dict[str, Any], self.client.api.inspect_network(self.network))
        except (NotFound, APIError):
            return None
        for config in (attrs.get("IPAM") or {}).get("Config") or []:
            subnet = str(config.get("Subnet") or "")
            if subnet and ":" not in subnet:
                return subnet
        return None

    def version(self) -> str:
        """The engine version, as nodeInfo.containerRuntimeVersion wants it (docker://X)."""
        return str(self.client.version().get("Version", "unknown"))

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except DockerException:
            return False

    def close(self) -> None:
        self.client.close()

    @property
    def _api(self) -> Any:
        """The low-level client, untyped: several of its stubs lack annotations."""
        return self.client.api

    # Images

    def image_status(self, ref: str) -> cri.ImageInfo | None:
        """The local image for `ref`, or None; never touches the network."""
        self.stats.add("image_inspects")
        return images.inspect_image(self._api, ref)

    def list_images(self) -> list[cri.ImageSummary]:
        """Every image the engine holds (one call), for the Node's status.images."""
        self.stats.add("image_lists")
        listed = cast(list[dict[str, Any]], self._api.images())
        return [
            cri.ImageSummary(
                id=str(image.get("Id", "")),
                repo_tags=tuple(t for t in image.get("RepoTags") or () if "<none>" not in t),
                repo_digests=tuple(d for d in image.get("RepoDigests") or () if "<none>" not in d),
                size=int(image.get("Size") or 0),
            )
            for image in listed
        ]

    def pull_image(self, ref: str, auth: cri.RegistryAuth | None = None) -> cri.ImageInfo:
        """Pull `ref`; ImagePullError carries the message the pod's ErrImagePull shows."""
        log = self.log.bind(image=ref, registry=auth.server if auth else None)
        log.info("pulling image")
        self.stats.add("pulls")
        images.pull(self._api, ref, auth, self.pull_progress_deadline)
        self._image_ids.clear()  # a pull can add repo digests to an image we cached
        info = self.image_status(ref)
        if info is None:
            raise cri.ImagePullError("the image is not present after the pull")
        log.info("pulled image", image_id=info.id)
        return info

    # Sandboxes and containers

    def run_sandbox(self, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        """Create and start the pod's pause container; returned inspected, with the pod IP."""
        log = self.log.bind(pod=f"{cfg.pod.namespace}/{cfg.pod.name}", container="POD")
        body = translate.sandbox_body(cfg, self.network, log_config=self.log_rotation.log_config())
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

    # The warm sandbox pool (podworkers/pool.py)

    def run_pool_sandbox(self, image: str) -> str:
        """Create and start a sandbox for the node's pool (no pod's yet); its id."""
        body = translate.pool_sandbox_body(
            self.node_name, image, self.network, log_config=self.log_rotation.log_config()
        )
        name = f"{cri.POOL_NAME_PREFIX}{self.node_name}_{uuid.uuid4().hex[:12]}"
        container_id = self._create(name, body)
        try:
            self.start_container(container_id)
        except cri.ContainerStartError:
            self.remove_container(container_id)
            raise
        return container_id

    def run_anchor(self, name: str, image: str, labels: dict[str, str]) -> tuple[str, int]:
        """Start a container of `image` (a sandbox image: it only waits) on the pods' network
        with `labels`, whose network namespace holds something for pods, as kind's
        control-plane node does (`remove_owned(labels)` removes it); its (IP, pid)."""
        container_id = self._create(name, translate.anchor_body(image, labels, self.network))
        try:
            self.start_container(container_id)
            attrs = cast(dict[str, Any], self._api.inspect_container(container_id))
        except (cri.ContainerStartError, APIError, NotFound) as exc:
            with contextlib.suppress(Exception):
                self.remove_container(container_id)
            raise cri.ContainerStartError(f"{name}: {exc}") from None
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = str((networks.get(self.network) or {}).get("IPAddress") or "")
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if not ip or not pid:
            self.remove_container(container_id)
            raise cri.ContainerStartError(f"{name}: no address on {self.network!r}")
        return ip, pid

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
            reason = _explain(exc) if isinstance(exc, APIError) else str(exc)
            raise cri.ContainerStartError(f"claiming pool sandbox: {reason}") from None
        self._sandbox_ns[sandbox_id] = (False, False)
        self._pool_hostnames[sandbox_id] = cfg.hostname
        observed = self.inspect(sandbox_id)
        if observed is None or observed.pod.uid != cfg.pod.uid:
            raise cri.ContainerStartError(f"pool sandbox {sandbox_id[:12]} was not claimed")
        return observed

    def create_container(self, cfg: cri.ContainerConfig, sandbox_id: str) -> str:
        """Create (not start) a container in the sandbox's namespaces, or ContainerStartError."""
        host_network, host_pid = self._sandbox_namespaces(sandbox_id)
        log_path: str | None = None
        try:
            if cfg.termination_message_path:
                log_path = str(
                    self.files.create_termination_log(cfg.pod.uid, cfg.name, cfg.attempt)
                )
            if cfg.security.seccomp.startswith("localhost/"):
                cfg = replace(cfg, security=replace(cfg.security, seccomp=self._seccomp(cfg)))

            def body() -> dict[str, Any]:
                return translate.container_body(
                    cfg,
                    sandbox_id,
                    termination_log=log_path,
                    host_network=host_network,
                    host_pid=host_pid,
                    log_config=self.log_rotation.log_config(),
                    privileged=self.privileged_parts() if cfg.security.privileged else None,
                )

            first = body()
        except (OSError, ValueError) as exc:
            raise cri.ContainerStartError(str(exc)) from None
        container_id = self._create_privileged(translate.container_name(cfg), first, body)
        hostname = self._pool_hostnames.get(sandbox_id)
        if hostname is not None:
            self._pending_hostnames[container_id] = hostname
        self.log.debug(
            "container created",
            pod=f"{cfg.pod.namespace}/{cfg.pod.name}",
            container=cfg.name,
            id=container_id[:12],
        )
        return container_id

    def privileged_parts(self) -> privileged.PrivilegedParts | None:
        """What a privileged container gets here: None (Docker's `Privileged: true`) where the
        engine holds every capability of its kernel or its set is unknown; else the engine's
        capabilities that Docker can name, the host's devices and no confinement (containerd's
        privileged), since runc cannot give a container what the engine lacks."""
        with self._caps_lock:
            if not self._engine_caps_read:
                self._engine_caps_read = True
                adapter = getattr(self.client.api, "_custom_adapter", None)
                path = getattr(adapter, "socket_path", None)
                self._engine_caps = (
                    privileged.engine_bounding_set(path) if isinstance(path, str) else None
                )
                self.log.info(
                    "engine capability bounding set",
                    cap_bnd=None if self._engine_caps is None else f"{self._engine_caps:016x}",
                )
            mask, unknown = self._engine_caps, frozenset(self._unknown_caps)
        kernel = privileged.kernel_capabilities()
        if mask is None or mask & kernel == kernel:
            return None
        return privileged.PrivilegedParts(
            privileged.capability_names(mask & kernel, unknown), privileged.host_devices()
        )

    def _create_privileged(
        self, name: str, body: dict[str, Any], rebuild: Callable[[], dict[str, Any]]
    ) -> str:
        """Create; a capability this engine has no name for is left out and the create retried
        (learned once per engine), as the engine cannot grant it anyway."""
        while True:
            try:
                return self._create(name, body)
            except cri.ContainerStartError as exc:
                match = privileged.UNKNOWN_CAPABILITY.search(str(exc))
                caps = (body.get("HostConfig") or {}).get("CapAdd") or ()
                if match is None or f"CAP_{match.group(1)}" not in caps:
                    raise
                with self._caps_lock:
                    if match.group(1) in self._unknown_caps:
                        raise
                    self._unknown_caps.add(match.group(1))
                self.log.info("engine does not know a capability", capability=match.group(1))
                body = rebuild()

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
        try:
            self.client.api.start(container_id)
        except APIError as exc:
            raise cri.ContainerStartError(_explain(exc)) from None
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
            self.client.api.stop(container_id, timeout=max(0, math.ceil(grace_seconds)))
        except NotFound:
            return
        except APIError as exc:
            if "is not running" not in _explain(exc):
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
                attrs = cast(dict[str, Any], self.client.api.inspect_container(container_id))
                signal = _stop_signal(attrs)
            self.client.api.kill(container_id, signal=signal)
        except NotFound:
            return False
        except APIError as exc:
            if "is not running" in _explain(exc):
                return False
            raise
        return True

    def kill_container(self, container_id: str) -> None:
        """SIGKILL now; a container that already stopped or is gone is fine."""
        self.stats.add("stops")
        try:
            self.client.api.kill(container_id, signal="SIGKILL")
        except NotFound:
            return
        except APIError as exc:
            if "is not running" not in _explain(exc):
                raise

    def remove_container(self, container_id: str) -> None:
        """Force-remove (with anonymous volumes); a container already gone is fine."""
        self.stats.add("removes")
        self._sandbox_ns.pop(container_id, None)
        self._pool_hostnames.pop(container_id, None)
        self._pending_hostnames.pop(container_id, None)
        self._stop_signals.pop(container_id)
        try:
            self.client.api.remove_container(container_id, v=True, force=True)
        except NotFound:
            return
        except APIError as exc:
            if "already in progress" not in _explain(exc):
                raise

    def remove_owned(self, labels: dict[str, str]) -> tuple[int, int]:
        """Force-remove every container, then every volume, that carries all of `labels`
        (what a runtime with those `owner_labels` made); (containers, volumes) removed."""
        selector = [f"{k}={v}" for k, v in labels.items()]
        containers = self._api.containers(all=True, filters={"label": selector}) or []
        for found in containers:
            self.remove_container(str(found["Id"]))
        volumes = (self._api.volumes(filters={"label": selector}) or {}).get("Volumes") or []
        for volume in volumes:
            with contextlib.suppress(NotFound, APIError):
                self._api.remove_volume(volume["Name"], force=True)
        return len(containers), len(volumes)

    def label_values(self, key: str) -> set[str]:
        """The values of label `key` over every container that has it (one list call)."""
        listed = self._api.containers(all=True, filters={"label": key}) or []
        return {str((c.get("Labels") or {}).get(key, "")) for c in listed} - {""}

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
            raw = self.client.api.logs(container_id, stdout=True, stderr=True, tail=max_lines)
        except (NotFound, APIError):
            return ""
        return raw[-max_bytes:].decode("utf-8", errors="replace")

    def exec_probe(
        self,
        container_id: str,
        command: Sequence[str],
        timeout: float,
        limit: int = EXEC_OUTPUT_LIMIT,
    ) -> cri.ExecResult:
        """Run `command` in the container for a probe or hook: its exit code and first output.

        The whole run has one deadline, `timeout` (ExecSync's): the stream is read with
        select() against it (docker-py's own reader polls without a timeout, so a socket
        timeout never fires), and a command still running at the deadline is killed, as
        containerd kills an ExecSync past its timeout, so that slow probes do not pile up.
        """
        self.stats.add("execs")
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            exec_id = self._api.exec_create(container_id, list(command), stdout=True, stderr=True)
            sock = self._api.exec_start(exec_id, socket=True)
        except (NotFound, APIError) as exc:
            return cri.ExecResult(
                None, "", _explain(exc) if isinstance(exc, APIError) else str(exc)
            )
        raw = getattr(sock, "_sock", sock)
        try:
            output, finished = _read_exec_stream(raw, deadline, limit)
        except OSError:
            output, finished = bytearray(), False
        finally:
            sock.close()
        if not finished:
            self._kill_exec(exec_id)
            return cri.ExecResult(None, output.decode(errors="replace"), "", timed_out=True)
        try:
            code = self._api.exec_inspect(exec_id).get("ExitCode")
        except (NotFound, APIError) as exc:
            return cri.ExecResult(None, output.decode(errors="replace"), str(exc))
        return cri.ExecResult(code, output.decode(errors="replace"))

    def _kill_exec(self, exec_id: str) -> None:
        """SIGKILL an exec'd process that outlived its deadline (Docker has no API for it): by
        the host pid exec inspect gives, only if that pid is ours to see and in the container's
        cgroup (an engine in another pid namespace, or a pid reused, is left alone). Otherwise
        the command is left to end, never waited on."""
        try:
            info = self._api.exec_inspect(exec_id)
        except (NotFound, APIError):
            return
        pid, container_id = int(info.get("Pid") or 0), str(info.get("ContainerID") or "")
        if not info.get("Running") or pid <= 0 or not container_id:
            return
        try:
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return
        if container_id not in cgroup:
            return
        with contextlib.suppress(OSError):  # gone already, or not ours to signal
            os.kill(pid, signal.SIGKILL)

    def container_logs(
        self,
        container_id: str,
        *,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> Iterator[bytes]:
        """stdout and stderr as Docker keeps them (json-file), as the kubelet's ReadLogs reads
        them: the last `tail` lines, from `since` (unix seconds), each with its RFC 3339 time
        if asked; with `follow`, until the container stops or the caller closes the iterator."""
        self.stats.add("logs")
        try:
            chunks = self._api.logs(
                container_id,
                stdout=True,
                stderr=True,
                stream=True,
                follow=follow,
                timestamps=timestamps,
                tail="all" if tail is None else max(tail, 0),
                since=since,
            )
        except NotFound as exc:
            raise cri.ContainerNotFound(container_id) from exc
        return cast(Iterator[bytes], chunks)

    # Streaming: the kubelet API's exec, attach and port-forward

    def exec_stream(
        self, container_id: str, command: Sequence[str], *, stdin: bool, tty: bool
    ) -> cri.StreamSession:
        self.stats.add("streams")
        with _stream_errors():
            return streams.exec_session(self._api, container_id, list(command), stdin, tty)

    def attach_stream(self, container_id: str, *, stdin: bool) -> cri.StreamSession:
        self.stats.add("streams")
        with _stream_errors():
            return streams.attach_session(self._api, container_id, stdin)

    def pod_connect(self, sandbox_id: str, port: int, timeout: float = 10.0) -> socket.socket:
        """localhost:port as the pod sees it: inside the sandbox's network namespace when this
        process may enter it (root), else the pod's IP from the host (a port bound to the
        pod's loopback only is then out of reach)."""
        self.stats.add("port_forwards")
        try:
            attrs = cast(dict[str, Any], self._api.inspect_container(sandbox_id))
        except (NotFound, APIError) as exc:
            raise cri.StreamError(f"sandbox {sandbox_id[:12]} not found") from exc
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if not pid:
            raise cri.StreamError(f"sandbox {sandbox_id[:12]} is not running")
        try:
            return streams.connect_in_netns(pid, port, timeout)
        except PermissionError:
            pass
        except OSError as exc:
            raise cri.StreamError(str(exc.strerror or exc)) from None
        host = (attrs.get("HostConfig") or {}).get("NetworkMode") == "host"
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = "127.0.0.1" if host else str((networks.get(self.network) or {}).get("IPAddress", ""))
        try:
            return streams.connect_to_ip(ip, port, timeout)
        except OSError as exc:
            raise cri.StreamError(f"dial tcp {ip}:{port}: {exc.strerror or exc}") from None

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
            attrs = cast(dict[str, Any], self.client.api.inspect_container(container_id))
        except NotFound:
            self._stop_signals.pop(container_id)
            return None
        self._stop_signals.put(container_id, _stop_signal(attrs))
        return observed_from_inspect(attrs, self._status_image_id(str(attrs.get("Image", ""))))

    def list_containers(self, node_name: str | None = None) -> list[cri.ObservedContainer]:
        """All containers of the node (running or not): one list call, then one inspect each."""
        node = node_name if node_name is not None else self.node_name
        if not node:
            raise ValueError("list_containers needs a node name")
        self.stats.add("lists")
        summaries = self.client.api.containers(
            all=True, filters={"label": f"{cri.LABEL_NODE}={node}"}
        )
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
        """POST /containers/create; on a name conflict remove the stale holder and retry once.

        dockershim did the same: a leftover from a crash between create and record must not
        block the pod forever; a running holder is not removed (then the error stands).
        """
        self.stats.add("creates")
        try:
            return self._create_once(name, body)
        except APIError as exc:
            match = _CONFLICT.search(_explain(exc)) if exc.status_code == 409 else None
            if match is None:
                raise cri.ContainerStartError(_explain(exc)) from None
            try:
                self.client.api.remove_container(match.group(1), v=True)
            except APIError:
                raise cri.ContainerStartError(_explain(exc)) from None
            self.log.info("removed a stale container holding the name", name=name)
            try:
                return self._create_once(name, body)
            except APIError as again:
                raise cri.ContainerStartError(_explain(again)) from None

    def _create_once(self, name: str, body: dict[str, Any]) -> str:
        if self.owner_labels:
            body = {**body, "Labels": {**(body.get("Labels") or {}), **self.owner_labels}}
            for mount in (body.get("HostConfig") or {}).get("Mounts") or []:
                options = mount.get("VolumeOptions")
                if options is not None:
                    options["Labels"] = {**(options.get("Labels") or {}), **self.owner_labels}
        result = self._api.create_container_from_config(body, name=name)
        return str(result["Id"])

    def _sandbox_namespaces(self, sandbox_id: str) -> tuple[bool, bool]:
        """Host network/pid of a sandbox: known if we ran it, else inspected once and cached."""
        known = self._sandbox_ns.get(sandbox_id)
        if known is not None:
            return known
        self.stats.add("inspects")
        try:
            attrs = cast(dict[str, Any], self.client.api.inspect_container(sandbox_id))
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

    def _status_image_id(self, image_sha: str) -> str:
        """The imageID string for a container's image, inspected once per image."""
        if not image_sha:
            return ""
        cached = self._image_ids.get(image_sha)
        if cached is None:
            info = self.image_status(image_sha)
            cached = images.status_image_id(info) if info else images.IMAGE_ID_PREFIX + image_sha
            self._image_ids[image_sha] = cached
        return cached


def _stop_signal(attrs: dict[str, Any]) -> str:
    """The signal `docker stop` would send: the container's STOPSIGNAL, else SIGTERM."""
    return str((attrs.get("Config") or {}).get("StopSignal") or "SIGTERM")


def _explain(exc: APIError) -> str:
    return str(exc.explanation or exc).strip()


@contextlib.contextmanager
def _stream_errors() -> Iterator[None]:
    """Docker's refusal to open an exec or attach, as the runtime's StreamError."""
    try:
        yield
    except NotFound as exc:  # before APIError, which it is
        raise cri.StreamError(str(exc)) from None
    except APIError as exc:
        raise cri.StreamError(_explain(exc)) from None


def _read_exec_stream(raw: socket.socket, deadline: float, limit: int) -> tuple[bytearray, bool]:
    """Docker's multiplexed exec stream (8-byte headers: stream, 0, 0, 0, big-endian size),
    read until its end or `deadline`: the first `limit` bytes of stdout and stderr together,
    and whether the stream ended in time."""
    output, pending = bytearray(), bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return output, False
        ready, _, _ = select.select([raw], [], [], remaining)
        if not ready:
            return output, False
        chunk = raw.recv(65536)
        if not chunk:
            return output, True
        pending += chunk
        while len(pending) >= 8:
            _stream, size = struct.unpack(">BxxxL", pending[:8])
            if len(pending) < 8 + size:
                break
            if len(output) < limit:
                output += pending[8 : 8 + min(size, limit - len(output))]
            del pending[: 8 + size]
