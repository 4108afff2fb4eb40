"""The bench's own API client: pods to create, a namespace per run, an independent watch.

The bench is a client like any other: its user agent is its own, so the agent's requests can
be told apart in the API server's log.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.informer import watch_lines
from kubelet_sim.node.settings import VIRTUAL_NODE_TAINT

BENCH_USER_AGENT = "kubelet-sim-bench/0.1"
BUSYBOX = "kubelet-sim.local/busybox:test"
# PID 1 ignores SIGTERM unless it traps it; this one exits at once on SIGTERM.
SLEEP_FOREVER = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]


def api_client(kubeconfig: str, pool: int = 64) -> client.ApiClient:
    """A client whose connection pool is big enough for the concurrent creates."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool
    configuration.retries = False
    api = client.ApiClient(configuration=configuration)
    api.user_agent = BENCH_USER_AGENT
    return api


def pod_body(name: str, node: str | None) -> Json:
    """The benchmark pod: local image, no token volume, exits on SIGTERM; bound to `node`, or
    left to the scheduler when None (tolerating the virtual nodes' default taint)."""
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kubelet-sim-bench"}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX,
                    "imagePullPolicy": "IfNotPresent",
                    "command": SLEEP_FOREVER,
                }
            ],
        },
    }
    if node is None:
        del body["spec"]["nodeName"]
        body["spec"]["tolerations"] = [{**VIRTUAL_NODE_TAINT, "operator": "Equal"}]
    return body


def create_namespace(core: Any, prefix: str, timeout: float = 30.0) -> str:
    """A fresh namespace; waits for its `default` ServiceAccount (admission needs it)."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = core.list_namespaced_service_account(name, field_selector="metadata.name=default")
        if found.items:
            break
        time.sleep(0.1)
    return name


def delete_namespace(core: Any, namespace: str, force_pods: bool) -> None:
    """Delete the run's namespace; on a real cluster first its pods with grace 0."""
    if force_pods:
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        core.delete_namespace(namespace, _preload_content=False)


def is_ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class ObjectWatch:
    """A watch on what `list_fn` lists (a list, then a watch from its resourceVersion) on its
    own thread; `on_event(type, object, t)` is called with the receipt time, before any
    parsing beyond the JSON line. Pods of a namespace, Nodes, Leases: one reader for all."""

    def __init__(
        self,
        list_fn: Callable[..., Any],
        on_event: Callable[[str, Json, float], None],
        timeout: float,
        **list_kwargs: Any,
    ) -> None:
        listing = list_fn(**list_kwargs, _preload_content=False)
        body = json.loads(listing.data)
        received = time.time()
        for item in body.get("items") or []:
            on_event("LISTED", item, received)
        self._response = list_fn(
            **list_kwargs,
            watch=True,
            resource_version=(body.get("metadata") or {}).get("resourceVersion"),
            allow_watch_bookmarks=False,
            timeout_seconds=int(timeout),
            _preload_content=False,
            _request_timeout=timeout + 10,
        )
        self._on_event = on_event
        self.error: BaseException | None = None  # set only if the stream ended before close()
        self._closing = threading.Event()
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, name="bench-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in watch_lines(self._response):
                received = time.time()
                event = json.loads(line)
                self._on_event(str(event.get("type")), event.get("object") or {}, received)
        except Exception as exc:  # a cut connection ends the watch; the run reports it
            if not self._closing.is_set():
                self.error = exc
        finally:
            self.ended.set()

    def close(self) -> None:
        self._closing.set()
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.ended.wait(5)
        self._response.close()


class PodWatch(ObjectWatch):
    """The pods of one namespace (the run's own, created empty: no LISTED events)."""

    def __init__(
        self,
        core: Any,
        namespace: str,
        on_event: Callable[[str, Json, float], None],
        timeout: float,
    ) -> None:
        super().__init__(core.list_namespaced_pod, on_event, timeout, namespace=namespace)
