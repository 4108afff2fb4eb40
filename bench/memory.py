"""`python -m bench.memory`: where the agent's memory goes with N pods running.

Two agents on the fake API server, one after the other, each given `--pods` pods and waited
for until all are Ready: the first untraced, for its RSS (VmRSS, VmHWM); the second under
tracemalloc, asked for a snapshot by SIGUSR2 once its pods run. The hook lives here, not in the
product: a `sitecustomize.py` in a directory put first on the agent's PYTHONPATH starts
tracemalloc before any import and installs the SIGUSR2 handler. Allocations still held are
grouped three ways: by the library that holds them (the outermost third-party frame, else the
first kubelet_sim module, else the standard library file), by the allocating file, and by
line. Tracing costs memory of its own: the RSS to compare is the untraced one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerside
from bench.kube import api_client, create_namespace, delete_namespace, is_ready, pod_body
from bench.processes import AgentProcess, FakeProcess
from bench.procstat import memory_kib

PAUSE = "kubelet-sim.local/pause:test"
FRAMES = 30

SITECUSTOMIZE = '''
import json, os, signal, sys, tracemalloc

tracemalloc.start(int(os.environ.get("BENCH_TRACEMALLOC_FRAMES", "64")))


def _owner(frames):
    """The library holding it: the outermost third-party frame, else kubelet_sim, else stdlib."""
    for frame in frames:  # oldest first
        name = frame.filename
        if "site-packages/" in name or "dist-packages/" in name:
            rest = name.split("-packages/", 1)[1]
            return rest.split("/", 1)[0].removesuffix(".py")
    for frame in reversed(frames):
        if "/kubelet_sim/" in frame.filename:
            return "kubelet_sim/" + frame.filename.split("/kubelet_sim/", 1)[1]
    return "stdlib:" + frames[-1].filename.rsplit("/", 1)[-1]


def _dump(_signum, _frame):
    snapshot = tracemalloc.take_snapshot()
    owners, files, lines = {}, {}, {}
    for stat in snapshot.statistics("traceback"):
        frames = list(stat.traceback)
        owner = _owner(frames)
        owners[owner] = owners.get(owner, 0) + stat.size
        site = frames[-1]
        files[site.filename] = files.get(site.filename, 0) + stat.size
        key = f"{site.filename}:{site.lineno}"
        lines[key] = lines.get(key, 0) + stat.size
    top = lambda d: sorted(d.items(), key=lambda kv: -kv[1])[:40]
    with open(os.environ["BENCH_TRACEMALLOC_OUT"] + ".tmp", "w") as out:
        json.dump({"traced": tracemalloc.get_traced_memory()[0], "modules": len(sys.modules),
                   "owners": top(owners), "files": top(files), "lines": top(lines)}, out)
    os.replace(os.environ["BENCH_TRACEMALLOC_OUT"] + ".tmp", os.environ["BENCH_TRACEMALLOC_OUT"])


signal.signal(signal.SIGUSR2, _dump)
'''


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--pods", type=int, default=30, help="pods running when measured")
    p.add_argument("--node-name", default="bench-memory")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after all are Ready")
    p.add_argument("--top", type=int, default=15, help="rows per table")
    p.add_argument("--no-trace", action="store_true", help="only the untraced RSS")
    p.add_argument("--output", type=Path, help="write the JSON here too")
    return p.parse_args(argv)


def _run_agent(
    args: argparse.Namespace, tmp: Path, kubeconfig: str, traced: bool
) -> dict[str, Any]:
    """One agent with `--pods` pods Ready; its RSS and, if traced, its allocation tables."""
    name = "traced" if traced else "plain"
    saved = dict(os.environ)
    out = tmp / f"{name}.json"
    if traced:
        hook = tmp / "hook"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])
        os.environ["BENCH_TRACEMALLOC_OUT"] = str(out)
        os.environ["BENCH_TRACEMALLOC_FRAMES"] = str(FRAMES)
    try:
        agent = AgentProcess(
            args.node_name, kubeconfig, tmp / f"root-{name}", PAUSE, None, tmp / f"{name}.log"
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    core: Any = client.CoreV1Api(api_client(kubeconfig))
    result: dict[str, Any] = {"traced": traced}
    try:
        agent.wait_running(600 if traced else 180)
        ns = create_namespace(core, f"mem-{name}")
        for i in range(args.pods):
            core.create_namespaced_pod(ns, pod_body(f"p{i}", args.node_name))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pods = core.list_namespaced_pod(ns, _preload_content=False)
            items = json.loads(pods.data)["items"]
            if len(items) == args.pods and all(is_ready(p) for p in items):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("pods not Ready within 300 s")
        time.sleep(args.settle)
        result["memory_kib"] = memory_kib(agent.pid)
        if traced:
            os.kill(agent.pid, signal.SIGUSR2)
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            result.update(json.loads(out.read_text()))
        delete_namespace(core, ns, force_pods=False)
        gone = time.monotonic() + 120
        while core.list_namespaced_pod(ns).items and time.monotonic() < gone:
            time.sleep(0.5)
    finally:
        agent.stop()
    return result


def _render(result: dict[str, Any], top: int) -> str:
    mem = result["memory_kib"]
    lines = [
        f"agent {'under tracemalloc' if result['traced'] else 'untraced'}: "
        f"VmRSS {mem.get('VmRSS', 0) / 1024:.1f} MiB, VmHWM {mem.get('VmHWM', 0) / 1024:.1f} MiB"
    ]
    if result["traced"]:
        lines.append(
            f"traced Python allocations held: {result['traced'] / 2**20:.1f} MiB, "
            f"{result['modules']} modules"
        )
        for table in ("owners", "files", "lines"):
            lines.append(f"-- by {table[:-1]}")
            for key, size in result[table][:top]:
                lines.append(f"{size / 2**20:8.2f} MiB  {key}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kubelet-sim-memory-"))
    fake = FakeProcess(tmp / "kubeconfig")
    dk = dockerside.connect()
    results = []
    try:
        for traced in (False,) if args.no_trace else (False, True):
            result = _run_agent(args, tmp, str(fake.kubeconfig), traced)
            print(_render(result, args.top), flush=True)
            results.append(result)
        if args.output:
            args.output.write_text(json.dumps(results, indent=1))
    finally:
        fake.stop()
        dockerside.remove_node_containers(dk, args.node_name)
        dk.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
