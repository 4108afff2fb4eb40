"""The Prometheus text format (0.0.4) for `/metrics` and `/metrics/resource`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None  # resource metrics carry the time they were read


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge or counter
    help: str
    samples: list[Sample] = field(default_factory=list)


class Counters:
    """A node's kubelet API counters and gauges (its connections, its bearer tokens), for
    /metrics; `help` names the families shown, with their kind and text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.help: dict[str, tuple[str, str]] = {}

    def add(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def families(self) -> list[Family]:
        with self._lock:
            values = dict(self._values)
        out: list[Family] = []
        for name, (kind, text) in sorted(self.help.items()):
            samples = [
                Sample(dict(labels), v) for (n, labels), v in sorted(values.items()) if n == name
            ]
            out.append(Family(name, kind, text, samples))
        return out


def render(families: list[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            line = f"{family.name}{{{labels}}}" if labels else family.name
            line += f" {sample.value:.17g}"
            if sample.timestamp_ms is not None:
                line += f" {sample.timestamp_ms}"
            lines.append(line)
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def histogram_samples(
    snapshot: tuple[list[tuple[float, int]], float, int], labels: dict[str, str] | None = None
) -> dict[str, list[Sample]]:
    """A histogram's _bucket (with le="+Inf"), _sum and _count samples, by name suffix."""
    buckets, total, count = snapshot
    labels = labels or {}
    out = [Sample({**labels, "le": f"{bound:g}"}, n) for bound, n in buckets]
    out.append(Sample({**labels, "le": "+Inf"}, count))
    return {"_bucket": out, "_sum": [Sample(labels, total)], "_count": [Sample(labels, count)]}


def histogram_family(name: str, help: str, snapshot: tuple[list[tuple[float, int]], float, int],
                     labels: dict[str, str] | None = None) -> str:  # fmt: skip
    """The text of one histogram family (render() writes gauges and counters)."""
    parts = histogram_samples(snapshot, labels)
    lines = [f"# HELP {name} {help}", f"# TYPE {name} histogram"]
    for suffix in ("_bucket", "_sum", "_count"):
        body = render([Family(name + suffix, "", "", parts[suffix])])
        lines += [line for line in body.splitlines() if not line.startswith("#")]
    return "\n".join(lines) + "\n"
