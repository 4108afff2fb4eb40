"""`kubelet-sim demo` as a user runs it: a subprocess on the real control-plane binaries.

The demo brings its own real control plane, so these tests need no API server of the suite's
and run once (in the pass that runs tests without one); without the binaries they skip and
say why. They read what a user sees (the printed lines, kubectl, Docker, processes, ports).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker
import pytest

from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE, PAUSE_IMAGE
from kubelet_sim.tools.handoff import HOLD_ENV
from tests.agent_process import run_command
from tests.cluster import deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.handoff_order import STREAM_HOLD, handoff_steps, in_order
from tests.kubectl import kubectl

pytestmark = pytest.mark.docker

STEPS = handoff_steps("scheduled", "bound", containers=["hello"])
# A pod that took a warm sandbox from its node's pool (the default, sized to recent starts):
# the claim is its sandbox step, as the trace shows it.
POOLED_STEPS = [
    *STEPS[: STEPS.index("sandbox created")],
    "sandbox (from pool)",
    *STEPS[STEPS.index("sandbox started") + 1 :],
]


@pytest.fixture(scope="module")
def kube_bin() -> None:
    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.skip(f"the demo needs control-plane binaries: {exc}".splitlines()[0])


class DemoProcess:
    """The demo with its stdout read line by line (stderr too, for failure messages)."""

    def __init__(self, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.state = state
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet_sim", "demo", "--state-dir", str(state), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Order is checked with the stream's hold of tests/cli/test_handoff_stream.py: a
            # step whose Docker side lags past the default 3 s is printed late, out of order.
            env={**os.environ, HOLD_ENV: str(STREAM_HOLD), **(env or {})},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, text: str, timeout: float) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None and not any(text in line for line in self.lines):
                pytest.fail(f"demo exited {self.proc.returncode}:\n" + "\n".join(self.lines))
            return next((line for line in self.lines if text in line), None)

        return str(wait_for(found, timeout, f"the demo to print {text!r}"))

    def wait_match(self, pattern: str, timeout: float) -> str:
        """The first line matching `pattern` (re.search), waited for as wait_line waits."""
        regex = re.compile(pattern)

        def found() -> str | None:
            line = next((line for line in self.lines if regex.search(line)), None)
            if line is None and self.proc.poll() is not None:
                pytest.fail(f"demo exited {self.proc.returncode}:\n" + "\n".join(self.lines))
            return line

        return str(wait_for(found, timeout, f"the demo to print a line like {pattern!r}"))

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout * deadline_scale())
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self._reader.join(5)  # what it printed says which step of the cleanup it reached
            pytest.fail(
                f"the demo did not stop within {timeout}s of {sig.name}; its last lines:\n"
                + "\n".join(self.lines[-15:])
            )
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def demos(docker_env: DockerEnv) -> Iterator[list[DemoProcess]]:
    started: list[DemoProcess] = []
    yield started
    for demo in started:
        demo.kill()
    for demo in started:  # what a failed test's demo left: its containers, by its label
        labels = (
            json.loads((demo.state / "demo.json").read_text())["labels"]
            if (demo.state / "demo.json").exists()
            else {}
        )
        for key, value in labels.items():
            docker_env.remove_labelled(f"{key}={value}")


def _images() -> list[str]:
    """Local images: a test never makes the engine pull from a registry."""
    return ["--image", BUSYBOX_IMAGE, "--pod-infra-image", PAUSE_IMAGE]


def _kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl(kubeconfig, *args, text=True)


def _json(kubeconfig: str, *args: str) -> Any:
    done = _kubectl(kubeconfig, *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


def _owned(labels: dict[str, str]) -> list[Any]:
    client = docker.from_env()
    try:
        selector = [f"{k}={v}" for k, v in labels.items()]
        return list(client.containers.list(all=True, filters={"label": selector}))
    finally:
        client.close()


def test_demo_runs_the_handoff_and_leaves_nothing(
    kube_bin: None, demos: list[DemoProcess], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    demo = DemoProcess(state, "--nodes", "2", "--replicas", "2", *_images())
    demos.append(demo)
    export = demo.wait_line("export KUBECONFIG=", 90)
    kubeconfig = export.split("=", 1)[1]
    assert kubeconfig == str(state / "kubeconfig")
    record = json.loads((state / "demo.json").read_text())
    children = [int(c["pid"]) for c in record["children"]]
    assert len(children) == 4  # etcd, kube-apiserver, kube-controller-manager, kube-scheduler

    nodes = _json(kubeconfig, "get", "nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["n1", "n2"]
    assert all(_ready(n) for n in nodes)

    def sample_ready() -> list[dict[str, Any]] | None:
        pods = _json(kubeconfig, "get", "pods", "-l", "app=hello")["items"]
        return pods if len(pods) == 2 and all(_ready(p) for p in pods) else None

    pods = wait_for(sample_ready, 60, "the sample's 2 pods Ready")
    assert {p["spec"]["nodeName"] for p in pods} <= {"n1", "n2"}
    events = _json(kubeconfig, "get", "events", "--field-selector", "reason=Scheduled")["items"]
    for pod in pods:
        scheduled = [e for e in events if e["involvedObject"]["uid"] == pod["metadata"]["uid"]]
        assert scheduled, f"no Scheduled event for {pod['metadata']['name']}"
        by = scheduled[0].get("reportingComponent") or scheduled[0]["source"]["component"]
        assert by == "default-scheduler"

    # Logs and exec go API server → the node's kubelet API, whose certificate it verifies.
    name = pods[0]["metadata"]["name"]
    logs = _kubectl(kubeconfig, "logs", name)
    assert logs.returncode == 0, logs.stderr
    assert f"hello from {name} on node {pods[0]['spec']['nodeName']}" in logs.stdout
    execd = _kubectl(kubeconfig, "exec", name, "--", "cat", "/etc/hostname")
    assert execd.returncode == 0, execd.stderr
    assert execd.stdout.strip() == name
    ports = [n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] for n in nodes]
    api_port = urlparse(
        json.loads((state / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    ).port
    assert api_port is not None

    # The printed timeline: every step of each sample pod, in order, on its node. A pod first
    # seen before the scheduler placed it is "created" on no node yet ("-"), as it was then.
    for pod in pods:
        pod_name, node = re.escape(f"default/{pod['metadata']['name']}"), pod["spec"]["nodeName"]
        demo.wait_match(rf"{pod_name}  {re.escape(node)}  Ready written", 10)
        line_of_pod = re.compile(rf"{pod_name}  (?:{re.escape(node)}|-)  (.+?)(?:  |$)")
        printed = [m[1] for line in demo.lines if (m := line_of_pod.search(line))]
        steps = POOLED_STEPS if "sandbox (from pool)" in printed else STEPS
        for step in steps:
            nodes = f"({re.escape(node)}|-)" if step == "created" else re.escape(node)
            demo.wait_match(rf"{pod_name}  {nodes}  {re.escape(step)}", 10)
        printed = [m[1] for line in demo.lines if (m := line_of_pod.search(line))]
        # In order, but for the first status write: the status manager's, beside the runtime.
        assert in_order([step for step in printed if step in steps], steps), printed

    assert demo.stop(signal.SIGINT) == 0, "\n".join(demo.lines)
    assert not _owned(record["labels"]), "containers of the demo are left"
    assert not [pid for pid in children if _alive(pid)], "control-plane processes are left"
    assert not [p for p in [api_port, *ports] if _listening(p)], "ports still listen"
    assert sorted(p.name for p in state.iterdir()) == []
    assert any("removed" in line and "containers" in line for line in demo.lines)


def test_a_demo_cleans_up_after_a_killed_one(
    kube_bin: None, demos: list[DemoProcess], docker_env: DockerEnv, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = DemoProcess(state, "--nodes", "1", "--replicas", "1", *_images())
    demos.append(first)
    kubeconfig = first.wait_line("export KUBECONFIG=", 90).split("=", 1)[1]
    wait_for(
        lambda: any(_ready(p) for p in _json(kubeconfig, "get", "pods")["items"]),
        60,
        "the sample pod Ready",
    )
    labels = json.loads((state / "demo.json").read_text())["labels"]
    assert _owned(labels), "the sample's containers run"
    # A container the demo did not make, with a node name it uses: never touched.
    client = docker.from_env()
    stranger = client.containers.create(
        BUSYBOX_IMAGE, ["true"], labels={"io.kubelet-sim.node": "n1", "test": tmp_path.name}
    )
    try:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        # Counted once it is dead: its sandbox pool refills after the sample's claim.
        left = _owned(labels)
        second = DemoProcess(state, "--nodes", "1", "--no-sample", *_images())
        demos.append(second)
        cleaned = second.wait_line("cleaned up after a demo that did not exit", 60)
        assert f"(pid {first.proc.pid})" in cleaned
        assert f"removed {len(left)} containers" in cleaned
        second.wait_line("n1 Ready", 90)
        # The killed demo's containers are gone (the new one's own pool has the same label).
        assert not {c.id for c in left} & {c.id for c in _owned(labels)}
        stranger.reload()  # still there
        assert second.stop() == 0
    finally:
        stranger.remove(force=True)
        client.close()


def test_missing_binaries_say_how_to_get_them(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBEBUILDER_ASSETS", "KUBELET_SIM_KUBE_BIN", "KUBELET_SIM_KUBE_BIN_DIR")
    }
    env.update(PATH=str(empty), XDG_CACHE_HOME=str(empty))
    done = run_command("demo", "--state-dir", str(tmp_path / "s"), timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert "kube-apiserver" in done.stderr
    for way in ("--download", "--kube-bin", "kubelet-sim --node-name"):
        assert way in done.stderr
