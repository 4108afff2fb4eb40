"""exec, attach, port-forward and cp on the node, through the API server as users reach them.

kubectl (the Go client: SPDY/3.1 after its websocket attempt is refused) goes through the API
server under test, which proxies pods/exec|attach|portforward to the node with its
kubelet-client certificate: the real kube-apiserver, or the fake given the same identity.
The protocol's details (older versions, refusals) are checked with a SPDY client of our own
straight at the node, the way the API server hands a client's streams on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes.stream import stream

from kubelet_sim.server.streaming import websocket
from kubelet_sim.server.streaming.pump import ProtocolError
from tests import spdy_client
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.kubectl import KUBECTL, needs_kubectl
from tests.kubectl import kubectl as run_kubectl
from tests.kubelet_api import Node, node
from tests.pods import container, make_pod, running_ready, wait_status

__all__ = ["node"]  # the fixture

SERVE = "mkdir -p /www && echo hello from $HOSTNAME > /www/index.html && httpd -f -p 8080 -h /www"


def kubectl(cluster: ApiUnderTest, *args: str, stdin: bytes = b"", timeout: float = 60) -> Any:
    return run_kubectl(
        cluster.kubeconfig, *args, namespace=cluster.namespace, stdin=stdin, timeout=timeout
    )


def running(cluster: ApiUnderTest, name: str, *containers: dict[str, Any], **spec: Any) -> None:
    make_pod(cluster, name, *containers, **spec)
    wait_status(cluster, name, running_ready, 30, "running and ready")


@needs_kubectl
@pytest.mark.through_api_server
def test_exec_output_exit_code_and_stdin(cluster: ApiUnderTest, node: Node) -> None:
    running(cluster, "sh", container(command=["sleep", "3600"]))
    done = kubectl(cluster, "exec", "sh", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (done.stdout, done.stderr) == (b"out\n", b"err\ncommand terminated with exit code 3\n")
    assert done.returncode == 3
    fed = kubectl(cluster, "exec", "-i", "sh", "--", "sh", "-c", "cat; echo end", stdin=b"in\n")
    assert (fed.returncode, fed.stdout) == (0, b"in\nend\n"), fed.stderr
    gone = kubectl(cluster, "exec", "sh", "-c", "nope", "--", "true")
    assert gone.returncode == 1
    assert b"container nope is not valid for pod sh" in gone.stderr


@needs_kubectl
@pytest.mark.through_api_server
def test_cp_both_ways(cluster: ApiUnderTest, node: Node, tmp_path: Path) -> None:
    """kubectl cp is tar through exec: half a MiB each way (many frames), byte for byte."""
    running(cluster, "box", container(command=["sleep", "3600"]))
    sent = tmp_path / "sent.bin"
    sent.write_bytes(os.urandom(512 << 10))
    up = kubectl(cluster, "cp", str(sent), "box:/tmp/data.bin")
    assert up.returncode == 0, up.stderr
    back = tmp_path / "back.bin"
    down = kubectl(cluster, "cp", "box:/tmp/data.bin", str(back))
    assert down.returncode == 0, down.stderr
    assert back.read_bytes() == sent.read_bytes()


@needs_kubectl
@pytest.mark.through_api_server
def test_exec_with_a_terminal_and_its_size(cluster: ApiUnderTest, node: Node) -> None:
    if shutil.which("script") is None:
        pytest.skip("needs script(1) to give kubectl a terminal")
    running(cluster, "tty", container(command=["sleep", "3600"]))
    # the size reaches the container after the process starts (the resize stream): wait for it
    inner = ("tty; i=0; until [ \"$(stty size)\" = \"33 111\" ] || [ $i -ge 100 ]; do"
             " i=$((i+1)); sleep 0.1; done; echo size=$(stty size); exit 4")  # fmt: skip
    line = (
        f"stty cols 111 rows 33; {KUBECTL} --kubeconfig {cluster.kubeconfig}"
        f" -n {cluster.namespace} exec -it tty -- sh -c '{inner}'"
    )
    done = subprocess.run(
        ["script", "-qec", line, "/dev/null"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60 * deadline_scale(),
    )
    text = done.stdout.decode(errors="replace")
    # (script's pty may echo a control character first, as ^@: only the name matters)
    assert re.search(r"/dev/pts/\d+\r?$", text, re.M), text
    assert "size=33 111" in text, text
    assert done.returncode == 4, text


@needs_kubectl
@pytest.mark.through_api_server
def test_attach_feeds_the_main_process(cluster: ApiUnderTest, node: Node) -> None:
    loop = "while read line; do echo got $line; done; echo eof"
    attached = container(command=["sh", "-c", loop], stdin=True, stdinOnce=True)
    running(cluster, "att", attached, restart="Never")
    done = kubectl(cluster, "attach", "-i", "att", stdin=b"one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[-3:] == ["got one", "got two", "eof"]
    wait_status(cluster, "att", lambda s: s.get("phase") == "Succeeded", 30, "stdin's end ended it")


@needs_kubectl
@pytest.mark.through_api_server
def test_port_forward_reaches_the_pods_own_localhost(cluster: ApiUnderTest, node: Node) -> None:
    """Ports are dialled inside the pod's network namespace: one bound to the pod's loopback
    only is reachable too (as root; else the pod IP is dialled and only 8080 is)."""
    local = (
        "mkdir -p /lo && echo loopback only > /lo/index.html && httpd -f -p 127.0.0.1:8081 -h /lo"
    )
    running(cluster, "web", container(command=["sh", "-c", f"{local} & {SERVE}"]))
    with _port_forward(cluster, "web", "8080", "8081") as ports:
        assert _get(ports[0]) == b"hello from web\n"
        assert _get(ports[0]) == b"hello from web\n", "a second connection on the same session"
        if os.geteuid() == 0:
            assert _get(ports[1]) == b"loopback only\n"


@needs_kubectl
@pytest.mark.through_api_server
def test_port_forward_to_a_closed_port_says_why(cluster: ApiUnderTest, node: Node) -> None:
    running(cluster, "quiet", container(command=["sleep", "3600"]))
    forward = _port_forward(cluster, "quiet", "9999")
    # kubectl's words around the node's (the sandbox's id, as a CRI streaming server names it)
    words = r"error forwarding port 9999 to pod ([0-9a-f]{64}), uid : (.*)"
    with forward as ports:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(ports[0])
        said = wait_for(lambda: re.search(words, forward.stderr), 10, "kubectl's error line")
    assert "connection refused" in said.group(2).lower(), forward.stderr


@needs_kubectl
@pytest.mark.through_api_server
def test_kubectl_debug_runs_an_ephemeral_container_beside_its_target(
    cluster: ApiUnderTest, node: Node
) -> None:
    """`kubectl debug --target`: the ephemeral container shares the target's processes, is
    reported in ephemeralContainerStatuses (never ready), and `-i` attaches to it."""
    running(cluster, "target", container(command=["sleep", "3600"]))
    image = "kubelet-sim.local/busybox:test"
    made = kubectl(cluster, "debug", "target", f"--image={image}", "--target=c",
                   "--container=dbg", "--", "sh", "-c", "ps -o args")  # fmt: skip
    assert made.returncode == 0, made.stderr

    def ended() -> dict[str, Any] | None:
        pod = cluster.core.read_namespaced_pod("target", cluster.namespace)
        statuses = (
            cluster.api.sanitize_for_serialization(pod.status).get("ephemeralContainerStatuses")
            or []
        )
        done = [s for s in statuses if s["name"] == "dbg" and "terminated" in s["state"]]
        return done[0] if done else None

    status = wait_for(ended, 30, "the ephemeral container's end in its status")
    assert status["state"]["terminated"]["exitCode"] == 0
    assert (status["ready"], status["restartCount"], status["image"]) == (False, 0, image)
    logs = kubectl(cluster, "logs", "target", "-c", "dbg")
    assert "sleep 3600" in logs.stdout.decode(), "the target's processes are visible"
    asked = kubectl(cluster, "debug", "-i", "target", f"--image={image}", "--container=dbg2",
                    "--", "sh", "-c", "read x; echo got $x", stdin=b"hello\n")  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert "got hello" in asked.stdout.decode()
    assert wait_status(cluster, "target", running_ready, 10, "the pod still runs")


def _get(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
        return bytes(response.read())


class _port_forward:
    def __init__(self, cluster: ApiUnderTest, pod: str, *ports: str) -> None:
        args = [str(KUBECTL), "--kubeconfig", cluster.kubeconfig, "-n", cluster.namespace,
                "port-forward", "--address", "127.0.0.1", f"pod/{pod}",
                *(f":{p}" for p in ports)]  # fmt: skip
        # stderr to a file the test can read while kubectl runs: its error for a connection
        # comes after that connection failed here, on the error stream from the node.
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (read after exit too; gone with self)
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._err)
        self.wanted = ports

    @property
    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def __enter__(self) -> list[int]:
        assert self.process.stdout is not None
        found: dict[str, int] = {}
        deadline = time.monotonic() + 30 * deadline_scale()
        while len(found) < len(self.wanted) and time.monotonic() < deadline:
            line = self.process.stdout.readline().decode()
            if not line:
                break
            match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
            if match:
                found[match.group(2)] = int(match.group(1))
        assert len(found) == len(self.wanted), f"kubectl port-forward: {found}"
        return [found[p] for p in self.wanted]

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.communicate(timeout=10)


@pytest.mark.through_api_server
def test_exec_through_the_python_clients_websocket(cluster: ApiUnderTest, node: Node) -> None:
    """kubernetes.stream speaks websocket (v4.channel.k8s.io here), which the API server
    passes on to the node as it is."""
    running(cluster, "ws", container(command=["sleep", "3600"]))
    call = cluster.core.connect_get_namespaced_pod_exec
    both = ["sh", "-c", "echo out; echo err >&2"]
    out = stream(call, "ws", cluster.namespace, command=both, stdout=True, stderr=True,
                 stdin=False, tty=False)  # fmt: skip
    assert sorted(out.splitlines()) == ["err", "out"]
    session = stream(call, "ws", cluster.namespace, command=["sh", "-c", "head -n1; exit 5"],
                     stdin=True, stdout=True, stderr=True, tty=False,
                     _preload_content=False)  # fmt: skip
    session.write_stdin("fed\n")
    session.run_forever(timeout=30 * deadline_scale())
    assert session.read_stdout() == "fed\n"
    assert session.returncode == 5, "the exit code from the v4 Status on the error channel"
    session.close()


# -- the protocol, straight at the node ------------------------------------------------------


def _exec_path(cluster: ApiUnderTest, pod: str, *command: str, **flags: str) -> str:
    query = "&".join([f"command={c}" for c in command] + [f"{k}={v}" for k, v in flags.items()])
    return f"/exec/{cluster.namespace}/{pod}/c?{query}"


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        ("v4.channel.k8s.io", "json"),
        ("v3.channel.k8s.io", "text"),
        ("v2.channel.k8s.io", "text"),
        ("channel.k8s.io", "text"),
    ],
)
def test_the_end_of_an_exec_in_each_protocol_version(
    cluster: ApiUnderTest, node: Node, protocol: str, expected: str
) -> None:
    running(cluster, "ver", container(command=["sleep", "3600"]))
    path = _exec_path(cluster, "ver", "sh", "-c", "echo%20hi;%20exit%207", output="1")
    up = spdy_client.connect(node.port, path, node.tls, ["v9.channel.k8s.io", protocol])
    assert up.status == 101, up.body
    assert up.headers["X-Stream-Protocol-Version"] == protocol
    assert up.conn is not None
    error = up.conn.open_stream(spdy_client.stream_headers("error"))
    stdout = up.conn.open_stream(spdy_client.stream_headers("stdout"))
    assert spdy_client.read_all(stdout) == b"hi\n"
    told = spdy_client.read_all(error).decode()
    message = (
        "command terminated with non-zero exit code: error executing command"
        " [sh -c echo hi; exit 7], exit code 7"
    )
    if expected == "json":
        assert json.loads(told) == {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "7"}]},
        }
    else:
        assert told == message
    wait_for(up.conn.closed.is_set, 10, "the node closes the connection")


def test_refusals_before_the_upgrade(cluster: ApiUnderTest, node: Node) -> None:
    running(cluster, "ref", container(command=["sleep", "3600"]))
    path = _exec_path(cluster, "ref", "true", output="1")
    odd = spdy_client.connect(node.port, path, node.tls, ["v9.channel.k8s.io"])
    assert odd.status == 403
    assert odd.body.decode().startswith(
        "unable to upgrade: unable to negotiate protocol: client supports [v9.channel.k8s.io],"
        " server accepts [v5.channel.k8s.io v4.channel.k8s.io"
    )
    assert odd.headers.get_all("X-Accepted-Stream-Protocol-Versions")[1] == "v4.channel.k8s.io"
    ws = spdy_client.connect(node.port, path, node.tls, ["v5.channel.k8s.io"], websocket=True)
    assert ws.status == 403, "kubectl offers only v5 over websocket, then falls back to SPDY"
    nothing = spdy_client.connect(
        node.port, _exec_path(cluster, "ref", "true"), node.tls, ["v4.channel.k8s.io"]
    )
    assert (nothing.status, nothing.body) == (
        400,
        b"you must specify at least 1 of stdin, stdout, stderr\n",
    )
    missing = spdy_client.connect(
        node.port, _exec_path(cluster, "none", "true", output="1"), node.tls, ["v4.channel.k8s.io"]
    )
    assert (missing.status, missing.body) == (404, b"pod does not exist\n")
    other = path.replace("/c?", "/other?")
    unknown = spdy_client.connect(node.port, other, node.tls, ["v4.channel.k8s.io"])
    assert (unknown.status, unknown.body) == (500, b'container not found ("other")\n')


def test_a_client_that_never_opens_its_streams_is_let_go(cluster: ApiUnderTest, node: Node) -> None:
    """Nothing runs until the streams asked for are there; a dropped client costs nothing."""
    running(cluster, "idle", container(command=["sleep", "3600"]))
    path = _exec_path(cluster, "idle", "sh", "-c", "touch%20/tmp/ran", output="1")
    up = spdy_client.connect(node.port, path, node.tls, ["v4.channel.k8s.io"])
    assert up.conn is not None
    up.conn.open_stream(spdy_client.stream_headers("error"))
    up.conn.close()
    check = spdy_client.connect(
        node.port, _exec_path(cluster, "idle", "ls", "/tmp/ran", output="1", error="1"),
        node.tls, ["v4.channel.k8s.io"],
    )  # fmt: skip
    assert check.conn is not None
    error = check.conn.open_stream(spdy_client.stream_headers("error"))
    check.conn.open_stream(spdy_client.stream_headers("stdout"))
    check.conn.open_stream(spdy_client.stream_headers("stderr"))
    assert json.loads(spdy_client.read_all(error))["status"] == "Failure", "never ran"


def _client_frame(first: int, payload: bytes) -> bytearray:
    """A masked client frame with `first` as its first byte (FIN, RSV, opcode)."""
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    size = len(payload)
    head = bytes([first, 0x80 | size]) if size < 126 else bytes([first, 0xFE]) + size.to_bytes(2)
    return bytearray(head + mask + masked)


@pytest.mark.parametrize(
    ("first", "payload"),
    [
        (0xC2, b"\x00x"),  # RSV1 set: no extension (permessage-deflate) is negotiated
        (0x83, b"\x00x"),  # a reserved data opcode
        (0x8B, b""),  # a reserved control opcode
        (0x89, b"p" * 126),  # a ping past 125 bytes
        (0x09, b"p"),  # a fragmented ping
    ],
)
def test_websocket_frames_rfc_6455_forbids_end_the_connection(first: int, payload: bytes) -> None:
    """What wsproto would refuse (RFC 6455 5.2, 5.5) our framing refuses, at the frame's header."""
    with pytest.raises(ProtocolError):
        websocket._take_frame(_client_frame(first, payload))
    assert websocket._take_frame(_client_frame(0x82, payload[:100])) is not None


def test_websocket_continuations_out_of_place_end_the_connection() -> None:
    """A continuation with no message begun, or a new message inside a fragmented one (5.4)."""
    for frames in ([(0x80, b"\x01a")], [(0x02, b"\x01a"), (0x82, b"b")]):
        a, b = socket.socketpair()
        with a, b:
            conn = websocket.Connection(a, "v4.channel.k8s.io")
            conn._inbox += b"".join(_client_frame(first, data) for first, data in frames)
            with pytest.raises(ProtocolError):
                conn._parse()
    a, b = socket.socketpair()
    with a, b:  # a fragmented message, then a whole one, arrive on their channels
        conn = websocket.Connection(a, "v4.channel.k8s.io")
        for first, data in ((0x02, b"\x01a"), (0x89, b""), (0x80, b"b"), (0x82, b"\x02c")):
            conn._inbox += _client_frame(first, data)
        conn._parse()
        assert bytes(conn.channels[1]._unread) == b"ab"
        assert bytes(conn.channels[2]._unread) == b"c"
