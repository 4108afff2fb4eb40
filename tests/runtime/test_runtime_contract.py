"""One contract, two runtimes: the in-memory fake (tests/fakeruntime/) and the Docker adapter.

Each case runs against both and asserts what the pod workers rely on (states, exit codes, the
stop signal and SIGKILL, failed starts, removal, exec, images, termination messages), so the
fake the unit tests use cannot drift from Docker. Docker's cases need the engine (marked
`docker`); the fake's need nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubelet_sim import cri
from kubelet_sim.podworkers.ports import PodRuntime
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE, PAUSE_IMAGE
from tests.cluster import wait_for
from tests.fakeruntime import Behaviour, FakeRuntime

MISSING_IMAGE = "kubelet-sim.invalid/nothing-here:1"


@dataclass
class Subject:
    """A runtime under the contract, and how each case's container is made to behave on it:
    a command on Docker, a Behaviour on the fake."""

    runtime: PodRuntime
    fake: FakeRuntime | None
    pod: cri.PodRef

    def sandbox(self) -> cri.ObservedContainer:
        return self.runtime.run_sandbox(
            cri.SandboxConfig(pod=self.pod, attempt=0, image=PAUSE_IMAGE, hostname="contract")
        )

    def container(
        self, name: str, command: list[str], behaviour: Behaviour, attempt: int = 0
    ) -> cri.ContainerConfig:
        if self.fake is not None:
            self.fake.behave(name, behaviour)
        return cri.ContainerConfig(
            pod=self.pod,
            name=name,
            attempt=attempt,
            image=BUSYBOX_IMAGE,
            spec_hash="abc123",
            entrypoint=tuple(command),
            cmd=(),
        )

    def started(self, cfg: cri.ContainerConfig) -> str:
        sandbox = self.sandbox()
        container_id = self.runtime.create_container(cfg, sandbox.id)
        self.runtime.start_container(container_id)
        return container_id

    def state(self, container_id: str) -> cri.ObservedContainer:
        observed = self.runtime.inspect(container_id)
        assert observed is not None
        return observed

    def exited(self, container_id: str) -> cri.ObservedContainer:
        def done() -> cri.ObservedContainer | None:
            observed = self.state(container_id)
            return observed if observed.state is cri.ContainerState.EXITED else None

        result: cri.ObservedContainer = wait_for(done, 20, "the container to exit")
        return result


@pytest.fixture(params=["fake", pytest.param("docker", marks=pytest.mark.docker)])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    node = f"contract-{uuid.uuid4().hex[:8]}"
    pod = cri.PodRef(node=node, name="p", namespace="contract", uid=str(uuid.uuid4()))
    if request.param == "fake":
        fake = FakeRuntime(tmp_path, node_name=node)
        fake.add_image(BUSYBOX_IMAGE)
        fake.add_image(PAUSE_IMAGE)
        fake.pull_errors[MISSING_IMAGE] = "pull access denied"
        yield Subject(fake, fake, pod)
        return
    from kubelet_sim.runtime.engine import DockerEngine
    from kubelet_sim.runtime.node_runtime import NodeRuntime

    docker_env = request.getfixturevalue("docker_env")
    engine = DockerEngine(docker_env.client)
    runtime = NodeRuntime(engine, node_name=node, root_dir=tmp_path)
    try:
        yield Subject(runtime, None, pod)
    finally:
        for container in runtime.list_containers():
            runtime.remove_container(container.id)
        for pooled in runtime.pool_sandboxes():
            runtime.remove_container(pooled.id)


def test_a_sandbox_runs_with_an_address_and_is_listed(subject: Subject) -> None:
    sandbox = subject.sandbox()
    assert sandbox.is_sandbox
    assert sandbox.state is cri.ContainerState.RUNNING
    assert sandbox.ip
    assert sandbox.pod == subject.pod
    assert sandbox.id in {c.id for c in subject.runtime.list_containers()}


def test_a_sandbox_ends_on_its_stop_signal(subject: Subject) -> None:
    sandbox = subject.sandbox()
    assert subject.runtime.signal_stop(sandbox.id) is True
    assert subject.exited(sandbox.id).exit_code == 0


def test_a_container_is_created_then_runs(subject: Subject) -> None:
    cfg = subject.container("app", ["sleep", "1000"], Behaviour(), attempt=2)
    sandbox = subject.sandbox()
    container_id = subject.runtime.create_container(cfg, sandbox.id)
    created = subject.state(container_id)
    assert (created.state, created.name, created.attempt) == (cri.ContainerState.CREATED, "app", 2)
    assert created.spec_hash == "abc123"
    subject.runtime.start_container(container_id)
    running = subject.state(container_id)
    assert running.state is cri.ContainerState.RUNNING
    assert running.started_at is not None
    image = subject.runtime.image_status(BUSYBOX_IMAGE)
    assert image is not None  # the status's imageID: a repo digest, else the engine's id
    assert running.image_id in {f"docker://{image.id}", *image.repo_digests}


def test_a_container_that_exits_reports_its_code_and_time(subject: Subject) -> None:
    container_id = subject.started(
        subject.container("quits", ["sh", "-c", "exit 3"], Behaviour(exit_code=3))
    )
    exited = subject.exited(container_id)
    assert exited.exit_code == 3
    assert exited.finished_at is not None


def test_one_that_ignores_its_stop_signal_ends_with_sigkill(subject: Subject) -> None:
    # busybox sleep as PID 1 has no handler: the kernel drops SIGTERM for it.
    cfg = subject.container("stubborn", ["sleep", "1000"], Behaviour(ignores_sigterm=True))
    container_id = subject.started(cfg)
    assert subject.runtime.signal_stop(container_id) is True
    assert subject.state(container_id).state is cri.ContainerState.RUNNING
    subject.runtime.kill_container(container_id)
    assert subject.exited(container_id).exit_code == 137
    assert subject.runtime.signal_stop(container_id) is False  # not running: nothing sent
    subject.runtime.kill_container(container_id)  # a kill of a stopped container is fine


def test_one_that_traps_its_stop_signal_ends_with_it(subject: Subject) -> None:
    script = "trap 'exit 143' TERM; while true; do sleep 0.1; done"
    container_id = subject.started(subject.container("polite", ["sh", "-c", script], Behaviour()))
    assert subject.runtime.signal_stop(container_id) is True
    assert subject.exited(container_id).exit_code == 143


def test_a_start_that_fails_raises_and_leaves_it_exited_with_the_error(subject: Subject) -> None:
    cfg = subject.container(
        "broken", ["/no/such/binary"], Behaviour(start_error="executable file not found")
    )
    sandbox = subject.sandbox()
    container_id = subject.runtime.create_container(cfg, sandbox.id)
    with pytest.raises(cri.ContainerStartError):
        subject.runtime.start_container(container_id)
    failed = subject.state(container_id)
    assert failed.state is cri.ContainerState.EXITED
    assert failed.error


def test_a_removed_container_is_gone_and_removing_again_is_fine(subject: Subject) -> None:
    container_id = subject.started(subject.container("gone", ["sleep", "1000"], Behaviour()))
    subject.runtime.kill_container(container_id)
    subject.exited(container_id)
    subject.runtime.remove_container(container_id)
    assert subject.runtime.inspect(container_id) is None
    assert container_id not in {c.id for c in subject.runtime.list_containers()}
    subject.runtime.remove_container(container_id)


def test_a_running_container_is_resized_in_place_and_a_removed_one_cannot_be(
    subject: Subject,
) -> None:
    """UpdateContainerResources (an in-place resize): the same container runs on; a container
    that is gone raises."""
    container_id = subject.started(subject.container("resized", ["sleep", "1000"], Behaviour()))
    bigger = cri.Resources(
        cpu_period=100000, cpu_quota=25000, cpu_shares=153, memory_limit_bytes=64 << 20
    )
    subject.runtime.update_container_resources(container_id, bigger)
    assert subject.state(container_id).state is cri.ContainerState.RUNNING
    if subject.fake is not None:
        assert subject.fake.resources_of(container_id) == bigger
    subject.runtime.kill_container(container_id)
    subject.exited(container_id)
    subject.runtime.remove_container(container_id)
    with pytest.raises(Exception):  # noqa: B017, PT011 (Docker's NotFound, the fake's own)
        subject.runtime.update_container_resources(container_id, bigger)


def test_exec_gives_the_exit_code_and_fails_in_a_stopped_container(subject: Subject) -> None:
    container_id = subject.started(subject.container("execs", ["sleep", "1000"], Behaviour()))
    assert subject.runtime.exec_probe(container_id, ["sh", "-c", "exit 2"], 10).exit_code == 2
    assert subject.runtime.exec_probe(container_id, ["true"], 10).exit_code == 0
    subject.runtime.kill_container(container_id)
    subject.exited(container_id)
    result = subject.runtime.exec_probe(container_id, ["true"], 10)
    assert result.exit_code is None
    assert result.error


def test_images_on_the_node_and_a_pull_that_fails(subject: Subject) -> None:
    present = subject.runtime.image_status(BUSYBOX_IMAGE)
    assert present is not None
    assert present.id.startswith("sha256:")
    assert any(present.id == i.id for i in subject.runtime.list_images())
    assert subject.runtime.image_status(MISSING_IMAGE) is None
    with pytest.raises(cri.ImagePullError):
        subject.runtime.pull_image(MISSING_IMAGE)


def test_the_termination_message_is_what_the_container_left(subject: Subject) -> None:
    script = "printf bye > /dev/termination-log; exit 1"
    cfg = subject.container("says", ["sh", "-c", script], Behaviour(exit_code=1, message="bye"))
    exited = subject.exited(subject.started(cfg))
    assert exited.exit_code == 1
    assert subject.runtime.termination_message(exited) == "bye"


def test_a_pool_sandbox_is_no_pods_until_claimed_then_wholly_the_pods(subject: Subject) -> None:
    runtime = subject.runtime
    pooled = runtime.run_pool_sandbox(PAUSE_IMAGE)
    assert [(p.id, p.running) for p in runtime.pool_sandboxes()] == [(pooled, True)]
    assert runtime.inspect(pooled) is None  # no pod's: never counted, listed or collected
    assert runtime.list_containers() == []
    cfg = cri.SandboxConfig(pod=subject.pod, attempt=0, image=PAUSE_IMAGE, hostname="claimed")
    sandbox = runtime.claim_sandbox(pooled, cfg)
    assert (sandbox.id, sandbox.pod, sandbox.is_sandbox) == (pooled, subject.pod, True)
    assert sandbox.state is cri.ContainerState.RUNNING
    assert sandbox.ip
    assert runtime.pool_sandboxes() == []
    assert [c.id for c in runtime.list_containers()] == [pooled]
    app = subject.container("app", ["sleep", "300"], Behaviour())
    app_id = runtime.create_container(app, sandbox.id)
    runtime.start_container(app_id)
    result = runtime.exec_probe(app_id, ["hostname"], 10)
    assert (result.exit_code, result.output.strip()) == (0, "claimed")


def test_a_pool_sandbox_that_is_gone_is_not_claimed(subject: Subject) -> None:
    pooled = subject.runtime.run_pool_sandbox(PAUSE_IMAGE)
    subject.runtime.remove_container(pooled)
    assert subject.runtime.pool_sandboxes() == []
    cfg = cri.SandboxConfig(pod=subject.pod, attempt=0, image=PAUSE_IMAGE, hostname="late")
    with pytest.raises(cri.ContainerStartError):
        subject.runtime.claim_sandbox(pooled, cfg)
