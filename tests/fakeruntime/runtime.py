"""An in-memory runtime (the pod workers' PodRuntime port): containers that start, exit, fail to
pull or to start when a test says so, with times from the test's clock.

What a container does is its `Behaviour`, chosen by container name (`behave`); by default it runs
until stopped and ends on its stop signal (exit 143), as a shell with a TERM trap would. A
sandbox is a pause container: it ends on its stop signal with 0.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from kubelet_sim import cri
from kubelet_sim.runtime.pod_files import PodFiles
from tests.fakeruntime.clock import FakeClock

SIGTERM_EXIT, SIGKILL_EXIT = 143, 137


@dataclass(frozen=True)
class Behaviour:
    """What containers of one name do when started."""

    exit_code: int | None = None  # exits at once with this code; None: runs
    ignores_sigterm: bool = False  # only SIGKILL ends it (a PID 1 without a handler)
    term_exit: int = SIGTERM_EXIT  # its exit code when its stop signal ends it
    create_error: str = ""  # create fails (CreateContainerError)
    start_error: str = ""  # start fails (RunContainerError)
    message: str = ""  # what it leaves in its termination log when it exits


PAUSE = Behaviour(term_exit=0)

ExecHandler = Callable[[cri.ObservedContainer, Sequence[str]], cri.ExecResult]


def shell_exec(container: cri.ObservedContainer, command: Sequence[str]) -> cri.ExecResult:
    """`sh -c "exit N"` exits N, anything else succeeds: enough for probes and hooks."""
    if len(command) == 3 and command[:2] == ["sh", "-c"] and command[2].startswith("exit "):
        return cri.ExecResult(int(command[2].split()[1]), "")
    return cri.ExecResult(0, "")


@dataclass
class _Container:
    observed: cri.ObservedContainer
    behaviour: Behaviour
    cfg: cri.ContainerConfig | None = None


@dataclass
class FakeRuntime:
    root_dir: Path
    clock: FakeClock = field(default_factory=FakeClock)
    node_name: str = "n1"
    # Images on the node, by reference; a pull of one in `pull_errors` fails with its message.
    images: dict[str, cri.ImageInfo] = field(default_factory=dict)
    pull_errors: dict[str, str] = field(default_factory=dict)
    pull_gate: threading.Event | None = None  # set: pulls wait for it (a pull in flight)
    sandbox_error: str = ""
    claim_error: str = ""  # set: claiming a pool sandbox fails with it
    exec_handler: ExecHandler = shell_exec
    # Called with a pod uid whenever one of its containers changes (Docker's events).
    on_change: Callable[[str], None] = lambda _uid: None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (operation, id or ref)

    def __post_init__(self) -> None:
        self.files = PodFiles(self.root_dir)
        self._lock = threading.RLock()
        self._containers: dict[str, _Container] = {}
        self._behaviours: dict[str, Behaviour] = {}
        self._ids = itertools.count(1)
        self._ips = itertools.count(2)
        # The warm pool: unclaimed sandboxes (no pod's, never listed as containers) by id,
        # and every sandbox's hostname (UTS namespace) as the runtime set it.
        self._pool: dict[str, cri.PooledSandbox] = {}
        self._pool_made: dict[str, tuple[str, str]] = {}  # id → (IP, image)
        self.hostnames: dict[str, str] = {}
        self._sandbox_of: dict[str, str] = {}  # container id → its sandbox's

    # -- what a test sets up and reads -----------------------------------------------------

    def behave(self, name: str, behaviour: Behaviour) -> None:
        """Containers named `name` created from now on behave so."""
        with self._lock:
            self._behaviours[name] = behaviour

    def add_image(self, ref: str, user: str = "") -> cri.ImageInfo:
        info = cri.ImageInfo(ref=ref, id=f"sha256:{abs(hash(ref)):064x}"[:71], user=user)
        with self._lock:
            self.images[ref] = info
        return info

    def exit(self, container_id: str, code: int) -> None:
        """The container's process ends by itself now."""
        self._finish(container_id, code)

    def mark_oom(self, container_id: str) -> None:
        """An exited container turns out to have been OOM-killed (Docker's late `oom` event,
        runtime/observe.py)."""
        with self._lock:
            found = self._containers[container_id]
            found.observed = replace(found.observed, oom_killed=True)
        self._changed(found)

    def stop_pooled(self, sandbox_id: str) -> None:
        """An unclaimed pool sandbox's process ends (as after a host restart)."""
        with self._lock:
            self._pool[sandbox_id] = replace(self._pool[sandbox_id], running=False)

    def operations(self, operation: str) -> list[str]:
        with self._lock:
            return [target for op, target in self.calls if op == operation]

    def running(self, pod_uid: str) -> list[cri.ObservedContainer]:
        return [
            c
            for c in self.list_containers()
            if c.pod.uid == pod_uid and c.state is cri.ContainerState.RUNNING
        ]

    # -- ImageService ------------------------------------------------------------------------

    def image_status(self, ref: str) -> cri.ImageInfo | None:
        with self._lock:
            return self.images.get(ref)

    def pull_image(self, ref: str, auth: cri.RegistryAuth | None = None) -> cri.ImageInfo:
        self._call("pull", ref)
        if self.pull_gate is not None:
            self.pull_gate.wait(30)
        with self._lock:
            error = self.pull_errors.get(ref)
        if error is not None:
            raise cri.ImagePullError(error)
        return self.add_image(ref)

    def list_images(self) -> list[cri.ImageSummary]:
        with self._lock:
            return [
                cri.ImageSummary(id=i.id, repo_tags=(ref,), repo_digests=i.repo_digests, size=1)
                for ref, i in self.images.items()
            ]

    # -- RuntimeService ----------------------------------------------------------------------

    def run_sandbox(self, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        self._call("run_sandbox", cfg.pod.uid)
        if self.sandbox_error:
            raise cri.ContainerStartError(self.sandbox_error)
        now = self.clock.now()
        observed = cri.ObservedContainer(
            id=self._new_id(),
            pod=cfg.pod,
            name=cri.SANDBOX_CONTAINER_NAME,
            attempt=cfg.attempt,
            state=cri.ContainerState.RUNNING,
            image=cfg.image,
            image_id=self._image_id(cfg.image),
            created_at=now,
            started_at=now,
            ip="" if cfg.host_network else f"10.88.0.{next(self._ips)}",
            pid=4242,
        )
        with self._lock:
            self.hostnames[observed.id] = "" if cfg.host_network else cfg.hostname
        self._store(_Container(observed, PAUSE))  # pause exits 0 on SIGTERM
        return observed

    def run_pool_sandbox(self, image: str) -> str:
        self._call("run_pool_sandbox", image)
        if self.sandbox_error:
            raise cri.ContainerStartError(self.sandbox_error)
        sandbox_id = self._new_id()
        with self._lock:
            self._pool[sandbox_id] = cri.PooledSandbox(
                sandbox_id, self.clock.now().timestamp(), running=True
            )
            self._pool_made[sandbox_id] = (f"10.88.0.{next(self._ips)}", image)
            self.hostnames[sandbox_id] = sandbox_id[:12]
        return sandbox_id

    def pool_sandboxes(self) -> list[cri.PooledSandbox]:
        with self._lock:
            return list(self._pool.values())

    def claim_sandbox(self, sandbox_id: str, cfg: cri.SandboxConfig) -> cri.ObservedContainer:
        self._call("claim_sandbox", sandbox_id)
        with self._lock:
            found = self._pool.get(sandbox_id)
            if self.claim_error or found is None or not found.running:
                raise cri.ContainerStartError(self.claim_error or f"pool sandbox {sandbox_id} gone")
            if cfg.host_network or cfg.host_pid or cfg.host_ipc or cfg.sysctls or cfg.port_mappings:
                raise cri.ContainerStartError("this sandbox must be made for its pod")
            del self._pool[sandbox_id]
            self.hostnames[sandbox_id] = cfg.hostname
            ip, image = self._pool_made.pop(sandbox_id)
        made = datetime.fromtimestamp(found.created, UTC)
        observed = cri.ObservedContainer(
            id=sandbox_id,
            pod=cfg.pod,
            name=cri.SANDBOX_CONTAINER_NAME,
            attempt=cfg.attempt,
            state=cri.ContainerState.RUNNING,
            image=image,
            image_id=self._image_id(image),
            created_at=made,
            started_at=made,
            ip=ip,
            pid=4242,
        )
        self._store(_Container(observed, PAUSE))
        return observed

    def create_container(self, cfg: cri.ContainerConfig, sandbox_id: str) -> str:
        self._call("create", cfg.name)
        with self._lock:
            behaviour = self._behaviours.get(cfg.name, Behaviour())
            if sandbox_id not in self._containers:
                raise cri.ContainerStartError(f"no such sandbox: {sandbox_id}")
        if behaviour.create_error:
            raise cri.ContainerStartError(behaviour.create_error)
        if cfg.image not in self.images:
            raise cri.ContainerStartError(f"No such image: {cfg.image}")
        observed = replace(
            cri.created_observation(cfg, self._new_id()),
            image_id=self._image_id(cfg.image),
            created_at=self.clock.now(),
        )
        with self._lock:
            self._sandbox_of[observed.id] = sandbox_id
        self._store(_Container(observed, behaviour, cfg))
        return observed.id

    def start_container(self, container_id: str) -> None:
        self._call("start", container_id)
        with self._lock:
            found = self._containers.get(container_id)
            if found is None:
                raise cri.ContainerStartError(f"No such container: {container_id}")
            if found.behaviour.start_error:
                found.observed = replace(
                    found.observed,
                    state=cri.ContainerState.EXITED,
                    exit_code=128,
                    error=found.behaviour.start_error,
                    finished_at=self.clock.now(),
                )
                error = found.behaviour.start_error
            else:
                error = ""
                found.observed = replace(
                    found.observed, state=cri.ContainerState.RUNNING, started_at=self.clock.now()
                )
        self._changed(found)
        if error:
            raise cri.ContainerStartError(error)
        if found.behaviour.exit_code is not None:
            self._finish(container_id, found.behaviour.exit_code)

    def stop_container(self, container_id: str, grace_seconds: float) -> None:
        self._call("stop", container_id)
        if not self.signal_stop(container_id) or self._is_running(container_id):
            self.kill_container(container_id)

    def signal_stop(self, container_id: str) -> bool:
        self._call("signal_stop", container_id)
        with self._lock:
            found = self._containers.get(container_id)
            if found is None or found.observed.state is not cri.ContainerState.RUNNING:
                return False
            behaviour = found.behaviour
        if not behaviour.ignores_sigterm:
            self._finish(container_id, behaviour.term_exit)
        return True

    def kill_container(self, container_id: str) -> None:
        self._call("kill", container_id)
        if self._is_running(container_id):
            self._finish(container_id, SIGKILL_EXIT)

    def update_container_resources(self, container_id: str, resources: cri.Resources) -> None:
        """As `docker update`: a running container's config takes the new limits."""
        self._call("update", container_id)
        with self._lock:
            found = self._containers.get(container_id)
            if found is None:
                raise cri.ContainerStartError(f"No such container: {container_id}")
            if found.cfg is not None:
                found.cfg = replace(found.cfg, resources=resources)

    def resources_of(self, container_id: str) -> cri.Resources | None:
        """What the container runs with now (its creation's, or its last update's)."""
        with self._lock:
            found = self._containers.get(container_id)
            return found.cfg.resources if found is not None and found.cfg is not None else None

    def remove_container(self, container_id: str) -> None:
        self._call("remove", container_id)
        with self._lock:
            self._pool.pop(container_id, None)
            self._pool_made.pop(container_id, None)
            found = self._containers.pop(container_id, None)
        if found is not None:
            self.on_change(found.observed.pod.uid)

    def inspect(self, container_id: str) -> cri.ObservedContainer | None:
        with self._lock:
            found = self._containers.get(container_id)
            return found.observed if found else None

    def list_containers(self, node_name: str | None = None) -> list[cri.ObservedContainer]:
        node = node_name if node_name is not None else self.node_name
        with self._lock:
            return [c.observed for c in self._containers.values() if c.observed.pod.node == node]

    def exec_probe(
        self, container_id: str, command: Sequence[str], timeout: float
    ) -> cri.ExecResult:
        self._call("exec", " ".join(command))
        observed = self.inspect(container_id)
        if observed is None or observed.state is not cri.ContainerState.RUNNING:
            return cri.ExecResult(None, "", f"container {container_id} is not running")
        if list(command) == ["hostname"]:  # the UTS namespace's, which is its sandbox's
            with self._lock:
                sandbox = self._sandbox_of.get(container_id, container_id)
                return cri.ExecResult(0, self.hostnames.get(sandbox, "") + "\n")
        return self.exec_handler(observed, list(command))

    def termination_message(self, observed: cri.ObservedContainer) -> str:
        return self.files.read_termination_message(
            observed.pod.uid, observed.name, observed.attempt
        )

    def logs_tail(self, container_id: str) -> str:
        return f"logs of {container_id}"

    def remove_pod_dir(self, pod_uid: str) -> None:
        self._call("remove_pod_dir", pod_uid)
        self.files.remove_pod_dir(pod_uid)

    # -- internals ---------------------------------------------------------------------------

    def _call(self, operation: str, target: str) -> None:
        with self._lock:
            self.calls.append((operation, target))

    def _new_id(self) -> str:
        return f"{next(self._ids):064x}"

    def _image_id(self, ref: str) -> str:
        """As a status's imageID: the repo digest if any, else the engine's id."""
        info = self.image_status(ref)
        if info is None:
            return ""
        return info.repo_digests[0] if info.repo_digests else f"docker://{info.id}"

    def _store(self, container: _Container) -> None:
        with self._lock:
            self._containers[container.observed.id] = container
        self._changed(container)

    def _changed(self, container: _Container) -> None:
        self.on_change(container.observed.pod.uid)

    def _is_running(self, container_id: str) -> bool:
        observed = self.inspect(container_id)
        return observed is not None and observed.state is cri.ContainerState.RUNNING

    def _finish(self, container_id: str, code: int) -> None:
        with self._lock:
            found = self._containers.get(container_id)
            if found is None or found.observed.state is not cri.ContainerState.RUNNING:
                return
            if found.behaviour.message and found.cfg is not None:
                path = self.files.create_termination_log(
                    found.cfg.pod.uid, found.cfg.name, found.cfg.attempt
                )
                path.write_text(found.behaviour.message)
            found.observed = replace(
                found.observed,
                state=cri.ContainerState.EXITED,
                exit_code=code,
                finished_at=self.clock.now(),
            )
        self._changed(found)
