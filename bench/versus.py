"""`python -m bench.versus`: our node and the upstream kubelet, side by side, in one run.

One `kubelet-sim demo --nodes 1 --no-sample --reference-node` in a process of its own: a real
control plane, our node n1 (in the demo's process, as users run it, not in the bench's) and the
upstream kubelet of the API server's version on a containerd of its own (kubelet-ref,
kubeAPIQPS 50 / kubeAPIBurst 100), busybox and pause in both. The same pods (bench.kube's:
busybox, exits at once on SIGTERM, no token volume) are pinned by spec.nodeName to one node at
a time, every taint of both tolerated as `kubelet-sim compare` does: one pod created → Ready,
then deleted → gone, --rounds times (the nodes take turns going first); then --burst pods at
once → all Ready, all deleted at once → all gone. A pod watch opened before the first pod times
every pod's stages (bench/stages.py); our node's journal and Docker, the kubelet's containerd
events and log give each node's own steps. Last, with the demo stopped, Docker alone making
the same containers (bench/dockerfloor.py). A table on stdout, everything in
bench/results/versus-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerfloor, dockerside, stages
from bench.kube import BUSYBOX, PodWatch, api_client, create_namespace, delete_namespace, pod_body
from bench.report import machine
from bench.stages import GONE, READY, PodTimes
from kubelet_sim.assembly.build import reading_runtime
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.compare.scenarios import tolerations_for
from kubelet_sim.controlplane.cluster import stop_child
from kubelet_sim.demo.session import REFERENCE_NODE
from kubelet_sim.demo.state_dir import DemoState
from kubelet_sim.runtime.local_images import PAUSE_IMAGE, ensure_local_images
from kubelet_sim.tools import trace

REPO = Path(__file__).resolve().parent.parent
OURS, KUBELET = "ours", "kubelet"
SIDES = (OURS, KUBELET)
OUR_NODE = "n1"  # the demo's first node
APP = "app"  # bench.kube.pod_body's container
SETTLE = 1.0  # after Ready and after gone: let the node's trailing work end before the next
STOP_WAIT = 120.0  # the demo's clean exit (its nodes, the reference node, the control plane)
WATCH_SECONDS = 3600


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__)
    p.add_argument("--kube-version", default="1.34.9", help="the control plane's and kubelet's")
    p.add_argument("--rounds", type=int, default=5, help="one-pod runs per node (p50 of these)")
    p.add_argument("--burst", type=int, default=30, help="pods created at once on each node")
    p.add_argument("--warmup", type=int, default=1, help="pods per node first, not counted")
    p.add_argument("--sandbox-pool-size", default="0", help="our node's (the demo's default: 0)")
    p.add_argument("--timeout", type=float, default=120.0, help="each wait's limit, seconds")
    p.add_argument("--no-floor", action="store_true", help="skip Docker alone")
    return p.parse_args(argv)


class DemoCluster:
    """The demo in a process of its own: the way users start both nodes, and our node's work
    is not in the bench's process (its GIL, its threads). SIGINT ends it, as Ctrl-C does."""

    def __init__(self, kube_version: str, node_args: Sequence[str], timeout: float) -> None:
        self.kube_version, self.node_args, self.timeout = kube_version, node_args, timeout
        self.directory = Path(tempfile.mkdtemp(prefix="bench-versus-"))
        self.data = DemoState(self.directory).data
        self.output: list[str] = []
        self._up = threading.Event()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def kubeconfig(self) -> str:
        return str(DemoState(self.directory).kubeconfig)

    @property
    def our_root(self) -> Path:
        return self.data / "nodes" / OUR_NODE  # cli/demo.py's nodes root, nodeset.py's /<name>

    @property
    def reference(self) -> Path:
        return self.data / "reference-node"  # demo/session.py's

    def containerd_socket(self) -> str:
        config = tomllib.loads((self.reference / "containerd" / "config.toml").read_text())
        return str(config["grpc"]["address"])

    def kubelet_log(self) -> str:
        return (self.reference / "kubelet.log").read_text(errors="replace")

    def __enter__(self) -> DemoCluster:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet_sim", "demo", "--nodes", "1", "--no-sample",
             "--reference-node", "--state-dir", str(self.directory),
             "--kube-version", self.kube_version, "--image", BUSYBOX,
             "--pod-infra-image", PAUSE_IMAGE, *self.node_args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, name="demo-output", daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while not self._up.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                tail = "".join(self.output[-20:])
                why = f"exit {self.proc.poll()}"
                raise SystemExit(f"bench: the demo did not come up ({why}):\n{tail}")
        return self

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            print(f"  demo: {line}", end="", flush=True)
            if line.startswith("export KUBECONFIG="):
                self._up.set()

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None:
            stop_child(self.proc, STOP_WAIT, sig=signal.SIGINT)
        shutil.rmtree(self.directory, ignore_errors=True)


class ContainerdEvents:
    """`ctr events` of the reference node's containerd, read on a thread: one process for the
    run, and containerd's own stamps. Which pod a container is comes from its CRI labels
    (`ctr containers info`, asked once per container, outside the timed parts)."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.proc = subprocess.Popen(
            ["ctr", "--address", socket, "events"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._events: list[tuple[float, str, stages.Json]] = []
        self._lock = threading.Lock()
        self._known: dict[str, tuple[str, str, str]] = {}
        threading.Thread(target=self._read, name="ctr-events", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = stages.containerd_event(line)
            if event is not None:
                with self._lock:
                    self._events.append(event)

    def steps(self) -> dict[str, dict[str, float]]:
        """pod uid → step → epoch seconds, for every container created so far."""
        with self._lock:
            events = list(self._events)
        for _when, topic, payload in events:
            cid = str(payload.get("id") or "")
            if topic == "/containers/create" and cid not in self._known:
                self._known[cid] = self._labels(cid)
        return stages.containerd_steps(events, self._known)

    def _labels(self, cid: str) -> tuple[str, str, str]:
        shown = subprocess.run(
            ["ctr", "--address", self.socket, "-n", "k8s.io", "containers", "info", cid],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        labels = (json.loads(shown.stdout).get("Labels") or {}) if shown.returncode == 0 else {}
        return (
            str(labels.get("io.kubernetes.pod.uid", "")),
            str(labels.get("io.cri-containerd.kind", "")),
            str(labels.get("io.kubernetes.container.name", "")),
        )

    def close(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


class Versus:
    """The pods on both nodes, one node at a time, and what each shows of them."""

    def __init__(self, cluster: DemoCluster, args: argparse.Namespace) -> None:
        self.cluster, self.args = cluster, args
        self.notes: list[str] = []
        self.pods: list[PodTimes] = []
        self.bursts: dict[str, dict[str, float | None]] = {}
        self.loads: dict[str, float] = {}  # the 1-minute load average as each part began
        self.core: Any = client.CoreV1Api(api_client(cluster.kubeconfig))
        self.nodes = {OURS: OUR_NODE, KUBELET: REFERENCE_NODE}
        read = [self.core.read_node(name).to_dict() for name in self.nodes.values()]
        self.node_info = {
            side: node["status"]["node_info"] for side, node in zip(SIDES, read, strict=True)
        }
        self.version = client.VersionApi(self.core.api_client).get_code().git_version
        taints = [t for node in read for t in node["spec"].get("taints") or []]
        self.tolerations = tolerations_for(taints)
        self.containerd = ContainerdEvents(cluster.containerd_socket())
        self.engine = engine_for()
        self.runtime = reading_runtime(self.engine, OUR_NODE, cluster.our_root)
        self.dk = dockerside.connect()
        self.namespace = create_namespace(self.core, "versus")
        self.cond = threading.Condition()
        self.by_name: dict[str, PodTimes] = {}
        self.watch = PodWatch(self.core, self.namespace, self._on_event, timeout=WATCH_SECONDS)
        self.calls = ThreadPoolExecutor(max_workers=min(max(args.burst, 1), 32))

    def close(self) -> None:
        self.calls.shutdown(wait=False, cancel_futures=True)
        self.watch.close()
        if self.watch.error is not None:
            self.notes.append(f"the pod watch ended early: {self.watch.error!r}")
        self.containerd.close()
        delete_namespace(self.core, self.namespace, force_pods=True)
        self.engine.close()
        self.dk.close()

    def _on_event(self, kind: str, pod: stages.Json, _received: float) -> None:
        now = time.monotonic()  # the bench's own clock, as the create and delete calls'
        with self.cond:
            found = self.by_name.get(str((pod.get("metadata") or {}).get("name") or ""))
            if found is not None and found.sent:
                found.see(kind, pod, now)
                self.cond.notify_all()

    def run(self) -> None:
        self.loads["single pods"] = os.getloadavg()[0]
        for i in range(self.args.warmup):
            for side in SIDES:
                self._pods(side, "warm-up", 1, f"{i}")
        for r in range(self.args.rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                self._pods(side, "one", 1, f"{r}")
        self.loads["bursts"] = os.getloadavg()[0]
        for side in SIDES:
            pods = self._pods(side, "burst", self.args.burst, "")
            first, first_delete = min(p.sent for p in pods), min(p.delete_sent or 0 for p in pods)
            ready = [p.sent + p.start[READY] for p in pods if READY in p.start]
            gone = [(p.delete_sent or 0) + p.delete[GONE] for p in pods if GONE in p.delete]
            self.bursts[side] = {
                "all_ready_s": max(ready) - first if len(ready) == len(pods) else None,
                "all_gone_s": max(gone) - first_delete if len(gone) == len(pods) else None,
            }

    def _pods(self, side: str, batch: str, count: int, tag: str) -> list[PodTimes]:
        """`count` pods on `side`'s node at once: Ready, the node's steps read, deleted, gone."""
        names = [f"{side}-{batch}-{tag}{i:02d}" if count > 1 else f"{side}-{batch}-{tag}"
                 for i in range(count)]  # fmt: skip
        pods = [PodTimes(name, side, batch) for name in names]
        with self.cond:
            self.by_name.update((p.name, p) for p in pods)
        self.pods += pods
        list(self.calls.map(lambda p: self._create(p, self.nodes[side]), pods))
        self._wait(pods, "Ready", lambda p: READY in p.start, count)
        time.sleep(SETTLE)
        try:
            if side == OURS:
                self._our_steps(pods)
            else:
                self._kubelet_steps(pods)
        except Exception as exc:  # the node's own steps are extra: the run goes on without
            self.notes.append(f"{side}: node steps not read: {exc!r}")
        list(self.calls.map(self._delete, pods))
        self._wait(pods, "gone", lambda p: GONE in p.delete, count)
        if side == OURS:  # its containers go after the object: not into the next pods' time
            uids = {p.uid for p in pods}
            end = time.monotonic() + self.args.timeout
            while uids & dockerside.pod_uids_with_containers(self.dk, OUR_NODE):
                if time.monotonic() > end:
                    self.notes.append(f"{batch} on {side}: containers left after the limit")
                    break
                time.sleep(0.1)
        time.sleep(SETTLE)
        print(f"bench: {batch} {count} on {self.nodes[side]}: " + _brief(pods), flush=True)
        return pods

    def _create(self, pod: PodTimes, node: str) -> None:
        body = pod_body(pod.name, node)
        if self.tolerations:
            body["spec"]["tolerations"] = self.tolerations
        pod.sent_wall, pod.sent = time.time(), time.monotonic()
        self.core.create_namespaced_pod(self.namespace, body, _preload_content=False)
        with self.cond:
            pod.start.setdefault(stages.CREATED, time.monotonic() - pod.sent)

    def _delete(self, pod: PodTimes) -> None:
        pod.delete_sent = time.monotonic()
        self.core.delete_namespaced_pod(pod.name, self.namespace, _preload_content=False)
        with self.cond:
            pod.delete.setdefault(stages.DELETE_RETURNED, time.monotonic() - pod.delete_sent)

    def _wait(
        self, pods: list[PodTimes], what: str, done: Callable[[PodTimes], bool], count: int
    ) -> None:
        limit = self.args.timeout + 2 * count
        with self.cond:
            if not self.cond.wait_for(lambda: all(done(p) for p in pods), limit):
                late = sum(not done(p) for p in pods)
                self.notes.append(f"{pods[0].name}…: {late} of {count} not {what} in {limit:.0f}s")

    def _our_steps(self, pods: list[PodTimes]) -> None:
        """The trace's steps (`kubelet-sim trace`): the journal, read before the pod and its
        directory go, and Docker's containers."""
        containers = self.runtime.list_containers(OUR_NODE)
        for pod in pods:
            journal = self.runtime.files.read_journal(pod.uid)
            for step in trace.timeline(pod.last, [], journal, containers):
                if step.time is not None and step.precise:
                    pod.node.setdefault(step.step, step.time.timestamp() - pod.sent_wall)

    def _kubelet_steps(self, pods: list[PodTimes]) -> None:
        """containerd's events, and the kubelet's `SyncLoop ADD` (its watch delivered it)."""
        steps = self.containerd.steps()
        seen = stages.kubelet_seen(self.cluster.kubelet_log(), datetime.now().year)
        for pod in pods:
            for step, when in steps.get(pod.uid, {}).items():
                pod.node[step] = when - pod.sent_wall
            added = seen.get(f"{self.namespace}/{pod.name}")
            if added is not None:
                pod.node[stages.SEEN] = added - pod.sent_wall


def _brief(pods: list[PodTimes]) -> str:
    ready = [p.start[READY] for p in pods if READY in p.start]
    gone = [p.delete[GONE] for p in pods if GONE in p.delete]
    return (
        f"Ready {len(ready)}/{len(pods)}, last {max(ready, default=float('nan')):.2f} s after its"
        f" create; gone {len(gone)}/{len(pods)}, last {max(gone, default=float('nan')):.2f} s"
    )


# --- the table ------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _one(values: list[float]) -> tuple[str, float | None]:
    p50 = stages.median(values)
    if p50 is None:
        return "n/a", None
    return f"{p50:.2f} s ({min(values):.2f}-{max(values):.2f})", p50


Cells = dict[str, tuple[str, float | None]]  # side → (as shown, seconds)


def rows(
    pods: Sequence[PodTimes],
    bursts: dict[str, dict[str, float | None]],
    floor: dockerfloor.Floor | None,
    args: argparse.Namespace,
) -> list[dict[str, str]]:
    """The four measures, each for both nodes, their ratio and Docker alone's."""
    ones = [p for p in pods if p.batch == "one"]

    def p50(part: str, stage: str) -> Cells:
        of = {side: [getattr(p, part) for p in ones if p.side == side] for side in SIDES}
        return {side: _one([t[stage] for t in of[side] if stage in t]) for side in SIDES}

    def burst(key: str) -> Cells:
        return {side: (_s(v), v) for side in SIDES for v in [bursts.get(side, {}).get(key)]}

    f = floor
    return [
        _row(f"1 pod create → Ready, p50 of {args.rounds} (range)", p50("start", READY),
             f.one_start_p50 if f else None),
        _row(f"{args.burst} pods at once → all Ready", burst("all_ready_s"),
             f.many_start if f else None),
        _row(f"1 pod delete → gone, p50 of {args.rounds} (range)", p50("delete", GONE),
             f.one_stop_p50 if f else None),
        _row(f"{args.burst} pods deleted at once → all gone", burst("all_gone_s"),
             f.many_stop if f else None),
    ]  # fmt: skip


def _row(measure: str, cells: Cells, floor: float | None) -> dict[str, str]:
    ours, theirs = cells[OURS][1], cells[KUBELET][1]
    return {
        "measure": measure,
        OURS: cells[OURS][0],
        KUBELET: cells[KUBELET][0],
        "ours/kubelet": f"{ours / theirs:.2f}" if ours is not None and theirs else "n/a",
        "docker alone": _s(floor) if floor is not None else "",
    }


def render(table: list[dict[str, str]], stage_rows: dict[str, list[Any]]) -> str:
    keys = ["measure", OURS, KUBELET, "ours/kubelet", "docker alone"]
    widths = [max(len(k), *(len(r[k]) for r in table)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(r[k].ljust(w) for k, w in zip(keys, widths, strict=True)) for r in table]
    for batch, found in stage_rows.items():
        lines.append("")
        lines.append(f"where the time goes, {batch}: median seconds since the create call"
                     " (start, node) or the delete call (delete)")  # fmt: skip
        lines.append(f"{'part':<7}{'stage':<34}{OURS:>9}{KUBELET:>9}")
        for part, stage, by_side in found:
            cells = "".join(
                f"{'' if by_side[s] is None else f'{by_side[s]:.3f}':>9}" for s in SIDES
            )
            lines.append(f"{part:<7}{stage:<34}{cells}")
    return "\n".join(lines)


def _commit() -> str:
    shown = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return shown.stdout.strip()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    ensure_local_images(dockerside.connect())  # the demo would look for them in a registry
    began = datetime.now(UTC)
    document: dict[str, Any] = {
        "created": began.strftime("%Y%m%dT%H%M%SZ"),
        "commit": _commit(),
        "machine_at_start": machine(),
        "args": vars(args),
    }
    node_args = ["--sandbox-pool-size", str(args.sandbox_pool_size)]
    with DemoCluster(args.kube_version, node_args, args.timeout) as cluster:
        versus = Versus(cluster, args)
        try:
            versus.run()
        except Exception as exc:  # what was measured before still makes its rows
            versus.notes.append(f"the run stopped early: {exc!r}")
        finally:
            versus.close()
    floor = None
    if not args.no_floor:
        print("bench: Docker alone, the same containers ...", flush=True)
        dk = dockerside.connect()
        try:
            floor = dockerfloor.measure(dk, PAUSE_IMAGE, repeat=args.rounds, size=args.burst)
        finally:
            dk.close()
    table = rows(versus.pods, versus.bursts, floor, args)
    measured = [p for p in versus.pods if p.batch != "warm-up"]
    stage_rows = {
        batch: stages.stage_medians([p for p in measured if p.batch == batch], SIDES, APP)
        for batch in ("one", "burst")
    }
    versus.loads["end"] = os.getloadavg()[0]
    info = versus.node_info
    print(
        f"API server {versus.version}; ours {info[OURS]['kubelet_version']} on"
        f" {info[OURS]['container_runtime_version']}; kubelet {info[KUBELET]['kubelet_version']}"
        f" on {info[KUBELET]['container_runtime_version']}; at {document['commit']}; load"
        " average (1 min) " + ", ".join(f"{k} {v:.1f}" for k, v in versus.loads.items())
    )
    print(render(table, {"one pod at a time": stage_rows["one"],
                         f"{args.burst} at once": stage_rows["burst"]}))  # fmt: skip
    for note in versus.notes:
        print(f"note: {note}")
    document.update(
        {
            "kube_version": versus.version,
            "nodes": versus.node_info,
            "namespace": versus.namespace,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "load_average_1min": versus.loads,
            "rows": table,
            "bursts": versus.bursts,
            "stages": {
                batch: [{"part": p, "stage": s, **v} for p, s, v in found]
                for batch, found in stage_rows.items()
            },
            "floor": asdict(floor) if floor else None,
            "notes": versus.notes,
            "pods": [p.as_json() for p in versus.pods],
        }
    )
    out = REPO / "bench" / "results" / f"versus-{document['created']}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(document, indent=1, default=str))
    print(f"bench: results in {out}")


if __name__ == "__main__":
    main()
