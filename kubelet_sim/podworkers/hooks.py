"""Lifecycle hooks (pkg/kubelet/lifecycle/handlers.go): postStart and preStop, exec/httpGet/sleep.

Each hook runs on a thread of its own, started at once, never on a pod worker and never
queued behind another pod's hook: the kubelet runs a postStart inside the container's start and
a preStop inside its kill, each on the pod's own worker, so one pod's slow hook delays no other
pod's. A postStart hook's end comes back to the pod's sync (a failure kills the container, as
startContainer does), and a preStop hook holds a stop's SIGTERM until it ends (the stopper
books the SIGKILL meanwhile, so it never waits for anything but its own hook).

Bounded per pod: a pod runs one postStart hook at a time (its containers start one after the
other while one runs, as the kubelet's SyncPod starts them), and a preStop hook once per
container it stops. One hook's work that raises is logged and ends there.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.durations import bounded
from kubelet_sim.kube.events import WARNING
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.attempts import pod_address
from kubelet_sim.pod.probes import HttpGetAction, ProbeKind, parse_probe, resolve_port
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.podworkers.event_refs import event_ref
from kubelet_sim.podworkers.ports import EventSink
from kubelet_sim.prober.handlers import ExecRuntime, http_get

POST_START = "postStart"
PRE_STOP = "preStop"
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
        events: EventSink,
        node_ip: str = "",
        node: str = "",
    ) -> None:
        self.runtime = runtime
        self.events = events
        self.node_ip = node_ip  # a hostNetwork pod's address
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}  # hooks running, by pod uid
        self.log = get_logger("kubelet_sim.podworkers", node=node)

    def submit(self, work: Callable[[], None], uid: str = "", which: str = "") -> bool:
        """Run `work` (a hook and what follows it) on a thread of its own, now; False once
        shut down (nothing runs)."""
        if self._closed.is_set():
            return False
        with self._lock:
            self._running[uid] = self._running.get(uid, 0) + 1
        name = f"lifecycle-hook-{which or 'work'}-{uid[:8]}"
        thread = threading.Thread(target=self._guarded, args=(work, uid), name=name, daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: this hook does not run
            self._done(uid)
            self.log.warning("lifecycle hook not started", error=str(exc))
            return False
        return True

    def running(self, uid: str) -> int:
        """How many hooks of this pod run now."""
        with self._lock:
            return self._running.get(uid, 0)

    def _guarded(self, work: Callable[[], None], uid: str) -> None:
        """A hook's work that raises is said, and ends there."""
        try:
            work()
        except Exception:
            self.log.exception("lifecycle hook work failed")
        finally:
            self._done(uid)

    def _done(self, uid: str) -> None:
        with self._lock:
            left = self._running.get(uid, 1) - 1
            if left > 0:
                self._running[uid] = left
            else:
                self._running.pop(uid, None)

    def shutdown(self) -> None:
        """No hook starts from now on; a sleep hook running ends at once (an exec hook ends
        with its own timeout or its container)."""
        self._closed.set()

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
            self._closed.wait(min(bounded(hook["sleep"].get("seconds"), 0), max(timeout, 0.0)))
            return None
        return f"Lifecycle hook {where} failed - error: no handler the kubelet knows"
