"""What probes cost: N pods with a 1 s readiness probe against the same N pods without one.

`python -m bench.probes [--pods 100] [--kind exec|tcp|http] [--window 30] [--real-api]`.
Starts the fake API server (or a real control plane) and one kubelet-sim process, then twice
(without probes, then with a readiness probe of `--kind`, periodSeconds 1): creates the pods at
once, times create → all Ready, then measures a steady window of `--window` seconds: the
agent's CPU and threads, dockerd+containerd CPU. Probes must not cost a thread each nor grow
the agent's threads with the pods; an exec probe costs Docker an exec per second per pod (as it
costs the kubelet's runtime), a tcp or http probe costs Docker nothing.
Results in bench/results/probes-*.json.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import dockerside
from bench.kube import PodWatch, create_namespace, delete_namespace, is_ready, pod_body
from bench.processes import AgentProcess, one_node, write_result
from bench.procstat import EngineCpu, UsageWindow

NODE = "bench-probes"
# busybox httpd on 8080 serves both the tcp and the http probe; the trap ends it on SIGTERM.
SERVE = "mkdir -p /www && echo ok > /www/ok && busybox httpd -p 8080 -h /www"
SLEEP = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"
PROBES: dict[str, dict[str, Any]] = {
    "exec": {"exec": {"command": ["true"]}},
    "tcp": {"tcpSocket": {"port": 8080}},
    "http": {"httpGet": {"path": "/ok", "port": 8080}},
}


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _body(name: str, kind: str | None) -> dict[str, Any]:
    body = pod_body(name, NODE)
    c = body["spec"]["containers"][0]
    c["command"] = ["sh", "-c", f"{SERVE} && {SLEEP}"]
    if kind is not None:
        c["readinessProbe"] = {**PROBES[kind], "periodSeconds": 1}
    return body


def _phase(core: Any, agent: AgentProcess, pods: int, kind: str | None, window: float) -> Any:
    ns = create_namespace(core, "probes")
    ready: dict[str, float] = {}  # when each pod was first seen Ready
    ready_now: dict[str, bool] = {}  # what its last event said

    def seen(kind: str, pod: dict[str, Any], at: float) -> None:
        name = pod["metadata"]["name"]
        ready_now[name] = kind != "DELETED" and is_ready(pod)
        if ready_now[name]:
            ready.setdefault(name, at)

    watch = PodWatch(core, ns, seen, timeout=1800)
    try:
        began = time.time()
        for i in range(pods):
            core.create_namespaced_pod(ns, _body(f"p{i}", kind))
        deadline = time.monotonic() + 600
        while len(ready) < pods:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(ready)} of {pods} pods Ready after 600 s")
            time.sleep(0.2)
        all_ready = max(ready.values()) - began
        time.sleep(3)  # let the start's work settle before the steady window
        usage, engine = UsageWindow(agent.pid, time.monotonic()), EngineCpu()
        threads = [_threads(agent.pid)]
        end = time.monotonic() + window
        while time.monotonic() < end:
            time.sleep(1)
            threads.append(_threads(agent.pid))
        used = usage.stop(time.monotonic())
        engine_cpu = engine.seconds()
        unready = sum(1 for r in ready_now.values() if not r)
    finally:
        watch.close()
        delete_namespace(core, ns, force_pods=True)
        with contextlib.suppress(Exception):
            dockerside.remove_node_containers(dockerside.connect(), NODE)
    return {
        "probe": kind or "none",
        "pods": pods,
        "all_ready_seconds": round(all_ready, 2),
        "steady_window_seconds": round(used.wall_seconds, 1),
        "agent_cpu_percent": round(used.cpu_percent, 1),
        "agent_rss_mib": round(used.rss_mib, 1),
        "agent_threads_max": max(threads),
        "engine_cpu_percent": round(100 * engine_cpu / used.wall_seconds, 1),
        "pods_unready_at_the_end": unready,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes", description=__doc__)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--kind", choices=sorted(PROBES), default="exec")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--real-api", action="store_true", help="a real control plane")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kubelet-sim-probes-"))
    with one_node(args.real_api, NODE, tmp) as (server, core, agent):
        phases = [_phase(core, agent, args.pods, kind, args.window) for kind in (None, args.kind)]
    result = {"api": server.label, "time": datetime.now(UTC).isoformat(timespec="seconds")}
    write_result(f"probes-{args.kind}", {**result, "phases": phases})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
