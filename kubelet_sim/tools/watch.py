"""`kubelet-sim watch`: the raw stream a node agent consumes, for teaching.

It runs the agent's own Informer (the same list, watch, bookmarks, 410 and relist code) with an
observer that prints each step instead of acting on it: LIST, WATCH from a resourceVersion, each
event as the server sent it (type, kind, namespace/name, resourceVersion, spec.nodeName,
phase), BOOKMARKs, ERROR with 410 and the RELIST that follows, RECONNECTs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import Informer, StreamEvent, WatchTimeouts
from kubelet_sim.kube.watches import own_node, pods_on_node
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.status import format_time_precise

Write = Callable[[str], None]


def record(watch: str, event: StreamEvent, now: datetime | None = None) -> dict[str, Any]:
    """One flat record per step, the same for both output formats."""
    out: dict[str, Any] = {
        "time": format_time_precise(now or datetime.now(UTC)),
        "watch": watch,
        "type": event.kind,
    }
    obj = event.obj or {}
    meta: Json = obj.get("metadata") or {}
    if event.kind == "ERROR":
        out.update(code=obj.get("code"), reason=obj.get("reason"), message=obj.get("message"))
    elif event.obj is not None:
        out["kind"] = obj.get("kind") or ("Pod" if watch.startswith("pods") else "Node")
        if meta.get("name"):
            namespace = meta.get("namespace")
            out["name"] = f"{namespace}/{meta['name']}" if namespace else meta["name"]
        out["resourceVersion"] = meta.get("resourceVersion")
        node_name = (obj.get("spec") or {}).get("nodeName")
        if node_name:
            out["nodeName"] = node_name
        phase = (obj.get("status") or {}).get("phase")
        if phase:
            out["phase"] = phase
    else:
        out["resourceVersion"] = event.resource_version
    out.update(event.detail)
    return out


def human(rec: dict[str, Any]) -> str:
    """`12:00:01.234 pods on n1  MODIFIED   Pod default/web-1 rv=812 node=n1 phase=Running`."""
    parts = [rec["time"][11:23], f"{rec['watch']:<18}", f"{rec['type']:<9}"]
    if "kind" in rec:
        parts.append(f"{rec['kind']} {rec.get('name', '')}".rstrip())
    keys = {"resourceVersion": "rv", "nodeName": "node", "phase": "phase", "code": "code"}
    parts += [f"{short}={rec[key]}" for key, short in keys.items() if rec.get(key) is not None]
    skip = {"time", "watch", "type", "kind", "name", *keys}
    parts += [f"{k}={v}" for k, v in rec.items() if k not in skip and v is not None]
    return " ".join(parts)


def stream(
    kube: KubeConnection,
    node_name: str,
    write: Write,
    stop: threading.Event,
    *,
    output: str = "text",
    timeouts: WatchTimeouts | None = None,
) -> None:
    """Watch the node's pods and its Node object until `stop` is set, writing each step."""
    lock = threading.Lock()

    def observer_for(watch: str) -> Callable[[StreamEvent], None]:
        def observe(event: StreamEvent) -> None:
            rec = record(watch, event)
            line = json.dumps(rec, separators=(",", ":")) if output == "json" else human(rec)
            with lock:
                write(line)

        return observe

    supervisor = Supervisor(tool="watch", node=node_name)  # the command's own watches
    informers = [
        Informer(
            source,
            observer=observer_for(name),
            timeouts=timeouts,
            supervisor=supervisor,
            node=node_name,
        )
        for name, source in (
            (f"pods on {node_name}", pods_on_node(kube.api, node_name)),
            (f"node {node_name}", own_node(kube.api, node_name)),
        )
    ]
    for informer in informers:
        informer.start()
    try:
        while not stop.wait(0.5):  # wake now and then so the main thread runs signal handlers
            pass
    finally:
        for informer in informers:
            informer.stop()
