"""`kubelet-sim watch`: the stream the agent consumes, shown step by step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.kube.client import connect
from kubelet_sim.tools.watch import human, stream
from tests.cluster import ApiUnderTest, deadline_scale, pod_body, wait_for


class Stream:
    """`stream()` on a thread, its JSON lines collected."""

    def __init__(self, cluster: ApiUnderTest) -> None:
        self.lines: list[dict[str, Any]] = []
        self.stop = threading.Event()
        kube = connect(cluster.node_kubeconfig)
        self.thread = threading.Thread(
            target=stream,
            args=(kube, cluster.node_name, self._write, self.stop),
            kwargs={"output": "json"},
            daemon=True,
        )
        self.thread.start()

    def _write(self, line: str) -> None:
        self.lines.append(json.loads(line))

    def find(self, what: str, **fields: Any) -> dict[str, Any]:
        def match() -> dict[str, Any] | None:
            return next(
                (r for r in self.lines if all(r.get(k) == v for k, v in fields.items())), None
            )

        found: dict[str, Any] = wait_for(match, 15, what)
        return found


@pytest.fixture
def watching(cluster: ApiUnderTest) -> Iterator[Stream]:
    s = Stream(cluster)
    yield s
    s.stop.set()
    s.thread.join(10)


def test_lists_watches_and_events_with_their_versions(
    cluster: ApiUnderTest, watching: Stream
) -> None:
    pods = f"pods on {cluster.node_name}"
    listed = watching.find("the pod list", watch=pods, type="LIST")
    watching.find("the watch from the list's version", watch=pods, type="WATCH")
    watching.find("the Node list", watch=f"node {cluster.node_name}", type="LIST")
    body = pod_body("p", nodeName=cluster.node_name)
    created = cluster.core.create_namespaced_pod(cluster.namespace, body)
    added = watching.find(
        "the pod's ADDED event", watch=pods, type="ADDED", name=f"{cluster.namespace}/p"
    )
    assert added["kind"] == "Pod"
    assert added["nodeName"] == cluster.node_name
    assert added["phase"] == "Pending"
    assert added["resourceVersion"] == created.metadata.resource_version
    assert int(added["resourceVersion"]) > int(listed["resourceVersion"])
    line = human(added)
    assert f"Pod {cluster.namespace}/p rv={added['resourceVersion']}" in line
    assert f"node={cluster.node_name}" in line


def test_bookmarks_expiry_and_the_relist_are_shown(cluster: ApiUnderTest, watching: Stream) -> None:
    fake = cluster.require_fake("bookmarks on demand, compaction and failed watches")
    pods = f"pods on {cluster.node_name}"
    watching.find("the first watch", watch=pods, type="WATCH")
    fake.bookmark_interval, old = 0.2, fake.bookmark_interval
    try:
        fake.drop_watches()  # the next watch streams with the short bookmark interval
        watching.find("a bookmark", watch=pods, type="BOOKMARK")
    finally:
        fake.bookmark_interval = old
    fake.fail_next(1_000_000, 500, verb="watch")
    fake.drop_watches()
    wait_for(
        lambda: any(
            r["type"] == "RECONNECT" and r["watch"] == pods and "500" in r["error"]
            for r in watching.lines
        ),
        15,
        "a reconnect after the 500",
    )
    cluster.core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "tick"}})
    fake.compact()  # history up to the new version forgotten: the informer's version is too old
    fake.reset_faults()
    error = watching.find("the 410 ERROR event", watch=pods, type="ERROR")
    assert error["code"] == 410
    watching.find("the expiry", watch=pods, type="EXPIRED")
    watching.find("the relist that follows", watch=pods, type="RELIST")


def test_the_command_prints_json_lines_and_stops_on_sigterm(cluster: ApiUnderTest) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubelet_sim", "watch", "--node-name", cluster.node_name,
         "--kubeconfig", cluster.node_kubeconfig, "--output", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )  # fmt: skip
    lines: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(json.loads(line) for line in proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(r["type"] == "WATCH" for r in lines), 15, "the watch started")
        cluster.core.create_namespaced_pod(
            cluster.namespace, pod_body("p", nodeName=cluster.node_name)
        )
        wait_for(lambda: any(r["type"] == "ADDED" for r in lines), 15, "the pod's ADDED line")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(10 * deadline_scale())
    reader.join(5)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
