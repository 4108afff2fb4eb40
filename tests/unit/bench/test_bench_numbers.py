"""The bench's own arithmetic (bench/leases.py, bench/apirate.py): lease lateness from renewal
times, and request counts from kube-apiserver's /metrics. No Docker, no API server."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.apirate import delta, less_baseline, per_node_per_second, request_totals
from bench.leases import lateness


def test_on_time_renewals_are_not_late() -> None:
    renewals = {"n1": [0.0, 10.2, 20.3, 30.1], "n2": [5.0, 15.0, 25.4]}
    found = lateness(renewals, ["n1", "n2"], since=0.0, until=31.0)
    assert found.intervals == 5  # n1: 3, n2: 2
    assert found.max == pytest.approx(0.4)
    assert found.late == 0
    assert found.overdue_at_end == 0
    assert found.never_renewed == 0
    assert found.late_nodes == []


def test_a_late_interval_counts_and_names_its_node() -> None:
    renewals = {"n1": [0.0, 10.0, 22.5, 32.5], "n2": [0.0, 10.0, 20.0, 30.0]}
    found = lateness(renewals, ["n1", "n2"], since=0.0, until=33.0)
    assert found.late == 1
    assert found.max == pytest.approx(2.5)
    assert found.late_nodes == ["n1"]


def test_the_interval_into_the_window_counts_and_earlier_ones_do_not() -> None:
    renewals = {"n1": [0.0, 25.0, 35.0, 45.0]}  # a slow start before the window
    found = lateness(renewals, ["n1"], since=30.0, until=46.0)
    assert found.intervals == 2  # 25→35 (its end is inside) and 35→45; 0→25 is not
    assert found.late == 0


def test_a_stalled_heartbeat_is_overdue_and_a_silent_node_never_renewed() -> None:
    renewals = {"n1": [0.0, 10.0], "n2": [0.0, 10.0, 20.0, 30.0]}
    found = lateness(renewals, ["n1", "n2", "n3"], since=5.0, until=35.0)
    assert found.overdue_at_end == 1  # n1: last renewal at 10, 25 s before the end
    assert found.never_renewed == 1  # n3: no Lease at all
    assert found.late_nodes == ["n1", "n3"]


def test_repeated_renew_times_are_one_renewal() -> None:
    found = lateness({"n1": [0.0, 0.0, 10.1, 10.1]}, ["n1"], since=0.0, until=11.0)
    assert found.intervals == 1
    assert found.p50 == pytest.approx(0.1)


def _sample(verb: str, resource: str, sub: str, code: str, value: str) -> str:
    """One line of kube-apiserver's /metrics, its labels as v1.24 writes them."""
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="",resource="{resource}",'
        f'scope="resource",subresource="{sub}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS_BEFORE = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests ...",
        "# TYPE apiserver_request_total counter",
        _sample("PUT", "leases", "", "200", "40"),
        _sample("PUT", "leases", "", "409", "2"),
        _sample("PATCH", "nodes", "status", "200", "7"),
        'apiserver_request_duration_seconds_count{verb="PUT"} 99',
    ]
)
METRICS_AFTER = "\n".join(
    [
        _sample("PUT", "leases", "", "200", "100"),
        _sample("PUT", "leases", "", "409", "2"),
        _sample("PATCH", "nodes", "status", "200", "9"),
        _sample("LIST", "pods", "", "200", "1e+00"),
    ]
)


def test_request_totals_sum_over_codes_by_verb_and_resource() -> None:
    totals = request_totals(METRICS_BEFORE)
    assert totals == Counter({"PUT leases": 42, "PATCH nodes/status": 7})


def test_delta_and_rate_per_node_less_the_baseline() -> None:
    grown = delta(request_totals(METRICS_BEFORE), request_totals(METRICS_AFTER))
    assert grown == Counter({"PUT leases": 60, "PATCH nodes/status": 2, "LIST pods": 1})
    assert per_node_per_second(grown, 60.0, 10) == pytest.approx(63 / 60 / 10)
    assert per_node_per_second(grown, 0.0, 10) is None


def test_the_baseline_is_taken_off_kind_by_kind() -> None:
    window = Counter({"PUT leases": 60, "LIST pods": 1})
    # 20 s without the nodes: a namespace emptied (many pod deletes), one pod list
    baseline = Counter({"DELETE pods": 300, "LIST pods": 1})
    left = less_baseline(window, baseline, baseline_seconds=20.0, seconds=60.0)
    assert left == Counter({"PUT leases": 60})  # the deletes take nothing off the leases
