"""The pods' API endpoint's network namespace is opened once, when its container starts (issue 41,
deliverable 6): the relay later listens in that very namespace even when the pid read then no
longer names its process (it may name a host process by then), and a container whose process
changed while its namespace was opened is no endpoint. On a fake Docker client; the namespace
is a real one of the test's own (`unshare --net`, as root)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.controlplane.relay import listen_in_netns
from kubelet_sim.localcluster.pod_endpoint import make_pod_endpoint
from kubelet_sim.runtime.engine import DockerEngine
from tests.cluster import wait_for
from tests.unit.runtime.test_engine_split import FakeApi, FakeClient

SIOCGSKNS = 0x894C  # ioctl: a descriptor of the network namespace a socket lives in


def _inode(path: str) -> int:
    return os.stat(path).st_ino


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a network namespace of its own (as a sandbox container's)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a network namespace of its own needs root and unshare")
    proc = subprocess.Popen(["unshare", "--net", "sleep", "600"])
    try:
        wait_for(
            lambda: _inode(f"/proc/{proc.pid}/ns/net") != _inode("/proc/self/ns/net"),
            5,
            "the holder in a network namespace of its own",
        )
        yield proc
    finally:
        proc.kill()
        proc.wait()


class _AnchorApi(FakeApi):
    """Docker's view of the anchor container: its process is `pids[i]` at the i-th inspection
    (the last one from then on)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__()
        self.pids = pids

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        attrs = super().inspect_container(container_id)
        attrs["State"]["Pid"] = self.pids.pop(0) if len(self.pids) > 1 else self.pids[0]
        return attrs


def _engine(pids: list[int]) -> tuple[DockerEngine, _AnchorApi]:
    client = FakeClient()
    client.api = api = _AnchorApi(pids)
    return DockerEngine(client, network="kind"), api  # type: ignore[arg-type]


def test_the_relay_listens_in_the_namespace_opened_at_start_after_its_process_ended(
    holder: subprocess.Popen[bytes],
) -> None:
    theirs = _inode(f"/proc/{holder.pid}/ns/net")
    engine, _api = _engine([holder.pid])
    endpoint, why_not = make_pod_endpoint(engine, "pause", {"test": "netns"})
    assert endpoint is not None, why_not
    holder.kill()
    holder.wait()  # its pid names no process now (or, reused, another one)
    try:
        with listen_in_netns(endpoint.netns, 0) as listening:
            where = fcntl.ioctl(listening.fileno(), SIOCGSKNS)
            try:
                assert os.fstat(where).st_ino == theirs != _inode("/proc/self/ns/net")
            finally:
                os.close(where)
    finally:
        endpoint.netns.close()


def test_a_container_whose_process_changed_meanwhile_is_no_endpoint(
    holder: subprocess.Popen[bytes],
) -> None:
    engine, api = _engine([holder.pid, os.getpid()])  # the second inspection: another process
    endpoint, why_not = make_pod_endpoint(engine, "pause", {"test": "netns"})
    assert endpoint is None
    assert "process changed" in why_not
    assert api.containers_by_id == {}, "the container is removed"
