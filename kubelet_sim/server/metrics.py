"""The Prometheus text format (0.0.4) for `/metrics` and `/metrics/resource`."""

from __future__ import annotations

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
