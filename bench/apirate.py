"""API requests of the nodes per second, as the API server counts them.

On the fake: its request log (`GET /debug/requests`), filtered by the agent's user agent, so
only the agent's requests count. On a real kube-apiserver: the counter
`apiserver_request_total` of its /metrics, read before and after the window; it has no user
agent label, so the delta also holds the controller-manager's and scheduler's requests and
the bench's own (its scrape). The counts of a window before the nodes started (the baseline)
are subtracted kind by kind, scaled to the window's length; both are kept.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_totals(metrics_text: str) -> Counter[str]:
    """'VERB resource[/subresource]' → count, summed over codes, scopes and components."""
    totals: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found["labels"]))
        key = f"{labels.get('verb', '')} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        totals[key] += int(float(found["value"]))
    return totals


def delta(before: Counter[str], after: Counter[str]) -> Counter[str]:
    """What each counter grew by (a counter that went down, the server restarted: taken whole)."""
    out: Counter[str] = Counter()
    for key, value in after.items():
        grown = value - before.get(key, 0)
        out[key] = grown if grown >= 0 else value
    return +out


def scrape(api: Any) -> Counter[str]:
    """The real server's request counters through an admin kubernetes.client.ApiClient."""
    headers = {"Accept": "text/plain"}
    for auth in api.configuration.auth_settings().values():
        if auth.get("in") == "header" and auth.get("value"):
            headers[auth["key"]] = auth["value"]
    answer = api.call_api("GET", api.configuration.host + "/metrics", header_params=headers)
    text = answer.read().decode()
    if answer.status != 200:
        raise RuntimeError(f"GET /metrics: {answer.status} {text[:200]}")
    return request_totals(text)


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
