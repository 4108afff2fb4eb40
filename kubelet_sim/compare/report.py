"""The verdicts shown: a table for people, or one JSON object. Pure: text out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from kubelet_sim.compare.node_view import NodeComparison
from kubelet_sim.compare.states import PodRecord, PodState
from kubelet_sim.compare.verdict import Verdict

MAX_FOREIGN_LINES = 5  # per scenario in the table; the JSON has them all


def _state(state: PodState | None) -> dict[str, str] | None:
    return None if state is None else state.as_dict()


def _events(record: PodRecord) -> dict[str, int]:
    """`{"Warning BackOff": 3, "Normal Pulled": 1}`."""
    return {f"{kind} {reason}": n for (kind, reason), n in sorted(record.event_counts().items())}


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """One scenario's entry of the JSON output."""
    return {
        "name": verdict.name,
        "agrees": verdict.agrees,
        "foreign": [
            {
                "short": foreign.short(),
                "state": foreign.state.as_dict(),
                "nearest_reference": _state(foreign.nearest),
                "differs": {k: list(v) for k, v in foreign.differences().items()},
            }
            for foreign in verdict.foreign
        ],
        # One per run (a list even with --runs 1): the state at the end of observation.
        "settled": [_state(record.settled) for record in verdict.ours],
        "reference_settled": [_state(record.settled) for record in verdict.reference],
        "settled_agrees": all(run.settled_agrees for run in verdict.runs),
        "events": {
            "agree": all(run.events_agree for run in verdict.runs),
            "only_ours": sorted(verdict.only_ours),
            "only_reference": sorted(verdict.only_reference),
            "ours": [_events(record) for record in verdict.ours],
            "reference": [_events(record) for record in verdict.reference],
        },
        "ours_runs_agreeing": verdict.ours_agreeing,
        # Reference runs that agree with the other reference runs (null with one run): noise.
        "reference_runs_alike": verdict.reference_alike,
        "sequences": {
            "ours": [[state.short() for state in record.states] for record in verdict.ours],
            "reference": [
                [state.short() for state in record.states] for record in verdict.reference
            ],
        },
    }


def as_json(verdicts: Sequence[Verdict], **about: Any) -> dict[str, Any]:
    """`{"agree": N, "total": M, "scenarios": [...]}` and `about` (namespace, nodes, runs)."""
    return {
        "agree": sum(verdict.agrees for verdict in verdicts),
        "total": len(verdicts),
        **about,
        "scenarios": [verdict_json(verdict) for verdict in verdicts],
    }


def _settled(records: Sequence[PodRecord]) -> str:
    """The settled states of some runs, each once: `Running main=running +ready (x2)`."""
    counts = Counter(r.settled.brief() if r.settled else "(never seen)" for r in records)
    if not counts:
        return "(no run)"
    return " / ".join(text + (f" (x{n})" if n > 1 else "") for text, n in sorted(counts.items()))


def _event_diff(verdict: Verdict) -> str:
    return " ".join(
        [f"+{r}" for r in sorted(verdict.only_ours)]
        + [f"-{r}" for r in sorted(verdict.only_reference)]
    )


def table(verdicts: Sequence[Verdict], *, runs: int = 1) -> str:
    """For people: per scenario whether ours agrees, the settled states (ours, then the
    reference's when they differ), the foreign states as their differences from the nearest
    reference state, and the event reasons only ours (+) or only the reference (-) gave."""
    width = max([len("SCENARIO"), *(len(v.name) for v in verdicts)]) + 2
    head = f"{'SCENARIO':<{width}}{'AGREES':<8}"
    alike_col = runs > 1
    if alike_col:
        head += f"{'REF ALIKE':<11}"
    lines = [head + "SETTLED: OURS / REFERENCE  [EVENTS: +ours only -reference only]"]
    indent = " " * (width + 8 + (11 if alike_col else 0))
    for verdict in verdicts:
        row = f"{verdict.name:<{width}}{'yes' if verdict.agrees else 'no':<8}"
        if alike_col:
            alike = verdict.reference_alike
            row += f"{'-' if alike is None else f'{alike}/{len(verdict.reference)}':<11}"
        ours, reference = _settled(verdict.ours), _settled(verdict.reference)
        events = _event_diff(verdict)
        lines.append(row + ours + (f"  [{events}]" if events else ""))
        lines.append(indent + ("(same)" if reference == ours else reference))
        if verdict.ours and runs > 1 and not verdict.agrees:
            lines.append(f"{indent}ours agrees in {verdict.ours_agreeing}/{len(verdict.ours)} runs")
        foreign = Counter(foreign.short() for foreign in verdict.foreign)
        shown = [text + (f" (x{n})" if n > 1 else "") for text, n in foreign.items()]
        lines += [f"{indent}foreign: {text}" for text in shown[:MAX_FOREIGN_LINES]]
        if len(shown) > MAX_FOREIGN_LINES:
            lines.append(f"{indent}… {len(shown) - MAX_FOREIGN_LINES} more (--output json)")
    agree = sum(verdict.agrees for verdict in verdicts)
    lines.append(f"{agree}/{len(verdicts)} scenarios agree")
    return "\n".join(lines)


def node_lines(nodes: NodeComparison) -> str:
    """The Node objects: whether ours agrees, each field that differs (ours, then the
    reference's), and each that differs by nature with why."""
    verdict = "agrees" if nodes.agrees else f"differs in {len(nodes.differs)}"
    lines = [f"NODE OBJECT: {verdict} ({nodes.fields} fields, {len(nodes.by_nature)} by nature)"]
    lines += [f"  differs {f.field}: {f.ours!r} / {f.reference!r}" for f in nodes.differs]
    lines += [
        f"  by nature {f.field}: {f.ours!r} / {f.reference!r}: {f.why}" for f in nodes.by_nature
    ]
    return "\n".join(lines)
