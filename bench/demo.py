"""`python -m bench.demo`: how fast `kubelet-sim demo` gets a newcomer to a working cluster.

Measures, from the command's start: the API server ready (the demo's own line), "kubectl
works" (the printed kubeconfig answers `GET /api/v1/nodes` with N Ready nodes), the sample
Deployment all Ready (read from the API), the demo process's RSS then (without the
control-plane binaries, which are its children), and the time from SIGINT to a clean exit.
Goals (issue 19, 2-core machine): API server ≤ 8 s, sample (3 pods) ≤ 15 s, RSS ≤ 120 MB.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE, PAUSE_IMAGE

GOALS = {"api_server_ready_s": 8.0, "sample_ready_s": 15.0, "rss_mb": 120.0}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _ready(obj: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in obj.status.conditions or [])


def run_once(nodes: int, replicas: int, deadline: float) -> dict[str, float]:
    state = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    args = ["--state-dir", str(state), "--nodes", str(nodes), "--replicas", str(replicas)]
    args += ["--image", BUSYBOX_IMAGE, "--pod-infra-image", PAUSE_IMAGE]
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubelet_sim", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: dict[str, float] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "kube-apiserver ready" in line:
                seen.setdefault("api_server_ready_s", time.monotonic() - began)
            if line.startswith("export KUBECONFIG="):
                seen.setdefault("kubeconfig_printed_s", time.monotonic() - began)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    result: dict[str, float] = {}
    try:
        while "kubeconfig_printed_s" not in seen:
            if proc.poll() is not None or time.monotonic() - began > deadline:
                raise SystemExit(f"bench: the demo did not come up (exit {proc.poll()})")
            time.sleep(0.05)
        api = client.CoreV1Api(config.new_client_from_config(str(state / "kubeconfig")))
        while True:
            ready = [n for n in api.list_node().items if _ready(n)]
            if len(ready) == nodes:
                result["kubectl_works_s"] = time.monotonic() - began
                break
            time.sleep(0.05)
        while time.monotonic() - began < deadline:
            pods = api.list_namespaced_pod("default", label_selector="app=hello").items
            if len(pods) == replicas and all(_ready(p) for p in pods):
                result["sample_ready_s"] = time.monotonic() - began
                break
            time.sleep(0.05)
        result["rss_mb"] = _rss_mb(proc.pid)
        stopping = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        result["exit_after_sigint_s"] = time.monotonic() - stopping
    finally:
        if proc.poll() is None:
            proc.kill()
    result["api_server_ready_s"] = seen.get("api_server_ready_s", float("nan"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=120.0)
    args = parser.parse_args()
    runs = [run_once(args.nodes, args.replicas, args.deadline) for _ in range(args.runs)]
    keys = ["api_server_ready_s", "kubectl_works_s", "sample_ready_s", "rss_mb"]
    keys.append("exit_after_sigint_s")
    print(f"{'measure':<22} " + " ".join(f"run {i + 1:>2}" for i in range(len(runs))) + "   goal")
    for key in keys:
        values = " ".join(f"{r.get(key, float('nan')):6.1f}" for r in runs)
        goal = f"≤ {GOALS[key]:g}" if key in GOALS else ""
        print(f"{key:<22} {values}   {goal}")
    out = Path(__file__).parent / "results" / f"demo-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    print(f"bench: results in {out}")


if __name__ == "__main__":
    main()
