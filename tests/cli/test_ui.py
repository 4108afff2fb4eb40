"""`kubelet-sim ui`'s server, without a browser: who it answers, what it keeps, what it shows.

The tests with `cluster` run on both API servers; the pure ones (the state's bounds, the
access rule) need none and so run in the fake pass only, as the suite's other pure tests do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import pytest
from docker.errors import ContainerError

from kubelet_sim import cri
from kubelet_sim.kube.client import connect
from kubelet_sim.kube.informer import ADDED, DELETED
from kubelet_sim.ui import Limits, RunningUi, start_ui
from kubelet_sim.ui.page_state import UiState, pod_summary
from kubelet_sim.ui.server import Access, is_loopback
from tests.cluster import ApiUnderTest, deadline_scale, pod_body, wait_for
from tests.docker_env import DockerEnv


@contextlib.contextmanager
def _ui(cluster: ApiUnderTest, **kwargs: Any) -> Iterator[RunningUi]:
    ui = start_ui(connect(cluster.kubeconfig), {}, nodes=[cluster.node_name], port=0, **kwargs)
    try:
        yield ui
    finally:
        ui.stop()


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _sse_events(url: str, wanted: int) -> list[tuple[str, Any]]:
    """The first `wanted` events of a server-sent event stream."""
    events: list[tuple[str, Any]] = []
    with urllib.request.urlopen(url, timeout=10 * deadline_scale()) as response:
        name = ""
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
                if len(events) >= wanted:
                    return events
    return events


# -- on both API servers -----------------------------------------------------------------------


def test_the_view_streams_a_snapshot_then_each_pod_change_and_deletion(
    cluster: ApiUnderTest,
) -> None:
    with _ui(cluster) as ui:
        status, headers, page = _get(ui.url)
        assert status == 200
        assert headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        assert b"/static/app.js" in page
        body = pod_body("p", nodeName=cluster.node_name)
        body["spec"]["containers"][0]["env"] = [
            {"name": "PLAIN", "value": "visible-in-the-spec"},
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
        cluster.core.create_namespaced_pod(cluster.namespace, body)
        key = f"{cluster.namespace}/p"

        def ours(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
            return [p for p in snapshot["pods"] if p["key"] == key]

        snapshot = wait_for(
            lambda: ours(json.loads(_get(ui.url + "api/snapshot")[2])), 10, "the pod"
        )
        (pod,) = snapshot
        assert (pod["node"], pod["phase"]) == (cluster.node_name, "Pending")
        assert "env" not in json.dumps(pod)
        assert "visible-in-the-spec" not in json.dumps(pod)
        stream = _sse_events(ui.url + "events", 1)
        assert stream[0][0] == "snapshot"
        assert [p["key"] for p in ours(stream[0][1])] == [key]
        timeline = json.loads(
            _get(ui.url + f"api/timeline?namespace={cluster.namespace}&name=p")[2]
        )
        assert [s["step"] for s in timeline["steps"]][:2] == ["created", "bound"]
        assert timeline["settled"] is False
        cluster.core.delete_namespaced_pod("p", cluster.namespace, grace_period_seconds=0)
        wait_for(lambda: not ours(json.loads(_get(ui.url + "api/snapshot")[2])), 10, "the pod gone")


def test_read_only_and_loopback_only_by_default(cluster: ApiUnderTest) -> None:
    with _ui(cluster) as ui:
        assert ui.server.address == "127.0.0.1"
        assert ui.server.access.token is None
        request = urllib.request.Request(ui.url + "api/snapshot", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405
        # Another origin's page reaching 127.0.0.1 through a name it controls (DNS rebinding).
        assert _get(ui.url + "api/snapshot", Host="attacker.example:80")[0] == 403
        assert _get(ui.url + "api/snapshot", Host="localhost:1")[0] == 200


def test_idle_connections_hold_no_threads_and_do_not_lock_others_out(cluster: ApiUnderTest) -> None:
    """300 connections that send nothing wait in one selector thread (at most MAX_WAITING of
    them, the oldest closed first); a browser's request is still answered at once."""
    from kubelet_sim.ui.server import MAX_WAITING

    with _ui(cluster) as ui:
        assert _get(ui.url + "healthz")[0] == 200
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", ui.server.port)) for _ in range(300)]
        try:
            room = ui.server._server.room
            wait_for(lambda: room.closed_at_cap == 300 - MAX_WAITING, 10, "the room full")
            assert len(room) == MAX_WAITING
            assert threading.active_count() - before <= 2
            began = time.monotonic()
            assert _get(ui.url + "healthz")[0] == 200
            assert time.monotonic() - began < 1.0
            # The first connections were the oldest: closed to make room (the peer sees EOF).
            idle[0].settimeout(5)
            assert idle[0].recv(1) == b""
        finally:
            for sock in idle:
                sock.close()


def test_bound_beyond_loopback_it_wants_the_printed_token(cluster: ApiUnderTest) -> None:
    with _ui(cluster, address="0.0.0.0") as ui:
        token = ui.server.access.token
        assert token is not None
        assert len(token) >= 24
        assert ui.url.endswith(f"?token={token}")
        base = f"http://127.0.0.1:{ui.server.port}/"
        assert _get(base + "api/snapshot")[0] == 401
        assert _get(base + "api/snapshot", Authorization="Bearer wrong")[0] == 401
        assert _get(base + "api/snapshot", Authorization=f"Bearer {token}")[0] == 200
        status, headers, _ = _get(ui.url)
        assert status == 303
        assert headers["Location"] == "/"
        cookie = headers["Set-Cookie"].split(";")[0]
        assert "HttpOnly" in headers["Set-Cookie"]
        assert _get(base + "api/snapshot", Cookie=cookie)[0] == 200


def test_the_command_prints_its_url_serves_and_stops_on_sigterm(cluster: ApiUnderTest) -> None:
    env = {**os.environ, "KUBELET_SIM_UI_PORT": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubelet_sim", "ui", "--kubeconfig", cluster.kubeconfig],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.match(r"web view: (http://127\.0\.0\.1:\d+/) ", line)
        assert found, line
        assert _get(found[1] + "healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15 * deadline_scale()) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_node_command_serves_the_view_with_ui(cluster: ApiUnderTest) -> None:
    """`kubelet-sim --ui` with a kubelet's own credentials (on the real server: no list of
    every pod, no events): its node, its pods, its stream; what it may not read, said."""
    from tests.agent_process import running_agent

    credentials = cluster.require_node_credentials()  # skips where the cluster gives none
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with running_agent(cluster, "--ui", "--ui-port", str(port), kubeconfig=credentials):
        url = f"http://127.0.0.1:{port}/"

        def ready() -> dict[str, Any] | None:
            with contextlib.suppress(OSError):
                snap = json.loads(_get(url + "api/snapshot")[2])
                nodes = {n["name"]: n for n in snap["nodes"]}
                node = nodes.get(cluster.node_name)
                if node and node["ours"] and node["ready"] and snap["stream"]:
                    return snap  # type: ignore[no-any-return]
            return None

        snapshot = wait_for(ready, 30, "the view with the node Ready and its watch stream")
        assert snapshot["ourNodes"] == [cluster.node_name]
        watches = {r["watch"] for r in snapshot["stream"]}
        assert {f"pods on {cluster.node_name}", f"node {cluster.node_name}"} <= watches
        cluster.core.create_namespaced_pod(
            cluster.namespace, pod_body("p", nodeName=cluster.node_name)
        )
        key = f"{cluster.namespace}/p"
        wait_for(
            lambda: key in [p["key"] for p in json.loads(_get(url + "api/snapshot")[2])["pods"]],
            10,
            "the node's pod in the view",
        )
        timeline = json.loads(_get(url + f"api/timeline?namespace={cluster.namespace}&name=p")[2])
        assert timeline["steps"][0]["step"] == "created"
        assert timeline["local"] is True
        if not cluster.is_fake:
            assert "scheduler" in snapshot["notes"], "node credentials may not list events"


# -- pure: the rules ---------------------------------------------------------------------------


def test_the_access_rule() -> None:
    loopback = Access(None)
    assert loopback.refuse("127.0.0.1", {"Host": "127.0.0.1:8765"}, {}) is None
    assert loopback.refuse("::1", {"Host": "[::1]:8765"}, {}) is None
    assert loopback.refuse("192.168.1.7", {"Host": "127.0.0.1:8765"}, {}) == 403
    assert loopback.refuse("127.0.0.1", {"Host": "kubelet.example"}, {}) == 403
    token = Access("s3cret")
    assert token.refuse("192.168.1.7", {"Host": "node:8765"}, {}) == 401
    assert token.refuse("192.168.1.7", {}, {"token": ["s3cret"]}) is None
    assert token.refuse("192.168.1.7", {"Cookie": "kubelet_sim_ui=s3cret"}, {}) is None
    assert token.refuse("192.168.1.7", {"Authorization": "Bearer s3cre"}, {}) == 401
    assert is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0")


def _record(i: int) -> dict[str, Any]:
    return {"time": "2026-01-01T00:00:00.000000Z", "watch": "pods on n1", "type": "BOOKMARK",
            "resourceVersion": str(i)}  # fmt: skip


def test_memory_stays_bounded_and_the_page_is_told() -> None:
    state = UiState(["n1"], Limits(stream=10, scheduler=3, subscriber_queue=5, subscribers=2))
    slow = state.subscribe()
    assert slow is not None
    for i in range(25):
        state.on_stream(_record(i))
    snapshot = state.snapshot()
    assert [r["resourceVersion"] for r in snapshot["stream"]] == [str(i) for i in range(15, 25)]
    assert snapshot["limits"]["streamDropped"] == 15
    sub, _ = slow
    assert sub.closed, "a browser that lags too far behind is cut off (it reconnects afresh)"
    for i in range(5):
        event = {
            "metadata": {"namespace": "d", "name": f"e{i}"},
            "reason": "FailedScheduling",
            "message": "0/1 nodes are available",
            "involvedObject": {"namespace": "d", "name": "p", "uid": "u"},
        }
        state.on_scheduler_event(ADDED, event)
    assert len(state.snapshot()["scheduler"]) == 3
    assert state.snapshot()["limits"]["schedulerDropped"] == 2
    assert state.subscribe() is not None
    assert state.subscribe() is not None
    assert state.subscribe() is None, "a limit on browsers at once"


def test_pods_gone_leave_nothing_behind() -> None:
    state = UiState(["n1"])
    for i in range(100):
        pod = {"metadata": {"uid": f"u{i}", "namespace": "d", "name": f"p{i}"}, "spec": {}}
        state.on_pod(ADDED, pod)
        state.on_pod(DELETED, pod)
    assert state.pods == {}
    assert state.versions == {}


def test_a_pod_summary_shows_no_value_from_env_or_volumes() -> None:
    pod = {
        "metadata": {"uid": "u", "namespace": "d", "name": "p", "annotations": {"a": "hidden"}},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "env": [{"name": "TOKEN", "value": "hunter2"}],
                    "args": ["--password=hunter2"],
                }
            ],
            "volumes": [{"name": "v", "secret": {"secretName": "hunter2"}}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "c", "ready": True, "restartCount": 1, "state": {"running": {}}}
            ],
        },
    }
    summary = pod_summary(pod)
    assert "hunter2" not in json.dumps(summary)
    assert summary["containers"] == [
        {
            "name": "c",
            "init": False,
            "image": "busybox",
            "state": "running",
            "ready": True,
            "restarts": 1,
        }
    ]


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    static = resources.files("kubelet_sim.ui") / "static"
    names = sorted(p.name for p in static.iterdir())
    assert names == ["app.js", "index.html", "style.css"]
    for name in names:
        text = (static / name).read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name


@pytest.mark.docker
def test_a_client_beyond_loopback_is_refused(
    cluster: ApiUnderTest, docker_env: DockerEnv, network: Any
) -> None:
    """From a container on a Docker network of the test's own: the default view cannot be
    reached at all, and one bound to that network's gateway wants the token."""
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]

    def fetch(url: str) -> str:
        """The answer to a GET, through busybox's nc (its static wget crashes here)."""
        parts = urlsplit(url)
        request = f"GET {parts.path}?{parts.query} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n"
        script = f"printf '{request}' | nc -w 5 {parts.hostname} {parts.port}"
        try:
            output = docker_env.client.containers.run(
                docker_env.busybox_image,
                ["sh", "-c", script],
                network=network.name,
                labels={cri.LABEL_NODE: cluster.node_name},
                remove=True,
                stderr=True,
            )
        except ContainerError as exc:
            return f"failed: {exc.stderr.decode(errors='replace') if exc.stderr else exc}"
        return bytes(output).decode()

    with _ui(cluster) as ui:
        answer = fetch(f"http://{gateway}:{ui.server.port}/healthz")
        assert answer.startswith("failed:"), answer
        assert "refused" in answer, answer
    with _ui(cluster, address=gateway) as ui:
        base = f"http://{gateway}:{ui.server.port}/"
        assert fetch(base + "healthz").startswith("HTTP/1.0 401 ")
        answer = fetch(f"{base}healthz?token={ui.server.access.token}")
        assert answer.startswith("HTTP/1.0 303 "), "the token becomes a cookie"
        cookie = re.search(r"Set-Cookie: (kubelet_sim_ui=[^;]+);", answer)
        assert cookie, answer
