"""What the per-object ConfigMap/Secret watches cost the agent: threads, connections, memory.

`python -m bench.watches` starts the fake API server and kubelet-sim (as bench.startup does),
measures the idle agent, then creates N pods (default 200), each using its own ConfigMap and
Secret through env (so 2 N watches, the kubelet's one object per watch), waits until all are
Ready and measures again: threads, established TCP connections to the API server, RSS, and the
urllib3 "connection pool is full" warnings in the agent's log. Run it by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerside
from bench.kube import api_client, create_namespace, delete_namespace, is_ready, pod_body
from bench.processes import AgentProcess, FakeProcess
from bench.procstat import memory_kib
from kubelet_sim.runtime.local_images import PAUSE_IMAGE

RESULTS = Path(__file__).resolve().parent / "results"
NODE = "bench-watches"


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def connections_to(pid: int, port: int) -> int:
    """Established TCP connections of `pid` whose remote port is `port` (/proc/net/tcp{,6})."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                count += 1
    return count


def sample(agent: AgentProcess, port: int) -> dict[str, Any]:
    return {
        "threads": threads(agent.pid),
        "api_connections": connections_to(agent.pid, port),
        "rss_mib": round(memory_kib(agent.pid)["VmRSS"] / 1024, 1),
        "pool_full_warnings": sum("pool is full" in w for w in agent.warnings),
    }


def pod_with_objects(name: str) -> dict[str, Any]:
    body = pod_body(name, NODE)
    # One sleep, not bench.startup's loop: 200 loops forking `sleep 1` load 2 cores by themselves.
    body["spec"]["containers"][0]["command"] = ["sh", "-c", "trap 'exit 0' TERM; sleep 1d & wait"]
    body["spec"]["containers"][0]["env"] = [
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": f"{name}-cm", "key": "k"}}},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": f"{name}-s", "key": "k"}}},
    ]
    return body


def _create_until_ready(
    core: client.CoreV1Api, namespace: str, count: int, deadline: float
) -> float:
    """Seconds from creating `count` pods, each with a ConfigMap and a Secret of its own, until
    all are Ready (or the deadline)."""
    started = time.monotonic()

    def create(i: int) -> None:
        name = f"p{i}"
        data = {"metadata": {"name": f"{name}-cm"}, "data": {"k": "v"}}
        core.create_namespaced_config_map(namespace, data)
        secret = {"metadata": {"name": f"{name}-s"}, "stringData": {"k": "v"}}
        core.create_namespaced_secret(namespace, secret)
        core.create_namespaced_pod(namespace, pod_with_objects(name))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))
    while time.monotonic() - started < deadline:
        pods = core.list_namespaced_pod(namespace).items
        ready = sum(is_ready(core.api_client.sanitize_for_serialization(p)) for p in pods)
        if ready == count:
            break
        time.sleep(1)
    return round(time.monotonic() - started, 1)


def _write(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"watches-{stamp}.json").write_text(json.dumps(result, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watches", description=__doc__)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--later", type=float, default=400.0, help="then measure again")
    args = parser.parse_args(argv)
    dk = dockerside.connect()
    tmp = Path(tempfile.mkdtemp(prefix="kubelet-sim-watches-"))
    fake = FakeProcess(tmp / "kubeconfig")
    port = int(urllib.parse.urlparse(fake.url).port or 0)
    core = client.CoreV1Api(api_client(str(fake.kubeconfig)))
    pods = ("--pods", str(args.pods + 10))  # room for all of them (the default is 110)
    log = tmp / "agent.log"
    agent = AgentProcess(NODE, str(fake.kubeconfig), tmp / "root", PAUSE_IMAGE, None, log, pods)
    namespace = ""
    measured = False
    try:
        agent.wait_running(180)
        time.sleep(3)
        idle = sample(agent, port)
        namespace = create_namespace(core, "bench-watches")
        all_ready = _create_until_ready(core, namespace, args.pods, args.deadline)
        time.sleep(5)
        loaded = sample(agent, port)
        time.sleep(args.later)  # the kubelet stops watches nobody read for 5 minutes
        later = sample(agent, port)
        measured = True
    finally:
        if namespace:
            delete_namespace(core, namespace, force_pods=True)
        agent.stop()
        fake.stop()
        if not measured:  # a failed run: clean up now
            dockerside.remove_node_containers(dk, NODE)
    result = {"pods": args.pods, "watches": 2 * args.pods, "all_ready_seconds": all_ready}
    result |= {"idle": idle, "loaded": loaded, "later": later}
    result["watch_failures"] = sum("watch failed" in w for w in agent.warnings)
    _write(result)
    dockerside.remove_node_containers(dk, NODE)  # minutes on a loaded engine: results first
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
