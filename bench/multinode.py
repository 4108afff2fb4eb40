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
from bench.processes import REPO, ApiServer
from bench.procstat import cpu_seconds, memory_kib
from kubelet_sim.runtime.local_images import PAUSE_IMAGE

RESULTS = REPO / "bench" / "results"


def _spawn(args: list[str], kubeconfig: str, root: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kubelet_sim", *args, "--kubeconfig", kubeconfig,
         "--pod-infra-image", PAUSE_IMAGE, "--root-dir", str(root), "--log-format", "json",
         "--port", "0"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip


def _all_ready(core: Any, names: list[str]) -> bool:
    ready = {
        n.metadata.name
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    }
    return set(names) <= ready


def measure(
    label: str, procs: list[subprocess.Popen[bytes]], core: Any, names: list[str], idle: float
) -> dict[str, Any]:
    started = time.monotonic()
    while not _all_ready(core, names):
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"{label}: a kubelet-sim process exited")
        if time.monotonic() - started > 120:
            raise RuntimeError(f"{label}: not all {len(names)} Nodes Ready in 120 s")
        time.sleep(0.2)
    ready_after = time.monotonic() - started
    time.sleep(3)  # let registration settle before the idle window
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
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
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
        procs = [_spawn(["--nodes", str(args.nodes), "--node-name-prefix", "bench-one-"],
                        kubeconfig, tmp / "one", tmp / "one.log")]  # fmt: skip
        try:
            results.append(measure("one process", procs, core, one, args.idle_seconds))
        finally:
            _stop(procs, core, one)
        many = [f"bench-many-{i}" for i in range(1, args.nodes + 1)]
        procs = [
            _spawn(["--node-name", name], kubeconfig, tmp / "many", tmp / f"{name}.log")
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
