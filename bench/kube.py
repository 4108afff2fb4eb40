"""The bench's own API client: pods to create, a namespace per run, an independent watch.

The bench is a client like any other: its user agent is its own, so the agent's requests can
be told apart in the API server's log.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.informer import close_watch, watch_lines
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
    parsing beyond the JSON line. Pods of a namespace, Nodes, Leases: one reader for all.

    A stream the server ends early (it closes a watcher that falls behind, as one of 5,000
    Nodes' updates on a loaded machine did) is opened again from the last resourceVersion
    seen, until `timeout`; if the server no longer has that version (410 Gone), the objects
    are listed again as RELISTED events. `restarts` and `relists` count them."""

    def __init__(
        self,
        list_fn: Callable[..., Any],
        on_event: Callable[[str, Json, float], None],
        timeout: float,
        **list_kwargs: Any,
    ) -> None:
        self._list_fn, self._list_kwargs = list_fn, list_kwargs
        self._on_event = on_event
        self._until = time.monotonic() + timeout
        self.error: BaseException | None = None  # set only if the watch gave up before close()
        self.restarts = 0
        self.relists = 0
        self._closing = threading.Event()
        self.ended = threading.Event()
        self._version = self._list("LISTED")
        self._response = self._open(self._version)
        self._thread = threading.Thread(target=self._read, name="bench-watch", daemon=True)
        self._thread.start()

    def _list(self, kind: str) -> str | None:
        """Every object as a `kind` event; the list's resourceVersion."""
        listing = self._list_fn(**self._list_kwargs, _preload_content=False)
        body = json.loads(listing.data)
        received = time.time()
        for item in body.get("items") or []:
            self._on_event(kind, item, received)
        return (body.get("metadata") or {}).get("resourceVersion")

    def _open(self, resource_version: str | None) -> Any:
        left = max(1.0, self._until - time.monotonic())
        return self._list_fn(
            **self._list_kwargs,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=False,
            timeout_seconds=int(left),
            _preload_content=False,
            _request_timeout=left + 10,
        )

    def _stream(self, response: Any, resource_version: str | None) -> tuple[str | None, bool]:
        """Events until the stream ends: the last resourceVersion seen, and whether the server
        said it is gone (410)."""
        for line in watch_lines(response):
            received = time.time()
            event = json.loads(line)
            kind, obj = str(event.get("type")), event.get("object") or {}
            if kind == "ERROR":
                return resource_version, obj.get("code") == 410
            resource_version = (obj.get("metadata") or {}).get("resourceVersion") or (
                resource_version
            )
            self._on_event(kind, obj, received)
        return resource_version, False

    def _read(self) -> None:
        version = self._version
        try:
            while True:
                try:
                    version, gone = self._stream(self._response, version)
                except Exception:  # a cut connection: opened again below, unless closing
                    if self._closing.is_set():
                        return
                    gone = False
                    time.sleep(0.5)
                if self._closing.wait(0.1) or time.monotonic() >= self._until:
                    return  # (a short pause: a server ending every stream is not spun on)
                self.restarts += 1
                if gone or version is None:
                    self.relists += 1
                    version = self._list("RELISTED")
                self._response = self._open(version)
                if self._closing.is_set():
                    self._response.close()
                    return
        except Exception as exc:  # the server is gone: the run reports it
            if not self._closing.is_set():
                self.error = exc
        finally:
            self.ended.set()

    def close(self) -> None:
        self._closing.set()
        close_watch(self._response, self.ended)


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
