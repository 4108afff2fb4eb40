"""API requests of the nodes per second, as the API server counts them.

On the fake: its request log (`GET /debug/requests`), filtered by the agent's user agent, so
only the agent's requests count. On a real kube-apiserver: the counter
`apiserver_request_total` of its /metrics, read before and after the window; it has no user
agent label, so the delta also holds the controller-manager's and scheduler's requests and
the bench's own (its scrape). The counts of a window before the nodes started (the baseline)
are subtracted kind by kind, scaled to the window's length; both are kept.

The same /metrics gives the server's own view of one kind of request over the window: its
latency histogram `apiserver_request_duration_seconds` (p50 / p99 as Prometheus's
histogram_quantile takes them from the buckets, and the mean) and its response codes, so a
run can say whether the API server, not the agent, made the Leases late.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_DURATION = re.compile(
    r"^apiserver_request_duration_seconds_(?P<part>bucket|sum|count)"
    r"\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _request_samples(metrics_text: str) -> Iterator[tuple[dict[str, str], int]]:
    """Each apiserver_request_total sample: its labels and its count."""
    for line in metrics_text.splitlines():
        found = _SAMPLE.match(line)
        if found is not None:
            yield dict(_LABEL.findall(found["labels"])), int(float(found["value"]))


def request_totals(metrics_text: str) -> Counter[str]:
    """'VERB resource[/subresource]' → count, summed over codes, scopes and components."""
    totals: Counter[str] = Counter()
    for labels, count in _request_samples(metrics_text):
        key = f"{labels.get('verb', '')} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        totals[key] += count
    return totals


def delta(before: Counter[str], after: Counter[str]) -> Counter[str]:
    """What each counter grew by (a counter that went down, the server restarted: taken whole)."""
    out: Counter[str] = Counter()
    for key, value in after.items():
        grown = value - before.get(key, 0)
        out[key] = grown if grown >= 0 else value
    return +out


def metrics_text(api: Any) -> str:
    """The real server's /metrics through an admin kubernetes.client.ApiClient."""
    headers = {"Accept": "text/plain"}
    for auth in api.configuration.auth_settings().values():
        if auth.get("in") == "header" and auth.get("value"):
            headers[auth["key"]] = auth["value"]
    answer = api.call_api("GET", api.configuration.host + "/metrics", header_params=headers)
    text = answer.read().decode()
    if answer.status != 200:
        raise RuntimeError(f"GET /metrics: {answer.status} {text[:200]}")
    return text


def scrape(api: Any) -> Counter[str]:
    """The real server's request counters."""
    return request_totals(metrics_text(api))


@dataclass
class Histogram:
    """A cumulative Prometheus histogram: upper bound → requests at most that long."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def minus(self, before: Histogram) -> Histogram:
        """What was observed since `before` (a server restarted in between: taken whole)."""
        if self.count < before.count:
            return self
        return Histogram(
            {b: v - before.buckets.get(b, 0.0) for b, v in self.buckets.items()},
            self.sum - before.sum,
            self.count - before.count,
        )

    def quantile(self, q: float) -> float | None:
        """Prometheus's histogram_quantile: linear within the bucket the rank falls in; the
        highest finite bound if it falls in +Inf."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound in sorted(self.buckets):
            seen = self.buckets[bound]
            if seen >= rank:
                if math.isinf(bound):
                    return lower
                inside = seen - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, seen
        return lower

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def request_durations(metrics_text: str, verb: str, resource: str) -> Histogram:
    """`apiserver_request_duration_seconds` of `verb resource` (no subresource), summed over
    the other labels (scope, component, version)."""
    out = Histogram()
    for line in metrics_text.splitlines():
        found = _DURATION.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found["labels"]))
        if labels.get("verb") != verb or labels.get("resource") != resource:
            continue
        if labels.get("subresource"):
            continue
        value = float(found["value"])
        if found["part"] == "bucket":
            bound = float(labels["le"])  # "+Inf" parses as inf
            out.buckets[bound] = out.buckets.get(bound, 0.0) + value
        elif found["part"] == "sum":
            out.sum += value
        else:
            out.count += value
    return out


def request_codes(metrics_text: str, verb: str, resource: str) -> Counter[str]:
    """Response code → count of `verb resource` (no subresource), from apiserver_request_total:
    a 429 is the server's priority and fairness turning requests away, a 5xx its failing."""
    codes: Counter[str] = Counter()
    for labels, count in _request_samples(metrics_text):
        wanted = (labels.get("verb"), labels.get("resource"), labels.get("subresource", ""))
        if wanted == (verb, resource, ""):
            codes[labels.get("code", "")] += count
    return codes


def request_key(record: dict[str, Any]) -> str:
    """'verb resource[/subresource]' of one record of the fake's request log."""
    sub = record.get("subresource")
    return f"{record['verb']} {record['resource']}" + (f"/{sub}" if sub else "")


def fake_counts(fake: Any, user_agent_prefix: str, since: float, until: float) -> Counter[str]:
    """The fake's logged requests of that user agent in [since, until), by verb and resource."""
    counts: Counter[str] = Counter()
    for r in fake.requests(since, user_agent_prefix):
        if r["time"] < until:
            counts[request_key(r)] += 1
    return counts


def less_baseline(
    counts: Counter[str], baseline: Counter[str], baseline_seconds: float, seconds: float
) -> Counter[str]:
    """`counts` over `seconds` less what the baseline's rate gives for the same window, kind by
    kind (verb and resource), never below zero: a burst of the controllers' work in the
    baseline (a namespace being emptied) does not eat the nodes' Lease updates."""
    scale = seconds / baseline_seconds if baseline_seconds > 0 else 0.0
    out: Counter[str] = Counter()
    for key, value in counts.items():
        out[key] = max(0, round(value - baseline.get(key, 0) * scale))
    return +out


def per_node_per_second(counts: Counter[str], seconds: float, nodes: int) -> float | None:
    """Requests per second per node."""
    if seconds <= 0 or nodes <= 0:
        return None
    return sum(counts.values()) / seconds / nodes
