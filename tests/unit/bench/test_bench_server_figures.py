"""The scale runs' other arithmetic: the renew interval from the agent's options, lateness
against it, the API server's Lease latency from /metrics, the machine's CPU from /proc/stat
and the Nodes' Ready status. No Docker, no API server."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.apirate import Histogram, request_codes, request_durations
from bench.leases import late_bound, lateness, renew_interval
from bench.procstat import machine_jiffies
from bench.scale import lease_updates, ready_status


def test_the_renew_interval_is_a_quarter_of_the_agents_lease_duration() -> None:
    assert renew_interval([], {}) == 10.0
    assert renew_interval(["--node-lease-duration-seconds", "120"], {}) == 30.0
    assert renew_interval(["--node-lease-duration-seconds=60"], {}) == 15.0
    env = {"KUBELET_SIM_NODE_LEASE_DURATION_SECONDS": "80"}
    assert renew_interval([], env) == 20.0
    assert renew_interval(["--node-lease-duration-seconds", "120"], env) == 30.0  # flag first


def test_a_longer_interval_is_judged_against_itself() -> None:
    assert late_bound(10.0) == 1.0
    assert late_bound(30.0) == pytest.approx(3.0)
    renewals = {"n1": [0.0, 31.2, 61.5, 92.0], "n2": [0.0, 30.0, 65.0]}
    found = lateness(renewals, ["n1", "n2"], since=0.0, until=93.0, interval=30.0)
    assert found.interval == 30.0
    assert found.late_after == pytest.approx(3.0)
    assert found.late == 1  # n2's 35 s; n1's 1.2 s of jitter is not late at 30 s
    assert found.overdue_at_end == 0  # n2's last, 28 s before the end, is not overdue yet
    assert found.late_nodes == ["n2"]


def _bucket(verb: str, resource: str, sub: str, le: str, value: float) -> str:
    labels = (
        f'component="apiserver",dry_run="",group="coordination.k8s.io",le="{le}",'
        f'resource="{resource}",scope="resource",subresource="{sub}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_duration_seconds_bucket{{{labels}}} {value}"


def _tail(part: str, verb: str, resource: str, value: float) -> str:
    labels = (
        f'component="apiserver",dry_run="",group="coordination.k8s.io",resource="{resource}",'
        f'scope="resource",subresource="",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_duration_seconds_{part}{{{labels}}} {value}"


def _total(code: str, value: float) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="coordination.k8s.io",'
        'resource="leases",scope="resource",subresource="",verb="PUT",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


def _metrics(counts: tuple[float, ...], total: float, codes: dict[str, float]) -> str:
    """PUT leases with buckets 0.1, 0.2, 0.4, +Inf (cumulative), and a GET nodes beside them."""
    bounds = ("0.1", "0.2", "0.4", "+Inf")
    lines = [_bucket("PUT", "leases", "", le, c) for le, c in zip(bounds, counts, strict=True)]
    lines += [_tail("sum", "PUT", "leases", total), _tail("count", "PUT", "leases", counts[-1])]
    lines += [_bucket("GET", "nodes", "", "0.1", 1000.0), _tail("count", "GET", "nodes", 1000.0)]
    lines += [_bucket("PUT", "leases", "status", "0.1", 7.0)]  # a subresource: not these
    lines += [_total(code, v) for code, v in codes.items()]
    return "\n".join(lines)


def test_lease_latency_from_the_buckets_of_the_window() -> None:
    before = _metrics((10, 10, 10, 10), 0.5, {"200": 10})
    after = _metrics((60, 110, 110, 110), 10.5, {"200": 108, "429": 2})
    window = request_durations(after, "PUT", "leases").minus(
        request_durations(before, "PUT", "leases")
    )
    assert window.count == 100
    assert window.buckets == {0.1: 50, 0.2: 100, 0.4: 100, float("inf"): 100}
    assert window.quantile(0.5) == pytest.approx(0.1)  # the 50th of 100 ends the first bucket
    assert window.quantile(0.99) == pytest.approx(0.1 + 0.1 * 49 / 50)
    assert window.mean == pytest.approx(0.1)
    found = lease_updates(before, after)
    assert found["count"] == 100
    assert found["p50_seconds"] == pytest.approx(0.1)
    assert found["codes"] == {"200": 98, "429": 2}
    assert request_codes(after, "PUT", "leases") == Counter({"200": 108, "429": 2})


def test_a_quantile_in_the_open_bucket_is_the_highest_bound() -> None:
    h = Histogram({0.1: 0, 0.4: 1, float("inf"): 10}, sum=30.0, count=10)
    assert h.quantile(0.99) == 0.4
    assert Histogram().quantile(0.5) is None
    assert Histogram().mean is None


def test_machine_busy_is_all_but_idle_and_iowait() -> None:
    stat = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\nintr 12345\n"
    busy, total = machine_jiffies(stat)
    assert total == 100 + 5 + 50 + 800 + 20 + 3 + 2 + 10  # guest time is in user already
    assert busy == total - 800 - 20


def test_ready_status_counts_every_asked_node() -> None:
    def node(name: str, status: str | None) -> dict[str, object]:
        conditions = [] if status is None else [{"type": "Ready", "status": status}]
        return {"metadata": {"name": name}, "status": {"conditions": conditions}}

    items = [node("a", "True"), node("b", "Unknown"), node("c", None), node("other", "False")]
    found = ready_status(items, ["a", "b", "c", "d"])
    assert found == Counter({"True": 1, "Unknown": 1, "none": 1, "missing": 1})
