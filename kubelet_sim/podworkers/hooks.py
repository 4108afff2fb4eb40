"""Lifecycle hooks (pkg/kubelet/lifecycle/handlers.go): postStart and preStop, exec/httpGet/sleep.

Hooks run on a small pool of their own, never on a pod worker: a postStart hook's failure
comes back to the pod's sync (which kills the container, as killContainer does), and a preStop
hook holds a stop's SIGTERM until it ends (the stopper books the SIGKILL meanwhile). One hook's
work that raises is logged and ends there: the pool's threads go on with the other pods' hooks.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubelet_sim import cri
from kubelet_sim.durations import bounded
from kubelet_sim.kube.events import WARNING, EventRecorder
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.attempts import pod_address
from kubelet_sim.pod.probes import HttpGetAction, ProbeKind, parse_probe, resolve_port
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.podworkers.event_refs import event_ref
from kubelet_sim.prober.handlers import ExecRuntime, http_get

POST_START = "postStart"
PRE_STOP = "preStop"
HOOK_THREADS = 4
POST_START_LIMIT = 600.0  # the kubelet waits for a postStart hook without end; we stop at 10 min


def hook_of(container: ContainerView | None, which: str) -> dict[str, Any] | None:
    if container is None:
        return None
    hook = (container.raw.get("lifecycle") or {}).get(which)
    return hook if isinstance(hook, dict) else None


class HookRunner:
    def __init__(
        self,
        runtime: ExecRuntime,
        events: EventRecorder,
        node_ip: str = "",
        threads: int = HOOK_THREADS,
        node: str = "",
    ) -> None:
        self.runtime = runtime
        self.events = events
        self.node_ip = node_ip  # a hostNetwork pod's address
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="lifecycle-hook")
        self._closed = threading.Event()
        self.log = get_logger("kubelet_sim.podworkers", node=node)

    def submit(self, work: Callable[[], None]) -> None:
        if not self._closed.is_set():
            self._pool.submit(self._guarded, work)

    def _guarded(self, work: Callable[[], None]) -> None:
        """A pool's thread drops a task's exception silently: say it, and carry on."""
        try:
            work()
        except Exception:
            self.log.exception("lifecycle hook work failed")

    def shutdown(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def run(
        self,
        view: PodView,
        container: ContainerView,
        container_id: str,
        which: str,
        observed: Sequence[cri.ObservedContainer],
        timeout: float,
    ) -> str | None:
        """Run the hook now (on the caller's thread); the kubelet's failure message, or None.

        `observed` (the pod's containers, its sandbox among them) says where an httpGet
        without a host goes. A failure is also told as the kubelet tells it: a
        FailedPostStartHook or FailedPreStopHook warning on the container."""
        hook = hook_of(container, which) or {}
        pod_ip = pod_address(view.host_network, observed, self.node_ip)
        error = self._run(view, container, container_id, hook, pod_ip, timeout)
        if error is not None:
            reason = "FailedPostStartHook" if which == POST_START else "FailedPreStopHook"
            self.events.event(event_ref(view, container), WARNING, reason, error)
        return error

    def _run(
        self,
        view: PodView,
        container: ContainerView,
        container_id: str,
        hook: dict[str, Any],
        pod_ip: str,
        timeout: float,
    ) -> str | None:
        where = f"for Container {json.dumps(container.name)} in Pod {json.dumps(view.full_name)}"
        if isinstance(hook.get("exec"), dict):
            command = [str(a) for a in hook["exec"].get("command") or []]
            result = self.runtime.exec_probe(container_id, command, timeout)
            if result.exit_code == 0:
                return None
            if result.timed_out:
                error = f"command '{' '.join(command)}' timed out"
            elif result.exit_code is None:
                error = result.error
            else:
                error = f"command '{' '.join(command)}' exited with {result.exit_code}: "
            return (
                f"Exec lifecycle hook ([{' '.join(command)}]) {where} failed - error: {error},"
                f" message: {json.dumps(result.output)}"
            )
        if isinstance(hook.get("httpGet"), dict):
            spec = parse_probe(ProbeKind.READINESS, {"httpGet": hook["httpGet"]}, container.raw)
            path = str(hook["httpGet"].get("path") or "")
            if not isinstance(spec.action, HttpGetAction):
                _port, error = resolve_port(hook["httpGet"].get("port"), container.raw)
                return f"HTTP lifecycle hook ({path}) {where} failed - error: {error}"
            failed = http_get(spec.action, pod_ip, timeout)
            if failed is None:
                return None
            return f"HTTP lifecycle hook ({path}) {where} failed - error: {failed}"
        if isinstance(hook.get("sleep"), dict):
            time.sleep(min(bounded(hook["sleep"].get("seconds"), 0), max(timeout, 0.0)))
            return None
        return f"Lifecycle hook {where} failed - error: no handler the kubelet knows"
