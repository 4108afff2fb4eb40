"""`python -m bench.perf`: issue 22's table from one run, each measure beside its goal.

The pod rows run bench.startup's workload (bench/measure.py) on one kubelet-sim node: one pod
at a time (--repeat runs), 30 pods at once (and on --compare-node), 100 pods with an idle
window that includes the 60 s resync. The scale rows run `kubelet-sim --nodes N` for each N of
--nodes (bench/scale.py), and pods spread over the largest N. The fake API server by default;
--real-api a real control plane. Results in bench/results/perf-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import dockerfloor, dockerside, measure, report, scale, startup
from bench.kube import api_client
from bench.measure import RunResult
from bench.processes import AGENT_USER_AGENT_PREFIX
from bench.report import percentile
from kubelet_sim.pod.sandbox_pool import AUTO_CAP, RECENT_SECONDS

SECTIONS = ("pods", "floor", "scale")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__)
    startup.add_server_options(p)
    p.add_argument(
        "--sections",
        default="pods,floor,scale",
        help="pods (the agent), floor (Docker alone, bench/dockerfloor.py), scale",
    )
    p.add_argument("--repeat", type=int, default=10, help="one-pod runs (p50 of these)")
    p.add_argument(
        "--rss-seconds", type=float, default=5.0, help="30 pods Ready: wait before reading RSS"
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=65.0,
        help="idle window with 100 pods (65 s includes the 60 s resync; less: without it)",
    )
    p.add_argument("--nodes", default="10,100", help="scale runs: nodes in one process, each")
    p.add_argument("--scale-idle-seconds", type=float, default=60.0)
    p.add_argument(
        "--scale-baseline-seconds",
        type=float,
        default=20.0,
        help="real server: window without the nodes, whose request rate is subtracted",
    )
    p.add_argument("--scale-ready-timeout", type=float, default=300.0)
    p.add_argument("--scale-pods", type=int, default=100, help="pods over the largest N; 0: none")
    p.add_argument(
        "--scale-agent-args",
        default="",
        help="more options for the scale runs' kubelet-sim, e.g. '--node-lease-duration-seconds"
        " 120' (lease lateness is then judged against its renew interval, a quarter of it)",
    )
    p.add_argument("--deadline", type=float, default=2400.0, help="global limit in seconds")
    args = p.parse_args(argv)
    args.node_counts = [int(s) for s in args.nodes.split(",") if s.strip()]
    args.scale_agent_arg_list = shlex.split(args.scale_agent_args)
    args.section_list = [s for s in args.sections.split(",") if s.strip()]
    unknown = set(args.section_list) - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    args.no_docker_proxy = True  # latency: the counting proxy costs time on 2 cores
    if "pods" not in args.section_list:
        args.no_start_agent = True
    return args


@dataclass
class PodRuns:
    ones: list[RunResult] = field(default_factory=list)
    thirty: RunResult | None = None
    compare: RunResult | None = None
    hundred: RunResult | None = None
    pool_after_burst: dockerside.PoolCost | None = None  # the 30 pods deleted
    pool_after_idle: dockerside.PoolCost | None = None  # the 100 pods' idle window over


@dataclass
class Row:
    measure: str
    today: str
    goal: str
    met: bool | None  # None: not run, or not measurable here
    floor: str = ""  # Docker alone doing the same containers (bench/dockerfloor.py), if run


def _one(ctx: measure.Context, target: measure.Target, size: int, idle: float) -> RunResult:
    run = measure.run(ctx, target, size, idle)
    s = report.summarize(run)
    ready = s["intervals"]["create → Ready on watch"]
    gone = s["intervals"]["delete → object gone (watch)"]
    print(
        f"bench: {size} pod(s) on {target.node}: create → Ready p50 "
        f"{_seconds(ready['p50'] if ready else None)}, all Ready "
        f"{_seconds(run.all_ready_seconds)}; delete → gone p50 "
        f"{_seconds(gone['p50'] if gone else None)}, all gone "
        f"{_seconds(run.all_gone_seconds)}" + "".join(f"; {n}" for n in run.notes),
        flush=True,
    )
    time.sleep(min(1.0, ctx.deadline.left()))  # let the node settle between runs
    return run


def run_pods(
    args: argparse.Namespace, ctx: measure.Context, owned: startup.Owned, runs: PodRuns
) -> None:
    """Fills `runs` as it goes: what was measured before a failure still makes its rows."""
    ours = measure.Target(args.node_name, owned.agent, AGENT_USER_AGENT_PREFIX)
    for _ in range(args.repeat):
        if ctx.deadline.passed:
            return
        runs.ones.append(_one(ctx, ours, 1, 0.0))
    if not ctx.deadline.passed:
        runs.thirty = _one(ctx, ours, 30, args.rss_seconds)
        runs.pool_after_burst = dockerside.pool_cost(ctx.dk, args.node_name)
    if args.compare_node and not ctx.deadline.passed:
        other = measure.Target(args.compare_node, None, args.compare_user_agent)
        runs.compare = _one(ctx, other, 30, 0.0)
    if not ctx.deadline.passed:
        print(f"bench: 100 pods, then {args.idle_seconds:.0f} s idle ...", flush=True)
        runs.hundred = _one(ctx, ours, 100, args.idle_seconds)
        runs.pool_after_idle = dockerside.pool_cost(ctx.dk, args.node_name)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _below(value: float | None, goal: float) -> bool | None:
    return None if value is None else value <= goal


def pod_rows(
    runs: PodRuns | None, args: argparse.Namespace, floor: dockerfloor.Floor | None = None
) -> list[Row]:
    """The issue's pod rows; `not run` where the run did not get there. With `floor`, the
    Docker-bound rows show beside them what Docker alone took for the same containers."""
    if runs is None:
        runs = PodRuns()
    one_start = _seconds(floor.one_start_p50) if floor else ""
    one_stop = _seconds(floor.one_stop_p50) if floor else ""
    many_start = _seconds(floor.many_start) if floor else ""
    many_stop = _seconds(floor.many_stop) if floor else ""
    rows = []
    created = [p.ready - p.created for r in runs.ones for p in r.pods if p.ready and p.created]
    p50 = percentile(created, 50) if created else None
    spread = f" ({min(created):.2f} to {max(created):.2f})" if created else ""
    rows.append(
        Row(
            f"1 pod create → Ready (p50 of {args.repeat})",
            f"{_seconds(p50)}{spread}, n={len(created)}" if runs.ones else "not run",
            "≤ 0.25 s",
            _below(p50, 0.25) if len(created) == args.repeat else None,
            one_start,
        )
    )
    thirty = runs.thirty.all_ready_seconds if runs.thirty else None
    theirs = runs.compare.all_ready_seconds if runs.compare else None
    if args.compare_node:
        ratio = thirty / theirs if thirty and theirs else None
        rows.append(
            Row(
                f"30 pods at once, all Ready, vs {args.compare_node}",
                f"{_seconds(thirty)} vs {_seconds(theirs)}"
                + (f" = {ratio:.2f} times" if ratio is not None else ""),
                "≤ 0.2 times",
                _below(ratio, 0.2),
                many_start,
            )
        )
    else:
        rows.append(
            Row(
                "30 pods at once, all Ready (no kubelet to compare)",
                _seconds(thirty) if runs.thirty else "not run",
                "≤ 3.5 s",
                _below(thirty, 3.5),
                many_start,
            )
        )
    deleted = [
        p.object_gone - p.deleted for r in runs.ones for p in r.pods if p.object_gone and p.deleted
    ]
    d50 = percentile(deleted, 50) if deleted else None
    rows.append(
        Row(
            "delete 1 pod (exits on SIGTERM) → object gone, p50",
            f"{_seconds(d50)}, n={len(deleted)}" if runs.ones else "not run",
            "≤ 0.5 s",
            _below(d50, 0.5) if len(deleted) == args.repeat else None,
            one_stop,
        )
    )
    gone = runs.thirty.all_gone_seconds if runs.thirty else None
    rows.append(
        Row("30 pods deleted → all gone", _seconds(gone) if runs.thirty else "not run",
            "≤ 1.5 s", _below(gone, 1.5), many_stop)
    )  # fmt: skip
    usage = runs.thirty.idle.usage if runs.thirty and runs.thirty.idle else None
    rows.append(
        Row(
            "agent RSS with 30 running pods",
            f"{usage.rss_mib:.1f} MiB (peak {usage.peak_rss_mib:.1f})" if usage else "not run",
            "≤ 80 MiB",
            _below(usage.rss_mib if usage else None, 80.0),
        )
    )
    idle = runs.hundred.idle if runs.hundred else None
    cpu = idle.usage.cpu_percent if idle and idle.usage else None
    window = (idle.end - idle.start) if idle else 0.0
    rows.append(
        Row(
            "agent CPU with 100 idle pods (incl. resyncs)",
            f"{cpu:.2f} % over {window:.0f} s"
            + ("" if window >= 65 else " (no resync in the window)")
            if cpu is not None
            else "not run",
            "≤ 0.5 % of a core",
            _below(cpu, 0.5) if window >= 65 else None,  # the goal includes the resyncs
        )
    )
    rows.extend(pool_rows(runs, args))
    return rows


def _pool_text(cost: dockerside.PoolCost | None) -> str:
    if cost is None:
        return "not run"
    return f"{cost.sandboxes} pause container(s), {cost.memory_mib:.1f} MiB"


def pool_rows(runs: PodRuns, args: argparse.Namespace) -> list[Row]:
    """The warm sandbox pool's cost: what it holds idle after a burst, and after a quiet
    minute (the automatic size gives everything back after RECENT_SECONDS without a start)."""
    auto = str(args.sandbox_pool_size) == "auto"
    burst, idle = runs.pool_after_burst, runs.pool_after_idle
    return [
        Row(
            "sandbox pool held, just after 30 pods deleted",
            _pool_text(burst),
            f"≤ {AUTO_CAP}" if auto else "its fixed size",
            burst.sandboxes <= AUTO_CAP if auto and burst else None,
        ),
        Row(
            f"sandbox pool held, after {args.idle_seconds:.0f} s without a start",
            _pool_text(idle),
            "none" if auto else "its fixed size",
            idle.sandboxes == 0 if auto and idle and args.idle_seconds > RECENT_SECONDS else None,
        ),
    ]


def _lease_text(r: scale.ScaleResult) -> str:
    lat = r.lease_lateness or {}
    if not lat.get("intervals"):
        return "no renewals seen"
    late = lat["late"] + lat["overdue_at_end"] + lat["never_renewed"]
    every = lat.get("interval", 10.0)
    return f"lease lateness p99 {lat['p99']:.2f} s, {late} late (renewed every {every:g} s)"


def scale_rows(results: list[scale.ScaleResult], args: argparse.Namespace) -> list[Row]:
    """Virtual nodes in one process, and pods spread over the largest N."""
    done = [r for r in results if r.all_ready_seconds is not None]
    failed = [r for r in results if r.all_ready_seconds is None]
    text = "; ".join(
        [
            f"{r.nodes}: {r.rss_mib} MiB, {r.cpu_percent_of_a_core} % CPU, {_lease_text(r)}"
            for r in done
        ]
        + [f"{r.nodes}: {', '.join(r.notes)}" for r in failed]
    )
    best = max(done, key=lambda r: r.nodes, default=None)
    met: bool | None = False if failed else None
    if best is not None:
        lat = best.lease_lateness or {}
        on_time = not (lat.get("late") or lat.get("overdue_at_end") or lat.get("never_renewed"))
        met = (
            best.nodes >= 1000
            and not failed
            and (best.cpu_percent_of_a_core or 0) <= 100
            and (best.rss_mib or 0) <= 500
            and on_time
        )
    rows = [
        Row(
            "virtual nodes in one process (no pods), all Ready, Leases within 10 ± 1 s"
            " (a longer lease: its interval ± 10 %)",
            text or "not run",
            "1,000 nodes, ≤ 1 core average, ≤ 500 MiB",
            met,
        )
    ]
    spread = best.pods if best is not None else None
    if best is not None and spread:
        ready = spread.get("all_ready_seconds")
        rows.append(
            Row(
                f"{best.nodes} nodes + {spread['pods']} pods spread over them"
                f" ({spread['placed_by']})",
                f"all Ready {_seconds(ready)}, {spread.get('lost', spread['pods'])} lost",
                "1,000 nodes + 100 pods: all Ready ≤ 60 s, nothing lost",
                best.nodes >= 1000
                and spread["pods"] >= 100
                and ready is not None
                and ready <= 60
                and spread.get("lost") == 0,
            )
        )
    else:
        rows.append(
            Row("nodes + 100 pods spread over them", "not run",
                "1,000 nodes + 100 pods: all Ready ≤ 60 s, nothing lost", None)
        )  # fmt: skip
    return rows


def render(rows: list[Row]) -> str:
    """A Markdown table, as the issue's and docs/performance.md's."""
    lines = [
        "| measure | today (this run) | Docker alone | goal | met |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        met = "not run" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(f"| {row.measure} | {row.today} | {row.floor} | {row.goal} | {met} |")
    return "\n".join(lines)


def render_scale(results: list[scale.ScaleResult]) -> str:
    """Per N: readiness, cost, heartbeat lateness, API rate, the server's and the machine's
    CPU, Nodes not Ready at the window's end, spread pods."""
    lines = [
        "| nodes | renew every | all Ready | RSS (peak) | idle CPU (of a core) | threads"
        " | lease lateness p50 / p99 / max | late | API req/s per node"
        " | kube-apiserver / etcd CPU (of a core) | Lease PUT p50 / p99 | machine CPU (all cores)"
        " | not Ready at end | pods spread: all Ready, lost |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lat = r.lease_lateness or {}
        cp = r.control_plane_cpu_percent or {}
        server_cpu = " / ".join(
            f"{cp[k]} %" if k in cp else "n/a" for k in ("kube-apiserver", "etcd")
        )
        put = r.lease_updates or {}
        put_text = (
            " / ".join(_seconds(put.get(k)) for k in ("p50_seconds", "p99_seconds"))
            if put.get("count")
            else "n/a"
        )
        late = (
            f"{lat['late']} of {lat['intervals']} (+{lat['overdue_at_end']} overdue,"
            f" {lat['never_renewed']} never)"
            if lat
            else "n/a"
        )
        lateness = (
            " / ".join(f"{lat[k]:.2f}" for k in ("p50", "p99", "max")) + " s"
            if lat.get("intervals")
            else "n/a"
        )
        pods = r.pods or {}
        spread = f"{_seconds(pods.get('all_ready_seconds'))}, {pods.get('lost')}" if pods else "-"
        lines.append(
            f"| {r.nodes} | {_seconds(r.lease_renew_interval)}"
            f" | {_seconds(r.all_ready_seconds) if r.all_ready_seconds else r.ready}"
            f" | {r.rss_mib if r.rss_mib is not None else 'n/a'}"
            f" ({r.peak_rss_mib if r.peak_rss_mib is not None else 'n/a'}) MiB"
            f" | {r.cpu_percent_of_a_core if r.cpu_percent_of_a_core is not None else 'n/a'} %"
            f" | {r.threads or 'n/a'} | {lateness} | {late}"
            f" | {r.api_per_node_per_second if r.api_per_node_per_second is not None else 'n/a'}"
            f" | {server_cpu} | {put_text}"
            f" | {r.machine_cpu_percent if r.machine_cpu_percent is not None else 'n/a'} %"
            f" | {r.not_ready_at_end if r.not_ready_at_end is not None else 'n/a'}"
            f" | {spread} |"
        )
    return "\n".join(lines)


def run_scale(
    args: argparse.Namespace, owned: startup.Owned, kubeconfig: str, deadline: measure.Deadline
) -> list[scale.ScaleResult]:
    assert owned.tmp is not None
    server = scale.Server(
        api=api_client(kubeconfig),
        kubeconfig=kubeconfig,
        fake=owned.fake,
        scheduler=owned.fake is None
        and (owned.env is None or "kube-scheduler" in owned.env.components),
        components={} if owned.env is None else {n: pid for n, pid, _ in owned.env.processes},
    )
    options = scale.ScaleOptions(
        idle_seconds=args.scale_idle_seconds,
        baseline_seconds=args.scale_baseline_seconds,
        ready_timeout=args.scale_ready_timeout,
        agent_args=args.scale_agent_arg_list,
        log_dir=Path(args.results_dir) / "logs",
    )
    results = []
    largest = max(args.node_counts, default=0)
    for n in args.node_counts:
        if deadline.passed:
            print(f"bench: deadline passed; {n} nodes not run")
            break
        options.pods = args.scale_pods if n == largest else 0
        print(f"bench: {n} nodes in one process ...", flush=True)
        try:
            result = scale.run(server, n, options, deadline, owned.tmp, owned.extra)
        except Exception as exc:  # the other runs and the table still count
            result = scale.ScaleResult(nodes=n, notes=[f"failed: {exc!r}"[:300]])
        print(render_scale([result]).splitlines()[-1] + "".join(f" {x}" for x in result.notes))
        results.append(result)
    return results


def _stop_agent(owned: startup.Owned, core: Any, node: str, dk: Any) -> None:
    """The pod rows' agent, its Node and containers: not to be counted in the scale rows."""
    if owned.agent is None:
        return
    owned.agent.stop()
    with contextlib.suppress(*dockerside.REMOVE_FAILED):
        dockerside.remove_node_containers(dk, node)
    startup.print_warnings(owned.agent)
    with contextlib.suppress(client.ApiException):
        core.delete_node(node)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    begun = startup.begin(args, "kubelet-sim-perf-")
    if begun is None:
        return 2
    deadline, owned, dk = begun
    try:
        kubeconfig = startup.start_api_and_agent(args, owned, deadline)
        core = client.CoreV1Api(api_client(kubeconfig))
        ctx = measure.Context(
            core=core, dk=dk, fake=owned.fake, proxy=None, deadline=deadline,
            real_cluster=owned.fake is None,
        )  # fmt: skip
        pods = PodRuns() if "pods" in args.section_list else None
        scaled: list[scale.ScaleResult] = []
        floor: dockerfloor.Floor | None = None
        failure = None
        try:
            if pods is not None:
                run_pods(args, ctx, owned, pods)
            _stop_agent(owned, core, args.node_name, dk)
            if "floor" in args.section_list:
                print("bench: Docker alone, the same containers, no agent ...", flush=True)
                floor = dockerfloor.measure(dk, args.pause_image, repeat=args.repeat, size=30)
            if "scale" in args.section_list:
                scaled = run_scale(args, owned, kubeconfig, deadline)
        except Exception as exc:  # print and keep what was measured before it
            failure = f"{exc!r}"[:500]
            print(f"bench: stopped by {failure}", flush=True)
        rows = pod_rows(pods, args, floor) + scale_rows(scaled, args)
        api = "fake" if owned.fake else ("real (ControlPlane)" if owned.env else "given")
        m = report.machine()
        pool = "off" if str(args.sandbox_pool_size) == "0" else args.sandbox_pool_size
        print(f"\n== issue 22: {api} API server; {m['cpus']} CPUs ({m['cpu_model']}), "
              f"{m['memory_gib']} GiB, kernel {m['kernel']}, Python {m['python']}, "
              f"load average {m['load_average_1_5_15']}; the agent's sandbox pool "
              f"{pool}")  # fmt: skip
        print(render(rows))
        if scaled:
            print("\n" + render_scale(scaled))
        path = write_json(args, rows, pods, scaled, api, dk, failure, floor)
        print(f"\nbench: results in {path}")
        return 0 if failure is None else 1
    finally:
        owned.stop_processes()
        try:
            removed = dockerside.remove_node_containers(dk, args.node_name)
            if removed:
                print(f"bench: removed {removed} leftover container(s) of {args.node_name}")
        except dockerside.REMOVE_FAILED as exc:
            print(f"bench: could not list {args.node_name}'s containers to remove them: {exc!r}")
        dk.close()
        if owned.tmp is not None:
            shutil.rmtree(owned.tmp, ignore_errors=True)


def _docker_version(dk: Any) -> str | None:
    try:
        return str(dk.version().get("Version"))
    except dockerside.REMOVE_FAILED:
        return None


def write_json(
    args: argparse.Namespace,
    rows: list[Row],
    pods: PodRuns | None,
    scaled: list[scale.ScaleResult],
    api: str,
    dk: Any,
    failure: str | None = None,
    floor: dockerfloor.Floor | None = None,
) -> Path:
    runs = [] if pods is None else [*pods.ones, pods.thirty, pods.compare, pods.hundred]
    options = {k: v for k, v in vars(args).items() if k != "results_dir"}
    document = {
        "created": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "api_server": api,
        "failure": failure,
        "machine": {**report.machine(), "docker": _docker_version(dk)},
        "options": options,
        "table": [asdict(r) for r in rows],
        "pod_runs": [report.summarize(r) for r in runs if r is not None],
        "scale": [asdict(r) for r in scaled],
        "docker_alone": asdict(floor) if floor else None,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = Path(args.results_dir) / f"perf-{document['created']}.json"
    path.write_text(json.dumps(document, indent=1, default=str))
    return path


if __name__ == "__main__":
    sys.exit(main())
