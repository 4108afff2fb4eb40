"""What a killed test session left in Docker: the next session removes it, and never what a
live session in another PID namespace (a CI job's container sharing the Docker socket) made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from docker.errors import NotFound

from kubelet_sim.assembly.process import engine_for
from kubelet_sim.testing.leftovers import PROCESS_LABEL, remove_dead_clusters
from tests.docker_env import TEST_LABEL, DockerEnv

pytestmark = pytest.mark.docker

# A session's mark, printed by the session itself; it then lives until its stdin closes.
SESSION = (
    "import sys; from kubelet_sim.testing.leftovers import this_process;"
    " print(this_process(), flush=True); sys.stdin.read()"
)


@pytest.fixture
def session_elsewhere() -> Iterator[str]:
    """The mark of a live session in a PID namespace of its own (its pid is 1 there)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a PID namespace of its own needs root and unshare")
    session = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            sys.executable,
            "-c",
            SESSION,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert session.stdout is not None
    assert session.stdin is not None
    mark = session.stdout.readline().strip()  # ends at the line, or when the session does
    try:
        assert mark, f"the session printed no mark (exit {session.poll()})"
        yield mark
    finally:
        session.stdin.close()
        session.wait(30)


def _ended_session() -> str:
    """The mark of a session of our own namespace that has ended."""
    done = subprocess.run(
        [sys.executable, "-c", SESSION],
        input="",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return done.stdout.strip()


def test_a_live_session_in_another_pid_namespace_keeps_its_containers(
    docker_env: DockerEnv, session_elsewhere: str, request: pytest.FixtureRequest
) -> None:
    ours = {TEST_LABEL: request.node.nodeid}  # docker_env removes them after the test
    ended = _ended_session()
    assert ended
    assert ended != session_elsewhere

    def container(mark: str) -> str:
        labels = {PROCESS_LABEL: mark, **ours}
        made = docker_env.client.containers.create(
            docker_env.busybox_image, ["true"], labels=labels
        )
        return str(made.id)

    live, dead = container(session_elsewhere), container(ended)
    engine = engine_for()
    try:
        removed = remove_dead_clusters(engine, among=ours)  # only this test's containers
    finally:
        engine.close()
    docker_env.client.containers.get(live)  # still there: its session runs
    with pytest.raises(NotFound):
        docker_env.client.containers.get(dead)
    assert removed == 1
