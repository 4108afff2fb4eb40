"""The Threads section of docs/architecture.md, checked on the code: every thread the package
starts runs under a Supervisor (`Supervisor.thread`), except those the docs name as not
supervised, each for its reason. A new raw thread, or one of these gone, fails here until the
docs and this list say what it is."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kubelet_sim"
THREAD_MAKERS = {"Thread", "Timer", "ThreadPoolExecutor"}

# Where the package makes threads of its own rather than through a Supervisor, and why.
NOT_SUPERVISED = {
    "loops/supervise.py": "the Supervisor itself: each supervised loop runs on its thread",
    "assembly/nodeset.py": "the node starters and stoppers: short-lived, each ends once its nodes"
    " run (or stopped); a node that fails to start stops the set",
    "podworkers/hooks.py": "a thread per lifecycle hook, bounded per pod; a raise is logged",
    "podworkers/image_manager.py": "the pull pool: a pull that raises is ErrImagePull",
    "node/host.py": "one name lookup, waited for with a timeout (getaddrinfo has none)",
    "runtime/streams.py": "a streaming session's pumps and its dial: they end with it",
    "server/listener.py": "a thread per upgraded stream (its selector loop runs under a"
    " Supervisor: the node's, or the node set's when shared)",
    "server/pool.py": "the kubelet API's request pool: a request that raises ends with its"
    " connection",
    "server/streaming/serve.py": "a streaming session's thread: it ends with its connection",
    "server/streaming/remotecommand.py": "an exec/attach session's pumps: they end with it",
    "server/streaming/portforward.py": "a port-forward session's pumps and stream timer",
    "demo/session.py": "the demo's handoff display (its watches are supervised informers)",
    # The web view (`kubelet-sim ui`, `--ui`): a viewer beside the nodes, not part of them.
    "cli/ui.py": "the view's stop relay: it waits for the command's stop and ends",
    "ui/server.py": "the view's HTTP server: a request that fails ends with its connection",
    "ui/sources.py": "the view's per-node watch streams and lease poller; a raise is logged and"
    " ends that feed (its informers are supervised)",
    # The pytest plugin's test clusters (`kubelet_sim.testing`): tools of a test, not a node.
    "controlplane/relay.py": "an API relay (a test cluster's per node, the pods' one): its"
    " accept loop and two pumps per connection end with the connection or the relay",
    "kube/tls_bootstrap.py": "TLS bootstrap's pool: the nodes' CSRs at start, all answered"
    " (or given up) before any node runs",
    "linux/namespaces.py": "a thread that enters another namespace for one call and ends after it",
    "ui/waiting.py": "the view's waiting room: one selector thread for connections not yet"
    " speaking",
}


def _thread_makers(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in THREAD_MAKERS:
                lines.append(node.lineno)
    return lines


def test_every_thread_is_supervised_or_named_in_the_docs() -> None:
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _thread_makers(path))
    }
    unexplained = {where: lines for where, lines in found.items() if where not in NOT_SUPERVISED}
    assert unexplained == {}, "threads outside a Supervisor: supervise them, or say why here"
    assert set(NOT_SUPERVISED) <= set(found), "a module listed here makes no thread any more"


def _threadless_source(module: str) -> str:
    """The source of `module` (under kubelet_sim/), which must start no thread itself."""
    path = PACKAGE / module
    assert _thread_makers(path) == [], module
    return path.read_text()


def test_the_loops_the_docs_call_supervised_run_under_a_supervisor() -> None:
    """The stop timer and the kubelet API's accept loop among them: their modules start no
    thread but through `.thread(` of a Supervisor, or its threads on demand (`.on_demand(`)."""
    for module in (
        "podworkers/stopper.py",
        "podworkers/workers.py",
        "kube/informer.py",
        "kube/events.py",
        "runtime/observe.py",
        "loops/workqueue.py",
        "prober/manager.py",
        "kube/object_watches.py",
    ):
        source = _threadless_source(module)
        assert "supervisor" in source, module
        assert ".thread(" in source or ".on_demand(" in source, module


def test_the_kubelet_api_selector_loop_runs_under_a_supervisor() -> None:
    """listener.py makes its streams' threads itself (pool.py its workers); its selector loop
    only through a Supervisor."""
    source = (PACKAGE / "server/listener.py").read_text()
    assert 'supervisor.thread("kubelet-server", self.run' in source


def test_the_periodic_loops_run_on_the_process_timers() -> None:
    """Lease, node status, GC, the service proxy and static pods: tasks on the process's one
    timer thread and pool (timers.py, itself supervised), never a thread of their own."""
    for module in (
        "podworkers/gc.py",
        "node/lease.py",
        "node/status.py",
        "proxy/proxy.py",
        "staticpods/source.py",
    ):
        assert "self._timers.every(" in _threadless_source(module), module
