"""`python -m bench.startup`: pod start-up and tear-down latency of kubelet-sim, and its cost.

Against the in-repo fake API server (started here, in a subprocess) or any cluster given by
--kubeconfig, with kubelet-sim in its own process. See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerside, measure, report
from bench.dockerproxy import DockerProxy
from bench.kube import BUSYBOX, api_client
from bench.processes import AGENT_USER_AGENT_PREFIX, AgentProcess, FakeProcess, real_control_plane
from kubelet_sim.controlplane.cluster import ControlPlane

PAUSE = "kubelet-sim.local/pause:test"
RESULTS = Path(__file__).resolve().parent / "results"
GRACE_AFTER_DEADLINE = 90.0  # cleanup time before the watchdog ends the process regardless


def add_server_options(p: argparse.ArgumentParser) -> None:
    """The options that say which API server and which node (bench.startup and bench.perf)."""
    p.add_argument("--kubeconfig", help="a real cluster (default: start the fake API server)")
    p.add_argument(
        "--real-api",
        action="store_true",
        help="start a real control plane (the package's, v1.34: KUBEBUILDER_ASSETS or "
        "KUBELET_SIM_KUBE_BIN) and run the agent with node credentials",
    )
    p.add_argument(
        "--agent-kubeconfig", help="credentials for the agent (default: the same as --kubeconfig)"
    )
    p.add_argument("--node-name", default="bench-node", help="node kubelet-sim runs as")
    p.add_argument(
        "--no-start-agent",
        action="store_true",
        help="use an already-running agent called --node-name (no CPU/RSS/Docker counts)",
    )
    p.add_argument("--compare-node", help="run the same workload on this node too (ratios)")
    p.add_argument(
        "--compare-user-agent",
        default="kubelet/",
        help="user-agent prefix of the compare node's requests (fake only)",
    )
    p.add_argument("--pause-image", default=PAUSE)
    p.add_argument(
        "--sandbox-pool-size",
        default="auto",
        help="the agent's warm sandbox pool (its --sandbox-pool-size: auto, the agent's"
        " default, or a fixed size; 0: none)",
    )
    p.add_argument("--results-dir", type=Path, default=RESULTS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    add_server_options(p)
    p.add_argument("--sizes", default="1,10,30,100", help="pods created at once, per run")
    p.add_argument(
        "--idle-seconds", type=float, default=20.0, help="idle window at the largest size"
    )
    p.add_argument("--deadline", type=float, default=900.0, help="global limit in seconds")
    p.add_argument(
        "--no-docker-proxy",
        action="store_true",
        help="talk to Docker directly (no Docker call counts; removes the proxy's latency)",
    )
    args = p.parse_args(argv)
    args.size_list = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


class Owned:
    """What the bench started, so cleanup (and the watchdog) can stop exactly that."""

    def __init__(self) -> None:
        self.fake: FakeProcess | None = None
        self.agent: AgentProcess | None = None
        self.proxy: DockerProxy | None = None
        self.tmp: Path | None = None
        self.env: ControlPlane | None = None
        self.extra: list[subprocess.Popen[bytes]] = []  # other processes (bench.scale's)

    def stop_processes(self) -> None:
        for stop in (
            self.agent.stop if self.agent else None,
            self.proxy.stop if self.proxy else None,
            self.fake.stop if self.fake else None,
            self.env.stop if self.env else None,
        ):
            if stop is not None:
                with contextlib.suppress(Exception):
                    stop()


def watchdog(owned: Owned, seconds: float) -> None:
    """Make sure the bench ends by itself even if a wait or the cleanup hangs."""

    def fire() -> None:
        print("bench: global deadline passed; stopping", file=sys.stderr, flush=True)
        for proc in (
            owned.agent.proc if owned.agent else None,
            owned.fake.proc if owned.fake else None,
            *owned.extra,
        ):
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGKILL)
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def begin(args: argparse.Namespace, tmp_prefix: str) -> tuple[measure.Deadline, Owned, Any] | None:
    """A bench run's start: its deadline, what it will own (with the watchdog on it), Docker,
    and a temporary directory; None (said why) when an image the pods need is missing."""
    deadline = measure.Deadline(args.deadline)
    owned = Owned()
    watchdog(owned, args.deadline + GRACE_AFTER_DEADLINE)
    dk = dockerside.connect()
    for image in (BUSYBOX, args.pause_image):
        if not dk.api.images(name=image):
            print(f"bench: image {image} missing (see kubelet_sim.runtime.local_images)")
            return None
    owned.tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix))
    return deadline, owned, dk


def print_warnings(agent: AgentProcess) -> None:
    """The first of the warnings the agent logged, if any."""
    if agent.warnings:
        print(f"bench: the agent logged {len(agent.warnings)} warning(s), first ones:")
        for line in agent.warnings[:5]:
            print("  " + line)


def start_api_and_agent(args: argparse.Namespace, owned: Owned, deadline: measure.Deadline) -> str:
    """The API server asked for (a real one, the fake, or the given kubeconfig's) and the agent
    unless told not to; the kubeconfig to measure with."""
    kubeconfig, agent_kubeconfig = args.kubeconfig, args.agent_kubeconfig
    if args.real_api:
        owned.env = real_control_plane()
        kubeconfig = str(owned.env.admin_kubeconfig)
        agent_kubeconfig = str(owned.env.node_kubeconfig(args.node_name))
        print(f"bench: real API server at {owned.env.url} ({', '.join(owned.env.components)})")
    elif kubeconfig is None:
        assert owned.tmp is not None
        owned.fake = FakeProcess(owned.tmp / "kubeconfig")
        kubeconfig = str(owned.fake.kubeconfig)
        print(f"bench: fake API server at {owned.fake.url}")
    if not args.no_start_agent:
        assert owned.tmp is not None
        if not args.no_docker_proxy:
            owned.proxy = DockerProxy(owned.tmp / "docker.sock").start()
        owned.agent = AgentProcess(
            args.node_name,
            agent_kubeconfig or kubeconfig,
            owned.tmp / "root",
            args.pause_image,
            owned.proxy.url if owned.proxy else None,
            owned.tmp / "agent.log",
            ("--sandbox-pool-size", args.sandbox_pool_size),
        )
        owned.agent.wait_running(deadline.left(60))
        print(f"bench: kubelet-sim running as {args.node_name} (pid {owned.agent.pid})")
    return str(kubeconfig)


def _run_sizes(
    args: argparse.Namespace,
    ctx: measure.Context,
    targets: list[measure.Target],
    deadline: measure.Deadline,
) -> list[measure.RunResult]:
    """Each pod count on each node, until the deadline; the largest also idles."""
    results: list[measure.RunResult] = []
    largest = max(args.size_list)
    for target in targets:
        for size in args.size_list:
            if deadline.passed:
                print("bench: deadline passed; skipping the remaining runs")
                return results
            idle = args.idle_seconds if size == largest and target.agent else 0.0
            print(f"bench: {size} pod(s) on {target.node} ...", flush=True)
            run = measure.run(ctx, target, size, idle)
            results.append(run)
            print(report.render([run]), flush=True)
            time.sleep(2)  # let the node settle between runs
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    begun = begin(args, "kubelet-sim-bench-")
    if begun is None:
        return 2
    deadline, owned, dk = begun
    try:
        kubeconfig = start_api_and_agent(args, owned, deadline)
        api = api_client(kubeconfig)
        ctx = measure.Context(
            core=client.CoreV1Api(api),
            dk=dk,
            fake=owned.fake,
            proxy=owned.proxy,
            deadline=deadline,
            real_cluster=owned.fake is None,
        )
        if ctx.real_cluster:
            print("bench: API requests per user agent need the apiserver's audit log: n/a here")
        targets = [measure.Target(args.node_name, owned.agent, AGENT_USER_AGENT_PREFIX)]
        if args.compare_node:
            targets.append(measure.Target(args.compare_node, None, args.compare_user_agent))
        results = _run_sizes(args, ctx, targets, deadline)
        if results:
            extra: dict[str, Any] = {"docker": dk.version().get("Version")}
            options = {k: v for k, v in vars(args).items() if k != "results_dir"}
            path = report.write_json(results, options, extra, args.results_dir)
            print(f"\nbench: results in {path}")
            if args.compare_node:
                print(report.render_ratios(results, args.node_name, args.compare_node))
        if owned.agent:
            print_warnings(owned.agent)
        return 0 if results else 1
    finally:
        owned.stop_processes()
        removed = dockerside.remove_node_containers(dk, args.node_name)
        if removed:
            print(f"bench: removed {removed} leftover container(s) of {args.node_name}")
        dk.close()
        if owned.tmp is not None:
            shutil.rmtree(owned.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
