"""N virtual nodes in one kubelet-sim process against N processes: memory and idle CPU.

`python -m bench.multinode [--nodes 10] [--idle-seconds 20] [--real-api]`. Starts the fake API
server (or a real control plane with --real-api), then, one after the other: one process with
`--nodes N`, and N processes with one `--node-name` each. For each: time until every Node is
Ready, then RSS (sum of VmRSS) and CPU over an idle window. Results in bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.kube import api_client
from bench.processes import REPO, ApiServer, spawn_kubelet_sim, stop_process
from bench.procstat import cpu_seconds, memory_kib
from bench.scale import SETTLE, NodeReadiness

RESULTS = REPO / "bench" / "results"


def measure(
    label: str, procs: list[subprocess.Popen[bytes]], core: Any, names: list[str], idle: float
) -> dict[str, Any]:
    readiness = NodeReadiness(core, names, 120 + idle + 30)
    started = time.time()
    try:
        if not readiness.wait_all(procs, 120):
            raise RuntimeError(f"{label}: {len(readiness.ready)} of {len(names)} Nodes Ready")
    finally:
        readiness.close()
    ready_after = max(readiness.ready.values()) - started
    time.sleep(SETTLE)  # let registration settle before the idle window
    cpu_before = sum(cpu_seconds(p.pid) for p in procs)
    window = time.monotonic()
    time.sleep(idle)
    cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
    wall = time.monotonic() - window
    rss_kib = sum(memory_kib(p.pid).get("VmRSS", 0) for p in procs)
    return {
        "label": label,
        "processes": len(procs),
        "nodes": len(names),
        "all_ready_seconds": round(ready_after, 2),
        "rss_mib": round(rss_kib / 1024, 1),
        "idle_cpu_percent_of_a_core": round(100 * cpu / wall, 2),
        "idle_seconds": round(wall, 1),
    }


def _stop(procs: list[subprocess.Popen[bytes]], core: Any, names: list[str]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        stop_process(p, 20)
    for name in names:
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multinode", description=__doc__)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--real-api", action="store_true", help="a real control plane")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kubelet-sim-multinode-"))
    server = ApiServer(args.real_api, tmp)
    kubeconfig = server.kubeconfig
    core = client.CoreV1Api(api_client(kubeconfig))
    results = []
    try:
        one = [f"bench-one-{i}" for i in range(1, args.nodes + 1)]
        procs = [spawn_kubelet_sim(["--nodes", str(args.nodes), "--node-name-prefix", "bench-one-"],
                        kubeconfig, tmp / "one", tmp / "one.log")]  # fmt: skip
        try:
            results.append(measure("one process", procs, core, one, args.idle_seconds))
        finally:
            _stop(procs, core, one)
        many = [f"bench-many-{i}" for i in range(1, args.nodes + 1)]
        procs = [
            spawn_kubelet_sim(["--node-name", name], kubeconfig, tmp / "many", tmp / f"{name}.log")
            for name in many
        ]
        try:
            results.append(measure("one process per node", procs, core, many, args.idle_seconds))
        finally:
            _stop(procs, core, many)
    finally:
        server.stop()
    print(f"{args.nodes} nodes, {server.label} API server, idle window {args.idle_seconds:.0f} s")
    print(f"{'':<22} {'processes':>9} {'all Ready':>10} {'RSS':>10} {'idle CPU':>9}")
    for r in results:
        print(
            f"{r['label']:<22} {r['processes']:>9} {r['all_ready_seconds']:>9}s "
            f"{r['rss_mib']:>7} MiB {r['idle_cpu_percent_of_a_core']:>8}%"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"multinode-{stamp}.json"
    path.write_text(json.dumps({"api": server.label, "results": results}, indent=2))
    print(f"results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
