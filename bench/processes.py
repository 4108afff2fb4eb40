"""The processes the bench owns: the fake API server and the agent, both real subprocesses.

The agent is measured as users run it: its own process, JSON logs on stderr. The bench reads
those logs for the moment the agent saw each pod ("pod bound to this node").
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerside
from bench.kube import api_client
from bench.times import parse_time
from kubelet_sim.controlplane.binaries import DEFAULT_KUBE_VERSION, find_binaries
from kubelet_sim.controlplane.cluster import ControlPlane, stop_child
from kubelet_sim.runtime.local_images import PAUSE_IMAGE

REPO = Path(__file__).resolve().parent.parent
AGENT_USER_AGENT_PREFIX = "kubelet-sim/"


def spawn_kubelet_sim(
    args: list[str], kubeconfig: str, root: Path, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`python -m kubelet_sim ARGS` as users run it (JSON logs to `log`, a free kubelet port);
    for runs that need no log reading (AgentProcess does that for one node)."""
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "kubelet_sim", *args, "--kubeconfig", kubeconfig,
             "--pod-infra-image", PAUSE_IMAGE, "--root-dir", str(root), "--log-format", "json",
             "--port", "0"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )  # fmt: skip


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    stop_child(proc, timeout, kill_wait=5)


class FakeProcess:
    """`python -m tests.fakeapi` in a subprocess; reads its request log over /debug/requests."""

    def __init__(self, kubeconfig: Path, timeout: float = 15.0) -> None:
        self.kubeconfig = kubeconfig
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakeapi", "--kubeconfig", str(kubeconfig)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not line or not line[0].startswith("http"):
            self.stop()
            raise RuntimeError("the fake API server did not print its URL")
        self.url = line[0].strip()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def requests(self, since: float, user_agent_prefix: str) -> list[dict[str, Any]]:
        """The fake's request records since `since` whose user agent starts with the prefix."""
        query = f"since={since}&userAgentPrefix={urllib.parse.quote(user_agent_prefix)}"
        with urllib.request.urlopen(f"{self.url}/debug/requests?{query}", timeout=10) as answer:
            records: list[dict[str, Any]] = json.loads(answer.read())
        return records

    def stop(self) -> None:
        stop_child(self.proc, 10, kill_wait=5)


class AgentProcess:
    """`python -m kubelet_sim` with JSON logs; keeps when it first saw each pod uid."""

    def __init__(
        self,
        node: str,
        kubeconfig: str,
        root_dir: Path,
        pause_image: str,
        docker_host: str | None,
        log_file: Path,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        env = dict(os.environ)
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        self.node = node
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubelet_sim",
                "--node-name",
                node,
                "--kubeconfig",
                kubeconfig,
                "--pod-infra-image",
                pause_image,
                "--root-dir",
                str(root_dir),
                "--port",
                "0",
                "--log-format",
                "json",
                *extra_args,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._log = log_file.open("w")
        self._lock = threading.Lock()
        self.bound: dict[str, float] = {}  # pod uid → log time of "pod bound to this node"
        self.running = threading.Event()
        self.warnings: list[str] = []
        self._reader = threading.Thread(target=self._read, name="agent-log", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._log.write(line)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            event = record.get("event")
            if event == "pod bound to this node" and record.get("uid"):
                with self._lock:
                    self.bound.setdefault(str(record["uid"]), parse_time(record["timestamp"]))
            elif event == "running" and record.get("logger") == "kubelet_sim.node":
                self.running.set()
            elif record.get("level") in ("warning", "error"):
                with self._lock:
                    self.warnings.append(line.strip()[:300])
        self._log.flush()

    def bound_at(self, uid: str) -> float | None:
        with self._lock:
            return self.bound.get(uid)

    def warning_count(self) -> int:
        with self._lock:
            return len(self.warnings)

    def wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.running.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kubelet-sim exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kubelet-sim not running after {timeout}s")

    def stop(self) -> None:
        stop_child(self.proc, 20, kill_wait=5)
        self._reader.join(5)
        with contextlib.suppress(OSError):
            self._log.close()


def real_control_plane() -> ControlPlane:
    """The package's control plane of the default version in a fresh directory (`stop()`
    removes it), with controller-manager and scheduler when their binaries are there."""
    found = find_binaries(version=DEFAULT_KUBE_VERSION, require_controllers=False)
    return ControlPlane(found, Path(tempfile.mkdtemp(prefix="bench-cp-"))).start()


class ApiServer:
    """What a bench runs against: the fake in a subprocess, or a real control plane
    (`real_control_plane`) whose agents get node credentials."""

    def __init__(self, real: bool, tmp: Path) -> None:
        self.env = real_control_plane() if real else None
        self.fake = None if real else FakeProcess(tmp / "kubeconfig")
        self.label = "real" if real else "fake"
        self.kubeconfig = str(self.env.admin_kubeconfig if self.env else self.fake.kubeconfig)  # type: ignore[union-attr]

    def node_kubeconfig(self, node: str) -> str:
        """A kubelet's own credentials on a real server; the fake's one kubeconfig otherwise."""
        return str(self.env.node_kubeconfig(node)) if self.env else self.kubeconfig

    def stop(self) -> None:
        if self.fake is not None:
            self.fake.stop()
        if self.env is not None:
            self.env.stop()


@contextlib.contextmanager
def one_node(real: bool, node: str, tmp: Path) -> Iterator[tuple[ApiServer, Any, AgentProcess]]:
    """An API server and one agent for `node`, ready; afterwards the agent stopped, its
    containers and Node removed and the server stopped, whatever happened in between."""
    server = ApiServer(real, tmp)
    core = client.CoreV1Api(api_client(server.kubeconfig))
    agent = AgentProcess(
        node, server.node_kubeconfig(node), tmp / "root", PAUSE_IMAGE, None, tmp / "agent.log"
    )
    try:
        agent.wait_running(60)
        yield server, core, agent
    finally:
        agent.stop()
        with contextlib.suppress(Exception):
            dockerside.remove_node_containers(dockerside.connect(), node)
        with contextlib.suppress(client.ApiException):
            core.delete_node(node)
        server.stop()


def write_result(name: str, result: dict[str, Any]) -> Path:
    """bench/results/<name>-<time>.json, and the same on stdout."""
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    out = results / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {out}")
    return out
