"""The contract between pod logic and the container runtime, like the kubelet's CRI.

Pure dataclasses: `pod/` decides what to create from a pod spec, `runtime/` turns it into Docker
calls and reports what it observes in the same terms. Neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Protocol

# Container labels (kuberuntime/labels.go and dockershim naming); from these alone the agent's
# state is rebuilt after a restart.
LABEL_NODE = "io.kubelet-sim.node"
# Who made a container besides its node: the demo marks its own (a hash of its state
# directory). A node with owner labels sees only containers that carry them, a node without
# any sees none that carry one: the demo's `n1` and a user's own `n1` on one engine never
# take each other's containers for orphans.
LABEL_OWNER = "io.kubelet-sim.demo"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
LABEL_CONTAINER_TYPE = "io.kubernetes.docker.type"  # "podsandbox" or "container"
LABEL_CONTAINER_HASH = "io.kubernetes.container.hash"
LABEL_RESTART_COUNT = "io.kubernetes.container.restartCount"
LABEL_TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
LABEL_TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
LABEL_TERMINATION_GRACE_PERIOD = "io.kubernetes.pod.terminationGracePeriod"
SANDBOX_CONTAINER_NAME = "POD"
# A warm sandbox of the node's pool (podworkers/pool.py). Docker cannot relabel a container, so
# a claimed one keeps its pool labels and takes the pod's identity from its name, which Docker
# can change: dockershim's `k8s_POD_<pod>_<namespace>_<uid>_<attempt>` (parse.claimed_pod).
LABEL_POOL = "io.kubelet-sim.sandbox-pool"
POOL_NAME_PREFIX = "k8s-pool_"  # an unclaimed pool sandbox: k8s-pool_<node>_<random>


class ContainerState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PodRef:
    """Who a container belongs to; every container of ours carries these as labels."""

    node: str
    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class PortMapping:
    container_port: int
    host_port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True)
class SandboxConfig:
    """The pod's sandbox: it owns the network and IPC namespaces that app containers join."""

    pod: PodRef
    attempt: int
    image: str
    hostname: str
    port_mappings: tuple[PortMapping, ...] = ()
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    sysctls: tuple[tuple[str, str], ...] = ()  # namespaced: set on the sandbox, shared by all
    extra_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool = False
    tmpfs: bool = False  # emptyDir with medium Memory
    tmpfs_group: int | None = None  # the pod's fsGroup, owning the tmpfs root (setgid)


@dataclass(frozen=True)
class Resources:
    """Docker's knobs for limits and requests (kuberuntime's linux container resources)."""

    cpu_period: int | None = None
    cpu_quota: int | None = None
    cpu_shares: int | None = None
    memory_limit_bytes: int | None = None


@dataclass(frozen=True)
class SecurityConfig:
    run_as_user: int | None = None
    run_as_group: int | None = None
    privileged: bool = False
    read_only_rootfs: bool = False
    capabilities_add: tuple[str, ...] = ()
    capabilities_drop: tuple[str, ...] = ()
    no_new_privileges: bool = False
    supplemental_groups: tuple[int, ...] = ()
    unmasked_proc: bool = False  # procMount Unmasked: no masked or read-only /proc paths
    apparmor: str = ""  # "": the runtime's default profile; "unconfined"; a loaded profile
    seccomp: str = "unconfined"  # "runtime/default" or "localhost/<file under <root>/seccomp>"


@dataclass(frozen=True)
class ContainerConfig:
    """One app or init container to create inside a sandbox, with Docker entrypoint semantics.

    `entrypoint`/`cmd` None keeps the image's; the pod's `command` maps to entrypoint and
    `args` to cmd, and an entrypoint override drops the image's cmd (as Kubernetes does).
    """

    pod: PodRef
    name: str
    attempt: int
    image: str
    spec_hash: str
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    working_dir: str | None = None
    mounts: tuple[Mount, ...] = ()
    resources: Resources = field(default_factory=Resources)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    tty: bool = False
    stdin: bool = False
    stdin_once: bool = False
    termination_message_path: str = "/dev/termination-log"
    termination_message_policy: str = "File"
    termination_grace_period: int = 30
    pid_namespace_of: str = ""  # a container id: share its processes (kubectl debug --target)
    extra_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PooledSandbox:
    """A started, network-ready sandbox of the node's pool, not yet any pod's."""

    id: str
    created: float  # unix seconds: the pool hands out the oldest first
    running: bool


@dataclass(frozen=True)
class ObservedContainer:
    """A container (app, init or sandbox) as the runtime last saw it."""

    id: str
    pod: PodRef
    name: str  # the pod's container name, or SANDBOX_CONTAINER_NAME
    attempt: int
    state: ContainerState
    image: str
    image_id: str = ""
    spec_hash: str = ""
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""  # the runtime's own error (e.g. exec format error), if any
    ip: str = ""  # sandboxes only: the pod IP
    pid: int = 0  # sandboxes only, while running: a process in the pod's network namespace

    @property
    def is_sandbox(self) -> bool:
        return self.name == SANDBOX_CONTAINER_NAME


def created_observation(cfg: ContainerConfig, container_id: str) -> ObservedContainer:
    """What a successful create means, without asking Docker again (to seed a watcher's view)."""
    return ObservedContainer(
        id=container_id,
        pod=cfg.pod,
        name=cfg.name,
        attempt=cfg.attempt,
        state=ContainerState.CREATED,
        image=cfg.image,
        spec_hash=cfg.spec_hash,
    )


def stopped_observation(observed: ObservedContainer, finished_at: datetime) -> ObservedContainer:
    """What a stop that returned means, without asking Docker again: Docker answers a stop
    once the process is gone, but an inspect then waits for the sandbox's network teardown
    (it holds the container's lock), and so would every event queued behind it. For
    sandboxes: their exit code (left unknown) is nobody's business."""
    return replace(observed, state=ContainerState.EXITED, finished_at=finished_at, ip="", pid=0)


@dataclass(frozen=True)
class ImageInfo:
    ref: str
    id: str  # sha256:...
    repo_digests: tuple[str, ...] = ()
    user: str = ""  # the image's USER (uid, name, uid:gid); "" is root


@dataclass(frozen=True)
class ImageSummary:
    """An image on the node as the runtime lists it (the CRI's ListImages)."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for one registry from an imagePullSecret; never logged."""

    server: str
    username: str = ""
    password: str = field(default="", repr=False)
    auth: str = field(default="", repr=False)


@dataclass(frozen=True)
class ExecResult:
    """A command run in a container: its exit code (None if it could not run or timed out)."""

    exit_code: int | None
    output: str  # stdout and stderr together, as far as the limit
    error: str = ""  # why it could not run
    timed_out: bool = False


@dataclass(frozen=True)
class LogOptions:
    """What of a container's stdout and stderr to read (the kubelet's LogOptions): the last
    `tail` lines, from `since` (unix seconds), each with its RFC 3339 time if `timestamps`;
    with `follow`, until the container stops or the reader closes the stream."""

    follow: bool = False
    tail: int | None = None
    since: float | None = None
    timestamps: bool = False


@dataclass(frozen=True)
class ContainerStats:
    """A container's resource use as the runtime counts it (cAdvisor's names in the comments)."""

    cpu_seconds: float  # cumulative CPU time, core-seconds (usage_core_nanoseconds / 1e9)
    memory_working_set_bytes: int  # usage minus inactive file pages, as cAdvisor's working set
    memory_usage_bytes: int
    timestamp: float  # unix seconds of the sample


class StreamSession(Protocol):
    """A process's stdin/stdout/stderr in a container (exec, or attach to its main process)."""

    tty: bool

    def read(self) -> tuple[int, bytes]: ...  # (1 stdout | 2 stderr, data); (0, b"") at end

    def write(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    def resize(self, width: int, height: int) -> None: ...

    def wait(self) -> int | None: ...  # exec: the exit code once the output ended

    def close(self) -> None: ...


class StreamError(Exception):
    """The runtime could not open a stream (the container stopped, the port is closed)."""


class ContainerNotFound(Exception):
    """The runtime has no such container (any more)."""


class ImagePullError(Exception):
    """The pull failed; the message becomes the ErrImagePull status message."""


class ContainerStartError(Exception):
    """Create or start failed in the runtime (RunContainerError / CreateContainerError)."""
