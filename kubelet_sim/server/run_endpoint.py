"""/run/{namespace}/{pod}[/{uid}]/{container}?cmd=…: a command run to its end, its output the
answer (server.go's getRun over the runtime's ExecSync).

As the kubelet: POST only; `cmd` split on single spaces (no quoting: "legacy reasons"); the pod
by namespace and name (404 "pod does not exist"), the container's running attempt (500
`container not found ("c")`, also for a uid that is not the pod's); stdout then stderr, not
interleaved, as application/json whatever it holds; a non-zero exit is 500 with ExecSync's
words and the output dropped. The output is bounded as the kubelet's CRI client bounds an
ExecSync answer (16 MiB).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote

from kubelet_sim import cri
from kubelet_sim.pod.attempts import attempts_of
from kubelet_sim.server.ports import StreamRuntime
from kubelet_sim.server.routes import NodeView, Reply, find_pod

PREFIX = "/run/"
MAX_OUTPUT = 16 << 20  # the kubelet's CRI client's maxMsgSize
_RUN = re.compile(r"^/run/([^/]+)/([^/]+)/(?:([^/]+)/)?([^/]+)$")


def run(node: NodeView, runtime: StreamRuntime, method: str, path: str, query: str) -> Reply:
    found = _RUN.match(path)
    if found is None:
        return Reply.text(404, "404 page not found\n")
    if method != "POST":
        return Reply.text(405, "405: Method Not Allowed", [("Allow", "POST")])
    namespace, name, uid, container = (unquote(g or "") for g in found.groups())
    command = (parse_qs(query, keep_blank_values=True).get("cmd") or [""])[-1].split(" ")
    pod = find_pod(node, namespace, name)
    if pod is None:
        return Reply.text(404, "pod does not exist")
    target = None
    if not uid or str(pod["metadata"].get("uid")) == uid:
        attempts = attempts_of(node.containers(str(pod["metadata"].get("uid"))), container)
        if attempts and attempts[0].state == cri.ContainerState.RUNNING:
            target = attempts[0].id
    if target is None:
        return Reply.text(500, f'container not found ("{container}")')
    try:
        session = runtime.exec_stream(target, command, stdin=False, tty=False)
    except cri.StreamError as exc:
        return Reply.text(500, str(exc))
    out, err = bytearray(), bytearray()
    try:
        while True:
            fd, data = session.read()
            if not data:
                break
            (err if fd == 2 else out).extend(data)
            if len(out) + len(err) > MAX_OUTPUT:
                return Reply.text(500, f"command output is larger than {MAX_OUTPUT} bytes")
        code = session.wait()
    finally:
        session.close()
    if code:
        joined = " ".join(command)
        return Reply.text(
            500, f"command '{joined}' exited with {code}: {err.decode(errors='replace')}"
        )
    if code is None:
        return Reply.text(500, "the command's exit code was not recorded")
    return Reply(200, [bytes(out + err)], "application/json")
