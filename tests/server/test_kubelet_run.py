"""/run/{namespace}/{pod}[/{uid}]/{container}?cmd=…: a command's output in one answer, as the
kubelet's getRun serves it (POST; `cmd` split on spaces; stdout then stderr; a failure is 500)."""

from __future__ import annotations

from urllib.parse import quote

from tests.cluster import ApiUnderTest
from tests.kubelet_api import Node, node
from tests.pods import container, make_pod, wait_status
from tests.server.test_kubelet_auth import ask

__all__ = ["node"]  # the fixture


def test_run_returns_the_commands_output(cluster: ApiUnderTest, node: Node) -> None:
    make_pod(cluster, "runner", container(command=["sh", "-c", "sleep 3600"]))
    status = wait_status(cluster, "runner", lambda s: s.get("phase") == "Running", 30, "running")
    ns, admin = cluster.namespace, node.tls / "admin"
    uid = cluster.core.read_namespaced_pod("runner", ns).metadata.uid
    assert status

    def run(path: str, cmd: str, method: str = "POST") -> tuple[int, str]:
        return ask(node.port, method, f"{path}?cmd={quote(cmd)}", cert=admin)

    assert run(f"/run/{ns}/runner/c", "echo hello there") == (200, "hello there\n")
    assert run(f"/run/{ns}/runner/{uid}/c", "echo by uid") == (200, "by uid\n")
    # stdout, then stderr (ExecSync's two buffers, not interleaved)
    both = "sh -c echo${IFS}err>&2;echo${IFS}out"
    assert run(f"/run/{ns}/runner/c", both) == (200, "out\nerr\n")
    assert run(f"/run/{ns}/runner/c", "false") == (500, "command 'false' exited with 1: ")
    assert run(f"/run/{ns}/nobody/c", "true") == (404, "pod does not exist")
    assert run(f"/run/{ns}/runner/nope", "true") == (500, 'container not found ("nope")')
    wrong = f"/run/{ns}/runner/00000000-0000-0000-0000-000000000000/c"
    assert run(wrong, "true") == (500, 'container not found ("c")')
    assert run(f"/run/{ns}/runner/c", "true", method="GET")[0] == 405
