"""Pods a cluster binds to the tests' nodes by itself: a DaemonSet's that tolerates every
taint, as kind's kindnet and kube-proxy do (docs/kind.md keeps them off virtual
nodes). On the tests' own control plane and on the fake there are none; on a cluster of the
user's a test that needs a node with only its own pods (idle, at rest, counted) watches for
them and, where they came, skips saying so instead of failing.

    with pods_of_others(cluster, {cluster.node_name}) as others:
        ...
        with others.excuse("an idle node has no pods"):
            wait_idle(...)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.cluster import ApiUnderTest


@dataclass
class OtherPods:
    """What the watch saw: `seen` ("namespace/name" → its owner), `uids`."""

    seen: dict[str, str] = field(default_factory=dict)
    uids: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or [{}]
        owner = f"{owners[0].get('kind', 'no owner')} {owners[0].get('name', '')}".strip()
        with self._lock:
            self.seen[f"{meta.get('namespace')}/{meta.get('name')}"] = owner
            self.uids.add(str(meta.get("uid")))

    def skip_if_any(self, what: str) -> None:
        """Skip, in one line, if the cluster bound a pod of its own to the nodes."""
        with self._lock:
            if not self.seen:
                return
            pod, owner = next(iter(self.seen.items()))
            more = f" and {len(self.seen) - 1} more" if len(self.seen) > 1 else ""
        pytest.skip(
            f"the cluster binds pods of its own to every node ({pod} of {owner}{more}: it "
            f"tolerates every taint; docs/kind.md keeps such pods off virtual nodes): "
            f"{what}"
        )

    @contextlib.contextmanager
    def excuse(self, what: str) -> Iterator[None]:
        """A failure inside is a skip where the cluster bound pods of its own to the nodes."""
        try:
            yield
        except (AssertionError, pytest.fail.Exception):
            self.skip_if_any(what)
            raise


@contextlib.contextmanager
def pods_of_others(
    cluster: ApiUnderTest, nodes: Collection[str] | Callable[[str], bool]
) -> Iterator[OtherPods]:
    """Watch, from now until the block ends, pods bound to `nodes` (names, or a test of a name)
    outside the test's namespace."""
    from kubernetes import watch

    on = nodes if callable(nodes) else nodes.__contains__
    single = None if callable(nodes) else (list(nodes) if len(nodes) == 1 else None)
    selector = {"field_selector": f"spec.nodeName={single[0]}"} if single else {}
    others = OtherPods()
    listed = cluster.core.list_pod_for_all_namespaces(limit=1, **selector)
    version = listed.metadata.resource_version
    stop = threading.Event()
    watcher = watch.Watch()

    def run() -> None:
        nonlocal version
        while not stop.is_set():
            try:
                for event in watcher.stream(
                    cluster.core.list_pod_for_all_namespaces,
                    resource_version=version,
                    timeout_seconds=20,
                    _request_timeout=30,
                    **selector,
                ):
                    pod = cluster.api.sanitize_for_serialization(event["object"])
                    version = pod.get("metadata", {}).get("resourceVersion") or version
                    node = (pod.get("spec") or {}).get("nodeName") or ""
                    namespace = pod.get("metadata", {}).get("namespace")
                    if node and on(node) and namespace != cluster.namespace:
                        others.add(pod)
                    if stop.is_set():
                        return
            except Exception:  # a cut or an expired version: watch again from the newest
                if stop.wait(0.5):
                    return
                with contextlib.suppress(Exception):
                    fresh = cluster.core.list_pod_for_all_namespaces(limit=1, **selector)
                    version = fresh.metadata.resource_version

    thread = threading.Thread(target=run, name="pods of others", daemon=True)
    thread.start()
    try:
        yield others
    finally:
        stop.set()
        watcher.stop()


@pytest.fixture
def others_on_node(cluster: ApiUnderTest) -> Iterator[OtherPods]:
    """`pods_of_others` on the test's node, from before the test body starts its agent."""
    with pods_of_others(cluster, {cluster.node_name}) as others:
        yield others
