"""The Docker runtime against a real engine: sandboxes, containers, images, termination, stop."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.cri import created_observation
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.runtime import translate
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.images import status_image_id
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerEvents, ContainerWatcher
from tests.cluster import wait_for
from tests.docker_env import TEST_LABEL, DockerEnv
from tests.loopback_registry import loopback_registry

pytestmark = pytest.mark.docker


class Pod:
    """One test pod: its ref, a running sandbox, and helpers to run containers in it."""

    def __init__(self, rt: NodeRuntime, env: DockerEnv, nodeid: str, **sandbox: Any) -> None:
        self.rt, self.env = rt, env
        self.labels = {TEST_LABEL: nodeid}
        self.ref = cri.PodRef(
            node=rt.node_name, name="web", namespace="default", uid=str(uuid.uuid4())
        )
        self.sandbox = rt.run_sandbox(
            cri.SandboxConfig(
                pod=self.ref,
                attempt=0,
                image=env.pause_image,
                hostname="web-host",
                extra_labels=self.labels,
                **sandbox,
            )
        )

    def config(self, name: str = "app", **kw: Any) -> cri.ContainerConfig:
        kw.setdefault("image", self.env.busybox_image)
        return cri.ContainerConfig(
            pod=self.ref, name=name, attempt=0, spec_hash="h1", extra_labels=self.labels, **kw
        )

    def start(self, name: str = "app", **kw: Any) -> str:
        container_id = self.rt.create_container(self.config(name, **kw), self.sandbox.id)
        self.rt.start_container(container_id)
        return container_id

    def run(self, name: str = "app", **kw: Any) -> cri.ObservedContainer:
        """Start a container and wait for it to exit (Docker's wait blocks until then)."""
        container_id = self.start(name, **kw)
        self.env.client.api.wait(container_id, timeout=15)
        observed = self.rt.inspect(container_id)
        assert observed is not None
        return observed

    def output(self, name: str = "app", **kw: Any) -> str:
        return self.rt.logs_tail(self.run(name, **kw).id)

    def exec(self, container_id: str, command: str) -> str:
        result = self.env.client.containers.get(container_id).exec_run(["sh", "-c", command])
        return bytes(result.output).decode().strip()


@pytest.fixture
def rt(docker_env: DockerEnv, tmp_path: Path) -> Iterator[NodeRuntime]:
    node = f"rt-{uuid.uuid4().hex[:10]}"
    tmp_path.chmod(0o755)  # the container user (runAsUser) must reach the termination log
    runtime = NodeRuntime(DockerEngine(docker_env.client), node_name=node, root_dir=tmp_path)
    yield runtime
    docker_env.remove_labelled(f"{cri.LABEL_NODE}={node}")


@pytest.fixture
def pod(rt: NodeRuntime, docker_env: DockerEnv, request: pytest.FixtureRequest) -> Pod:
    return Pod(rt, docker_env, request.node.nodeid)


def free_port(kind: socket.SocketKind) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sandbox_has_ip_name_labels_ports(pod: Pod, docker_env: DockerEnv) -> None:
    sb = pod.sandbox
    assert sb.is_sandbox
    assert sb.state == cri.ContainerState.RUNNING
    assert sb.ip.count(".") == 3
    assert sb.image == docker_env.pause_image
    assert sb.image_id.startswith("docker://sha256:")
    attrs = docker_env.client.api.inspect_container(sb.id)
    assert attrs["Name"] == f"/k8s_POD_web_default_{pod.ref.uid}_0"
    labels = attrs["Config"]["Labels"]
    assert labels[cri.LABEL_CONTAINER_TYPE] == "podsandbox"
    assert labels[cri.LABEL_CONTAINER_NAME] == "POD"
    assert labels[cri.LABEL_POD_UID] == pod.ref.uid
    assert labels[cri.LABEL_NODE] == pod.rt.node_name
    assert attrs["Config"]["Hostname"] == "web-host"
    assert attrs["HostConfig"]["IpcMode"] == "shareable"


def test_sandbox_publishes_host_ports(
    rt: NodeRuntime, docker_env: DockerEnv, request: pytest.FixtureRequest
) -> None:
    tcp, udp = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_DGRAM)
    ports = (
        cri.PortMapping(container_port=80, host_port=tcp, host_ip="127.0.0.1"),
        cri.PortMapping(container_port=53, host_port=udp, protocol="UDP"),
        cri.PortMapping(container_port=9000, host_port=0),
    )
    pod = Pod(rt, docker_env, request.node.nodeid, port_mappings=ports)
    bindings = docker_env.client.api.inspect_container(pod.sandbox.id)["HostConfig"]["PortBindings"]
    assert bindings == {
        "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(tcp)}],
        "53/udp": [{"HostIp": "", "HostPort": str(udp)}],
    }
    pod.start(entrypoint=("sh", "-c", "while :; do echo hello | nc -l -p 80; done"))

    def answer() -> bytes:
        try:
            with socket.create_connection(("127.0.0.1", tcp), timeout=1) as conn:
                return conn.recv(16)
        except OSError:
            return b""

    assert wait_for(answer, 10, "the app answering on the host port") == b"hello\n"


def test_host_network_sandbox_shares_the_node_namespaces(
    rt: NodeRuntime, docker_env: DockerEnv, request: pytest.FixtureRequest
) -> None:
    pod = Pod(rt, docker_env, request.node.nodeid, host_network=True, host_pid=True)
    assert pod.sandbox.ip == ""  # the pod IP is the node's: the pod logic reports hostIP
    app = pod.start(cmd=("sleep", "60"))
    assert pod.exec(app, "hostname") == socket.gethostname()
    assert (
        pod.exec(app, "readlink /proc/self/ns/net")
        == f"net:[{os.stat('/proc/self/ns/net').st_ino}]"
    )
    assert (
        pod.exec(app, "readlink /proc/self/ns/pid")
        == f"pid:[{os.stat('/proc/self/ns/pid').st_ino}]"
    )


def test_container_shares_sandbox_network_and_ipc(pod: Pod) -> None:
    app = pod.start(cmd=("sleep", "60"))
    assert pod.exec(app, "hostname -i") == pod.sandbox.ip
    assert pod.exec(app, "hostname") == "web-host"
    for ns in ("net", "ipc"):
        link = f"readlink /proc/self/ns/{ns}"
        assert pod.exec(app, link) == pod.exec(pod.sandbox.id, link)
    assert pod.exec(app, "readlink /proc/self/ns/pid") != pod.exec(
        pod.sandbox.id, "readlink /proc/self/ns/pid"
    )


@pytest.mark.parametrize(
    ("entrypoint", "cmd", "expected"),
    [
        (("echo", "command-only"), None, "command-only"),
        (None, ("echo", "args-only"), "args-only"),
        (("sh", "-c"), ("echo both",), "both"),
    ],
)
def test_command_and_args(
    pod: Pod, entrypoint: tuple[str, ...] | None, cmd: tuple[str, ...] | None, expected: str
) -> None:
    assert pod.output(entrypoint=entrypoint, cmd=cmd).strip() == expected


def test_neither_command_nor_args_runs_image_cmd(pod: Pod, docker_env: DockerEnv) -> None:
    observed = pod.run()  # busybox's CMD is sh; without stdin it exits 0 at once
    config = docker_env.client.api.inspect_container(observed.id)["Config"]
    assert (config["Entrypoint"], config["Cmd"]) == (None, ["sh"])
    assert observed.exit_code == 0


def test_command_only_drops_image_cmd(pod: Pod, docker_env: DockerEnv) -> None:
    container_id = pod.rt.create_container(pod.config(entrypoint=("true",)), pod.sandbox.id)
    config = docker_env.client.api.inspect_container(container_id)["Config"]
    assert config["Entrypoint"] == ["true"]
    assert not config["Cmd"]


def test_env_and_working_dir(pod: Pod) -> None:
    out = pod.output(
        entrypoint=("sh", "-c", 'echo "$GREETING"; pwd'),
        env=(("GREETING", "hello world"), ("OTHER", "x")),
        working_dir="/tmp",
    )
    assert out.split("\n")[:2] == ["hello world", "/tmp"]


def test_exit_code_and_times(pod: Pod) -> None:
    observed = pod.run(entrypoint=("sh", "-c", "exit 3"))
    assert observed.state == cri.ContainerState.EXITED
    assert observed.exit_code == 3
    assert observed.started_at is not None
    assert observed.finished_at is not None
    # Docker may stamp a very short run's FinishedAt a hair before StartedAt; passed through.
    assert abs((observed.finished_at - observed.started_at).total_seconds()) < 5
    assert observed.started_at.tzinfo is not None
    assert observed.name == "app"
    assert observed.spec_hash == "h1"
    assert observed.attempt == 0
    assert not observed.oom_killed


def test_exec_probe_honours_its_timeout_and_kills_the_command(pod: Pod) -> None:
    """ExecSync's deadline: a command past it is a timeout after `timeout` seconds, not after
    the command, and it does not go on in the container (containerd kills it)."""
    app = pod.start(entrypoint=("sleep", "3600"))
    started = time.monotonic()
    result = pod.rt.exec_probe(app, ["sh", "-c", "echo begun; sleep 30"], 1.0)
    assert time.monotonic() - started < 5
    assert (result.timed_out, result.exit_code, result.output) == (True, None, "begun\n")
    wait_for(lambda: "sleep 30" not in pod.exec(app, "ps -o args"), 5, "the command killed")
    quick = pod.rt.exec_probe(app, ["sh", "-c", "echo out; echo err >&2; exit 3"], 1.0)
    assert (quick.timed_out, quick.exit_code) == (False, 3)
    assert sorted(quick.output.splitlines()) == ["err", "out"], "stdout and stderr, together"
    big = pod.rt.exec_probe(app, ["sh", "-c", "yes | head -c 50000"], 5.0)
    assert (big.exit_code, len(big.output)) == (0, 10 * 1024), "the first 10 KiB, as exec.go"


def test_termination_message_written_by_a_non_root_user(pod: Pod) -> None:
    observed = pod.run(
        entrypoint=("sh", "-c", "printf 'all done' > /dev/termination-log; exit 1"),
        security=cri.SecurityConfig(run_as_user=1234),
    )
    assert observed.exit_code == 1
    assert pod.rt.termination_message(observed) == "all done"


def test_termination_message_custom_path_keeps_last_4k(pod: Pod) -> None:
    observed = pod.run(
        name="writer",
        entrypoint=(
            "sh",
            "-c",
            "head -c 5000 /dev/zero | tr '\\0' a > /tmp/msg; echo -n END >> /tmp/msg",
        ),
        termination_message_path="/tmp/msg",
    )
    message = pod.rt.termination_message(observed)
    assert len(message) == 4096
    assert message.endswith("aEND")


def test_logs_tail_keeps_last_lines_then_last_bytes(pod: Pod) -> None:
    observed = pod.run(entrypoint=("seq", "1", "200"))
    lines = pod.rt.logs_tail(observed.id).split()
    assert lines == [str(i) for i in range(121, 201)]
    assert pod.rt.logs_tail(observed.id, max_bytes=8) == "199\n200\n"
    assert pod.rt.logs_tail("no-such-container") == ""


def test_stop_waits_grace_then_kills(pod: Pod) -> None:
    stubborn = pod.start(entrypoint=("sh", "-c", 'trap "" TERM; sleep 1000'))
    polite = pod.start(
        name="polite", entrypoint=("sh", "-c", 'trap "exit 0" TERM; sleep 1000 & wait')
    )
    wait_for(lambda: pod.exec(polite, "echo up") == "up", 10, "polite container running")
    # Measured against the grace period, not a wall-clock budget (a loaded machine is slow).
    began = time.monotonic()
    pod.rt.stop_container(polite, grace_seconds=60)
    assert time.monotonic() - began < 30, "a container exiting on SIGTERM does not wait out grace"
    began = time.monotonic()
    pod.rt.stop_container(stubborn, grace_seconds=2)
    assert time.monotonic() - began >= 2.0, "one ignoring SIGTERM is given its grace period"
    killed = pod.rt.inspect(stubborn)
    assert killed is not None
    assert (killed.state, killed.exit_code) == (cri.ContainerState.EXITED, 137)
    stopped = pod.rt.inspect(polite)
    assert stopped is not None
    assert stopped.exit_code == 0
    pod.rt.stop_container(stubborn, grace_seconds=1)  # already stopped: no error


@pytest.fixture
def usr1_image(docker_env: DockerEnv, request: pytest.FixtureRequest) -> Iterator[str]:
    """busybox with `STOPSIGNAL SIGUSR1`, committed here (no registry to pull one from)."""
    api = docker_env.client.api
    base = api.create_container(docker_env.busybox_image, labels={TEST_LABEL: request.node.nodeid})
    repository, tag = "kubelet-sim.local/stopsignal-usr1", uuid.uuid4().hex[:8]
    api.commit(base["Id"], repository=repository, tag=tag, conf={"StopSignal": "SIGUSR1"})
    api.remove_container(base["Id"], force=True)
    yield f"{repository}:{tag}"
    api.remove_image(f"{repository}:{tag}", force=True)


@pytest.mark.parametrize("inspected_first", [True, False])
def test_stop_sends_the_images_stop_signal(
    pod: Pod, usr1_image: str, docker_env: DockerEnv, inspected_first: bool
) -> None:
    """From the inspect the events stream made of the container, or from one of its own."""
    script = "trap 'exit 42' USR1; trap 'exit 15' TERM; while :; do sleep 0.1; done"
    container_id = pod.start(image=usr1_image, entrypoint=("sh", "-c", script))
    wait_for(lambda: pod.exec(container_id, "echo up") == "up", 10, "the container running")
    runtime = pod.rt
    if inspected_first:
        assert runtime.inspect(container_id) is not None
    else:  # a runtime that has never inspected it (as after a restart of the agent)
        runtime = NodeRuntime(pod.rt.engine, node_name=pod.rt.node_name)
    assert runtime.signal_stop(container_id) is True
    docker_env.client.api.wait(container_id, timeout=15)
    stopped = pod.rt.inspect(container_id)
    assert stopped is not None
    assert stopped.exit_code == 42


def test_read_only_rootfs_refuses_writes(pod: Pod) -> None:
    observed = pod.run(
        entrypoint=("sh", "-c", "touch /x && echo wrote; echo -n ok > /dev/termination-log"),
        security=cri.SecurityConfig(read_only_rootfs=True),
    )
    assert "Read-only file system" in pod.rt.logs_tail(observed.id)
    assert pod.rt.termination_message(observed) == "ok"  # the bind mount stays writable


def test_run_as_user_and_group(pod: Pod) -> None:
    out = pod.output(
        entrypoint=("sh", "-c", "id -u; id -g"),
        security=cri.SecurityConfig(run_as_user=1234, run_as_group=5678),
    )
    assert out.split() == ["1234", "5678"]


def test_group_without_user_is_refused(pod: Pod) -> None:
    with pytest.raises(cri.ContainerStartError, match="runAsGroup"):
        pod.rt.create_container(
            pod.config(security=cri.SecurityConfig(run_as_group=5)), pod.sandbox.id
        )


def test_create_body_in_inspect(pod: Pod, docker_env: DockerEnv, tmp_path: Path) -> None:
    cfg = pod.config(
        cmd=("sleep", "1"),
        resources=cri.Resources(
            cpu_period=100_000, cpu_quota=50_000, cpu_shares=512, memory_limit_bytes=64 << 20
        ),
        security=cri.SecurityConfig(
            capabilities_add=("NET_ADMIN",),
            capabilities_drop=("MKNOD",),
            no_new_privileges=True,
        ),
        mounts=(
            cri.Mount(host_path=str(tmp_path), container_path="/data", read_only=True),
            cri.Mount(host_path="", container_path="/cache", tmpfs=True),
        ),
        tty=True,
        stdin=True,
    )
    container_id = pod.rt.create_container(cfg, pod.sandbox.id)
    attrs = docker_env.client.api.inspect_container(container_id)
    host = attrs["HostConfig"]
    assert attrs["Name"] == f"/k8s_app_web_default_{pod.ref.uid}_0"
    assert (host["CpuPeriod"], host["CpuQuota"], host["CpuShares"]) == (100_000, 50_000, 512)
    assert host["Memory"] == 64 << 20
    assert host["NetworkMode"] == host["IpcMode"] == f"container:{pod.sandbox.id}"
    assert host["CapAdd"] == ["NET_ADMIN"]
    assert host["CapDrop"] == ["MKNOD"]
    assert host["SecurityOpt"] == ["no-new-privileges", "seccomp=unconfined"]
    assert host["Privileged"] is False
    assert f"{tmp_path}:/data:ro" in host["Binds"]
    log = tmp_path / "pods" / pod.ref.uid / "containers" / "app" / "0-termination-log"
    assert f"{log}:/dev/termination-log" in host["Binds"]
    assert log.stat().st_mode & 0o777 == 0o666
    [memory] = host["Mounts"]  # emptyDir medium Memory: a tmpfs volume the pod shares
    assert (memory["Type"], memory["Target"]) == ("volume", "/cache")
    assert memory["Source"] == translate.tmpfs_volume_name(pod.ref.uid, "")
    assert (attrs["Config"]["Tty"], attrs["Config"]["OpenStdin"]) == (True, True)
    labels = attrs["Config"]["Labels"]
    assert labels[cri.LABEL_CONTAINER_TYPE] == "container"
    assert labels[cri.LABEL_CONTAINER_HASH] == "h1"
    assert labels[cri.LABEL_RESTART_COUNT] == "0"
    assert labels[cri.LABEL_TERMINATION_MESSAGE_PATH] == "/dev/termination-log"
    assert labels[cri.LABEL_TERMINATION_MESSAGE_POLICY] == "File"
    assert labels[cri.LABEL_TERMINATION_GRACE_PERIOD] == "30"
    observed = pod.rt.inspect(container_id)
    assert observed is not None
    assert observed.state == cri.ContainerState.CREATED
    assert observed.started_at is None
    assert observed.exit_code is None


def test_start_failure_raises_and_then_reads_as_exited(pod: Pod) -> None:
    container_id = pod.rt.create_container(pod.config(entrypoint=("/nonexistent",)), pod.sandbox.id)
    with pytest.raises(cri.ContainerStartError, match="/nonexistent"):
        pod.rt.start_container(container_id)
    observed = pod.rt.inspect(container_id)
    assert observed is not None
    assert observed.state == cri.ContainerState.EXITED
    assert observed.exit_code == 127
    assert "/nonexistent" in observed.error


def test_name_conflict_with_a_stale_container_is_recovered(pod: Pod) -> None:
    first = pod.rt.create_container(pod.config(), pod.sandbox.id)
    second = pod.rt.create_container(pod.config(), pod.sandbox.id)
    assert first != second
    assert pod.rt.inspect(first) is None


def test_list_inspect_and_remove(pod: Pod) -> None:
    exited = pod.run(entrypoint=("true",))
    listed = {c.id: c for c in pod.rt.list_containers()}
    assert set(listed) == {pod.sandbox.id, exited.id}
    assert listed[exited.id].state == cri.ContainerState.EXITED
    assert pod.rt.inspect("0" * 64) is None
    pod.rt.remove_container(exited.id)
    pod.rt.remove_container(exited.id)  # already gone: fine
    assert pod.rt.inspect(exited.id) is None
    pod.rt.remove_pod_dir(pod.ref.uid)
    assert not (pod.rt.root_dir / "pods" / pod.ref.uid).exists()


def test_image_status_and_image_id(rt: NodeRuntime, docker_env: DockerEnv) -> None:
    info = rt.image_status(docker_env.busybox_image)
    assert info is not None
    assert info.id.startswith("sha256:")
    assert status_image_id(info) == f"docker://{info.id}"
    digested = cri.ImageInfo(ref="x", id=info.id, repo_digests=("reg/x@sha256:abc",))
    assert status_image_id(digested) == "docker-pullable://reg/x@sha256:abc"
    assert rt.image_status("kubelet-sim.local/absent:nope") is None
    assert rt.image_status("Invalid Ref!") is None


def test_pull_failure_raises_quickly(rt: NodeRuntime) -> None:
    began = time.monotonic()
    auth = cri.RegistryAuth(server="127.0.0.1:1", username="u", password="s3cret")
    with pytest.raises(cri.ImagePullError) as caught:
        rt.pull_image("127.0.0.1:1/nope/img:1", auth)
    assert time.monotonic() - began < 10
    assert "connection refused" in str(caught.value), "Docker's own words say what failed"
    assert "s3cret" not in str(caught.value)
    assert "s3cret" not in repr(auth)


def test_pull_from_a_registry_streams_to_the_end(rt: NodeRuntime, docker_env: DockerEnv) -> None:
    """A pull that succeeds (from a registry on loopback): the progress stream is read to its
    end and the image is there, with the registry's digest as its imageID."""
    with loopback_registry("kubelet-sim/tiny", "1") as registry:
        ref = f"{registry.host}/kubelet-sim/tiny:1"
        try:
            rt.pull_image(ref, None)
            info = rt.image_status(ref)
            assert info is not None
            digest = f"{registry.host}/kubelet-sim/tiny@{registry.manifest_digest}"
            assert status_image_id(info) == f"docker-pullable://{digest}"
        finally:
            docker_env.client.images.remove(ref, force=True)


class Changes:
    """on_change calls, thread-safe to read from the test."""

    def __init__(self) -> None:
        self.uids: list[str] = []

    def __call__(self, uid: str) -> None:
        self.uids.append(uid)

    def clear(self) -> None:
        self.uids.clear()


@pytest.fixture
def watched(pod: Pod) -> Iterator[tuple[ContainerWatcher, Changes]]:
    changes = Changes()
    events = ContainerEvents(
        pod.rt.engine, label=f"{cri.LABEL_NODE}={pod.rt.node_name}", supervisor=Supervisor()
    )
    watcher = ContainerWatcher(pod.rt, changes, events=events)
    watcher.start()
    events.start()
    yield watcher, changes
    began = time.monotonic()
    watcher.stop()
    events.stop()
    assert time.monotonic() - began < 1.5, "stop() returns within about a second"


def _state(watcher: ContainerWatcher, container_id: str) -> cri.ContainerState | None:
    observed = watcher.get(container_id)
    return observed.state if observed else None


def test_watcher_follows_a_container_through_its_life(
    pod: Pod, watched: tuple[ContainerWatcher, Changes]
) -> None:
    watcher, changes = watched
    assert watcher.wait_synced(5)
    assert [c.id for c in watcher.pod_containers(pod.ref.uid)] == [pod.sandbox.id]
    assert watcher.pod_uids() == {pod.ref.uid}
    assert changes.uids == [pod.ref.uid]  # the first list is a change too
    changes.clear()

    container_id = pod.rt.create_container(pod.config(cmd=("sleep", "0.3")), pod.sandbox.id)
    wait_for(lambda: _state(watcher, container_id) == cri.ContainerState.CREATED, 10, "created")
    pod.rt.start_container(container_id)
    wait_for(lambda: _state(watcher, container_id) == cri.ContainerState.RUNNING, 10, "running")
    wait_for(lambda: _state(watcher, container_id) == cri.ContainerState.EXITED, 10, "exited")
    exited = watcher.get(container_id)
    assert exited is not None
    assert (exited.exit_code, exited.name) == (0, "app")
    assert exited.finished_at is not None
    assert set(changes.uids) == {pod.ref.uid}
    assert len(changes.uids) >= 3

    pod.rt.remove_container(container_id)
    wait_for(lambda: watcher.get(container_id) is None, 10, "destroyed")
    assert [c.id for c in watcher.pod_containers(pod.ref.uid)] == [pod.sandbox.id]
    # One list (one inspect), then one inspect per create/start/die; replayed events of the
    # sandbox (subscribed from just before the list) are already reflected: no inspect.
    assert watcher.stats.lists == 1
    assert watcher.stats.inspects == 1 + 3
    pod.rt.remove_container(pod.sandbox.id)
    wait_for(lambda: watcher.pod_uids() == set(), 10, "the pod's last container destroyed")
    assert watcher.pod_containers(pod.ref.uid) == []


def test_an_oom_event_after_the_exit_makes_the_container_oom_killed(
    pod: Pod, watched: tuple[ContainerWatcher, Changes], docker_env: DockerEnv
) -> None:
    """Docker 20.10 takes OOMKilled from containerd's exit event; when containerd's OOM event
    comes after it, the inspect says false but Docker still emits `oom`. That order is a
    race, so the event is handed to the watcher here as Docker's stream delivers it."""
    watcher, changes = watched
    assert watcher.wait_synced(5)
    container_id = pod.start(entrypoint=("sh", "-c", "exit 137"))
    wait_for(lambda: _state(watcher, container_id) == cri.ContainerState.EXITED, 10, "exited")
    exited = watcher.get(container_id)
    assert exited is not None
    assert (exited.exit_code, exited.oom_killed) == (137, False)
    changes.clear()
    attrs = docker_env.client.api.inspect_container(container_id)
    labels = attrs["Config"]["Labels"]
    watcher.events._dispatch(
        {
            "Type": "container",
            "Action": "oom",
            "id": container_id,
            "Actor": {"ID": container_id, "Attributes": {**labels, "name": attrs["Name"][1:]}},
        }
    )
    marked = watcher.get(container_id)
    assert marked is not None
    assert (marked.exit_code, marked.oom_killed) == (137, True)
    assert changes.uids == [pod.ref.uid]
    watcher.reconnect()  # a relist reads OOMKilled false again from Docker: the mark stays
    wait_for(lambda: watcher.stats.lists == 2, 10, "relist after reconnect")
    relisted = watcher.get(container_id)
    assert relisted is not None
    assert relisted.oom_killed


def test_watcher_ignores_exec_events_and_relists_after_reconnect(
    pod: Pod, watched: tuple[ContainerWatcher, Changes]
) -> None:
    watcher, _ = watched
    assert watcher.wait_synced(5)
    app = pod.start(cmd=("sleep", "60"))
    wait_for(lambda: _state(watcher, app) == cri.ContainerState.RUNNING, 10, "running")
    inspects = watcher.stats.inspects
    events = watcher.stats.events
    pod.exec(app, "true")  # exec_create/exec_start/exec_die: events, but nothing to inspect
    wait_for(lambda: watcher.stats.events > events, 10, "exec events")
    assert watcher.stats.inspects == inspects

    watcher.reconnect()
    wait_for(lambda: watcher.stats.lists == 2, 10, "relist after reconnect")
    assert watcher.stats.reconnects == 1
    later = pod.start(name="later", cmd=("sleep", "60"))
    wait_for(lambda: _state(watcher, later) == cri.ContainerState.RUNNING, 10, "seen after")
    assert {c.name for c in watcher.pod_containers(pod.ref.uid)} == {"POD", "app", "later"}


def test_watcher_record_never_goes_back_in_time(
    pod: Pod, watched: tuple[ContainerWatcher, Changes]
) -> None:
    watcher, _ = watched
    assert watcher.wait_synced(5)
    cfg = pod.config(cmd=("true",))
    container_id = pod.rt.create_container(cfg, pod.sandbox.id)
    watcher.record(created_observation(cfg, container_id))
    assert _state(watcher, container_id) == cri.ContainerState.CREATED  # visible at once
    pod.rt.start_container(container_id)
    wait_for(lambda: _state(watcher, container_id) == cri.ContainerState.EXITED, 10, "exited")
    # The list's, start and die; plus create when its event beats our record() (a real race).
    assert watcher.stats.inspects <= 1 + 3
    watcher.record(created_observation(cfg, container_id))  # stale: ignored
    assert _state(watcher, container_id) == cri.ContainerState.EXITED
    pod.rt.remove_container(container_id)
    wait_for(lambda: watcher.get(container_id) is None, 10, "destroyed")
    watcher.record(created_observation(cfg, container_id))  # after destroy: ignored
    assert watcher.get(container_id) is None


def test_watcher_backs_off_while_docker_is_down_and_stops_at_once(tmp_path: Path) -> None:
    import docker

    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no.sock", version="1.41")
    runtime = NodeRuntime(DockerEngine(client), node_name="rt-down", root_dir=tmp_path)
    events = ContainerEvents(
        runtime.engine, backoff=Backoff(initial=0.05, cap=0.2), supervisor=Supervisor()
    )
    watcher = ContainerWatcher(runtime, events=events)
    watcher.start()
    events.start()
    wait_for(lambda: watcher.stats.reconnects >= 3, 10, "retries with backoff")
    assert not watcher.synced
    assert watcher.stats.lists == 0
    began = time.monotonic()
    watcher.stop()
    events.stop()
    assert time.monotonic() - began < 1.0
    client.close()


def test_containers_logs_rotate_as_the_kubelets_by_default(pod: Pod, docker_env: DockerEnv) -> None:
    """json-file, 5 files of 10 MiB (containerLogMaxFiles, containerLogMaxSize), sandbox too."""
    container_id = pod.rt.create_container(pod.config(cmd=("true",)), pod.sandbox.id)
    for cid in (container_id, pod.sandbox.id):
        log_config = docker_env.client.api.inspect_container(cid)["HostConfig"]["LogConfig"]
        assert log_config == {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "5"}}


def test_proc_masked_unless_unmasked(pod: Pod) -> None:
    """procMount Default: Docker mounts /proc/sys read-only (one of its ReadonlyPaths); Unmasked
    (empty MaskedPaths and ReadonlyPaths) leaves /proc whole."""
    show = ("sh", "-c", "grep -c ' /proc/sys proc ro,' /proc/mounts; true")
    assert pod.output(entrypoint=show).strip() == "1"
    unmasked = pod.output(entrypoint=show, security=cri.SecurityConfig(unmasked_proc=True))
    assert unmasked.strip() == "0"
