"""Turn runs into numbers: per-interval percentiles, per-pod costs, a table and a JSON file."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.measure import Phase, PodRecord, RunResult

# (label, from field, to field) of PodRecord; each is measured per pod.
INTERVALS: list[tuple[str, str, str]] = [
    ("create → observed by agent", "created", "observed"),
    ("create → container started", "created", "started"),
    ("observed → container started", "observed", "started"),
    ("started → Running on watch", "started", "running"),
    ("create → Running on watch", "created", "running"),
    ("create → Ready on watch", "created", "ready"),
    ("delete → containers gone", "deleted", "containers_gone"),
    ("delete → object gone (watch)", "deleted", "object_gone"),
]


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def interval_stats(pods: list[PodRecord]) -> dict[str, dict[str, float] | None]:
    """label → {p50, p90, p99, max, n} in seconds, or None when nothing was measurable."""
    stats: dict[str, dict[str, float] | None] = {}
    for label, start, end in INTERVALS:
        values = [
            getattr(p, end) - getattr(p, start)
            for p in pods
            if getattr(p, start) is not None and getattr(p, end) is not None
        ]
        stats[label] = (
            {
                "p50": percentile(values, 50),
                "p90": percentile(values, 90),
                "p99": percentile(values, 99),
                "max": max(values),
                "n": len(values),
            }
            if values
            else None
        )
    return stats


def per_pod(counts: dict[str, int] | None, size: int) -> dict[str, float] | None:
    if counts is None:
        return None
    return {k: round(v / size, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def key_costs(run: RunResult) -> dict[str, float | None]:
    """The per-pod costs the targets name: status writes, events, lists (API and Docker)."""
    api = run.start.api_in_namespace
    docker_calls = run.start.docker_calls
    n = run.size
    out: dict[str, float | None] = {
        "status writes/pod": None,
        "events/pod": None,
        "API lists/pod": None,
        "API requests/pod": None,
        "Docker calls/pod": None,
        "Docker lists/pod": None,
    }
    if api is not None:
        out["status writes/pod"] = sum(v for k, v in api.items() if k.endswith("pods/status")) / n
        out["events/pod"] = sum(v for k, v in api.items() if k.endswith(" events")) / n
        every = {**api}
        for k, v in (run.start.api_node_level or {}).items():
            every[k] = every.get(k, 0) + v
        out["API lists/pod"] = sum(v for k, v in every.items() if k.startswith("list ")) / n
        out["API requests/pod"] = sum(api.values()) / n
    if docker_calls is not None:
        out["Docker calls/pod"] = sum(docker_calls.values()) / n
        out["Docker lists/pod"] = (
            sum(v for k, v in docker_calls.items() if k == "GET /containers/json") / n
        )
    return out


def summarize(run: RunResult) -> dict[str, Any]:
    """Everything derived from one run (the JSON keeps the raw pod records too)."""
    ready = run.all_ready_seconds
    peak = [p.usage.peak_rss_mib for p in (run.start, run.idle, run.delete) if p and p.usage]
    return {
        "node": run.node,
        "size": run.size,
        "intervals": interval_stats(run.pods),
        "all_ready_seconds": ready,
        "pods_per_second": run.size / ready if ready else None,
        "all_gone_seconds": run.all_gone_seconds,
        "all_containers_gone_seconds": run.all_containers_gone_seconds,
        "agent_cpu_seconds": {
            name: p.usage.cpu_seconds
            for name, p in (("start", run.start), ("idle", run.idle), ("delete", run.delete))
            if p is not None and p.usage is not None
        },
        "agent_peak_rss_mib": max(peak) if peak else None,
        "engine_cpu_seconds": {
            name: p.engine_cpu_seconds
            for name, p in (("start", run.start), ("idle", run.idle), ("delete", run.delete))
            if p is not None and p.engine_cpu_seconds is not None
        },
        "key_costs": key_costs(run),
        "start_api_per_pod": per_pod(run.start.api_in_namespace, run.size),
        "start_api_node_level": run.start.api_node_level,
        "start_docker_per_pod": per_pod(run.start.docker_calls, run.size),
        "start_docker_events_per_pod": per_pod(run.start.docker_events, run.size),
        "delete_api_per_pod": per_pod(run.delete.api_in_namespace, run.size),
        "delete_docker_per_pod": per_pod(run.delete.docker_calls, run.size),
        "idle": _idle(run.idle, run.size),
        "notes": run.notes,
    }


def _idle(phase: Phase | None, size: int) -> dict[str, Any] | None:
    if phase is None:
        return None
    out: dict[str, Any] = {"pods": size, "seconds": phase.end - phase.start}
    if phase.usage is not None:
        out.update(
            cpu_percent_of_one_core=phase.usage.cpu_percent,
            rss_mib=phase.usage.rss_mib,
            peak_rss_mib=phase.usage.peak_rss_mib,
        )
    out["api_requests"] = {**(phase.api_in_namespace or {}), **(phase.api_node_level or {})}
    out["docker_calls"] = phase.docker_calls
    return out


def machine() -> dict[str, Any]:
    """Where the numbers came from."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_kib = int(first.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def write_json(
    results: list[RunResult], options: dict[str, Any], extra: dict[str, Any], directory: Path
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}.json"
    document = {
        "created": stamp,
        "machine": {**machine(), **extra},
        "options": options,
        "runs": [
            {"summary": summarize(r), "pods": [dataclasses.asdict(p) for p in r.pods]}
            for r in results
        ],
    }
    path.write_text(json.dumps(document, indent=1, default=str))
    return path


def _fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def render(results: list[RunResult]) -> str:
    """The console table: per run the intervals, then its costs."""
    lines: list[str] = []
    for run in results:
        s = summarize(run)
        lines.append(f"\n== node {run.node}: {run.size} pod(s) at once (namespace {run.namespace})")
        lines.append(f"{'interval (s)':34} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'n':>4}")
        for label, st in s["intervals"].items():
            if st is None:
                lines.append(f"{label:34} {'n/a':>7}")
                continue
            row = " ".join(f"{st[k]:7.3f}" for k in ("p50", "p90", "p99", "max"))
            lines.append(f"{label:34} {row} {int(st['n']):4d}")
        pps = s["pods_per_second"]
        lines.append(
            f"all Ready {_fmt(s['all_ready_seconds'], ' s', 2)}"
            f" ({_fmt(pps, ' pods/s', 1)}); all gone from the API"
            f" {_fmt(s['all_gone_seconds'], ' s', 2)}; all containers gone"
            f" {_fmt(s['all_containers_gone_seconds'], ' s', 2)}"
        )
        cpu = s["agent_cpu_seconds"]
        if cpu:
            lines.append(
                "agent CPU "
                + ", ".join(f"{k} {v:.2f} s" for k, v in cpu.items())
                + f"; peak RSS {_fmt(s['agent_peak_rss_mib'], ' MiB', 1)}"
            )
        engine = s["engine_cpu_seconds"]
        if engine:
            lines.append(
                "engine CPU (dockerd+containerd) "
                + ", ".join(f"{k} {v:.2f} s" for k, v in engine.items())
            )
        costs = s["key_costs"]
        lines.append("per pod: " + ", ".join(f"{k} {_fmt(v, '', 2)}" for k, v in costs.items()))
        for key, what in (
            ("start_api_per_pod", "API per pod, start"),
            ("delete_api_per_pod", "API per pod, delete"),
            ("start_docker_per_pod", "Docker per pod, start"),
            ("delete_docker_per_pod", "Docker per pod, delete"),
            ("start_docker_events_per_pod", "Docker events per pod, start"),
        ):
            found = s[key]
            text = "n/a" if found is None else ", ".join(f"{k} {v}" for k, v in found.items())
            lines.append(f"{what}: {text}")
        if s["start_api_node_level"]:
            lines.append(f"API node-level during start: {s['start_api_node_level']}")
        idle = s["idle"]
        if idle is not None:
            lines.append(
                f"idle {idle['seconds']:.0f} s with {idle['pods']} pods:"
                f" CPU {_fmt(idle.get('cpu_percent_of_one_core'), '% of a core', 2)},"
                f" RSS {_fmt(idle.get('rss_mib'), ' MiB', 1)},"
                f" API {idle['api_requests']}, Docker {idle['docker_calls']}"
            )
        lines.extend(f"note: {n}" for n in run.notes)
    return "\n".join(lines)


def render_ratios(results: list[RunResult], ours: str, other: str) -> str:
    """other/ours for the headline numbers, per size (>1: the other node is slower)."""
    by = {(r.node, r.size): summarize(r) for r in results}
    lines = [f"\n== ratios {other} / {ours} (above 1: {other} takes longer)"]
    metrics: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
        ("p50 create → Ready", lambda s: _p(s, "create → Ready on watch", "p50")),
        ("p99 create → Ready", lambda s: _p(s, "create → Ready on watch", "p99")),
        ("all Ready", lambda s: s["all_ready_seconds"]),
        ("p50 delete → gone", lambda s: _p(s, "delete → object gone (watch)", "p50")),
        ("all gone", lambda s: s["all_gone_seconds"]),
    ]
    sizes = sorted({size for node, size in by if node == ours})
    for size in sizes:
        a, b = by.get((ours, size)), by.get((other, size))
        if a is None or b is None:
            continue
        parts = []
        for label, get in metrics:
            x, y = get(a), get(b)
            parts.append(f"{label} {y / x:.2f}" if x and y is not None else f"{label} n/a")
        lines.append(f"{size:4d} pods: " + "; ".join(parts))
    return "\n".join(lines)


def _p(summary: dict[str, Any], label: str, key: str) -> float | None:
    st = summary["intervals"].get(label)
    return None if st is None else float(st[key])
