"""Does our node agree with the reference, scenario by scenario? Pure: records in, verdicts out.

For one scenario, each of our runs is judged against all the reference runs:
- a state of ours is *foreign* when no reference run ever showed it;
- its *settled* state (the last one observed) must be one of the reference runs' settled states;
- its set of event reasons must equal one reference run's set (RUNTIME_TROUBLE aside).
Ours agrees when every run of ours passes all three. The reference's own noise is measured the
same way: each reference run judged against the other reference runs (`reference_alike`, None
with a single run), so a scenario where the reference disagrees with itself says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubelet_sim.compare.states import OURS, REFERENCE, PodRecord, PodState, collapse

MISSING = "-"
# Events in which a node tells of its own machinery failing (a runtime call that failed), not
# of what it does with the pod: shown, never judged. The rig's kubelet under the load of every
# scenario at once said FailedKillPod for a container its containerd did stop (alone it never
# does), and ours says FailedCreatePodSandBox when Docker fails.
RUNTIME_TROUBLE = frozenset(
    {"FailedKillPod", "FailedCreatePodSandBox", "FailedPodSandBoxStatus", "FailedSync"}
)


def differences(ours: PodState, reference: PodState) -> dict[str, tuple[str, str]]:
    """Each field whose value differs: key → (ours, reference); `-` where a side lacks it."""
    a, b = ours.as_dict(), reference.as_dict()
    return {
        key: (a.get(key, MISSING), b.get(key, MISSING))
        for key in sorted(a.keys() | b.keys())
        if a.get(key) != b.get(key)
    }


def nearest(state: PodState, candidates: Iterable[PodState]) -> PodState | None:
    """The candidate that differs from `state` in the fewest fields (the first of equals)."""
    best: PodState | None = None
    best_count = 0
    for candidate in candidates:
        count = len(differences(state, candidate))
        if best is None or count < best_count:
            best, best_count = candidate, count
    return best


@dataclass(frozen=True)
class Foreign:
    """A state of ours that no reference run showed, and the reference state nearest to it."""

    state: PodState
    nearest: PodState | None

    def differences(self) -> dict[str, tuple[str, str]]:
        return differences(self.state, self.nearest) if self.nearest is not None else {}

    def short(self, limit: int = 4) -> str:
        """`c.main: running (ref waiting:ContainerCreating); phase: Running (ref Pending)`."""
        if self.nearest is None:
            return self.state.short()
        if self.state.gone or self.nearest.gone:
            return f"{self.state.short()} (ref {self.nearest.short()})"
        items = [f"{k}: {o} (ref {r})" for k, (o, r) in self.differences().items()]
        more = len(items) - limit
        return "; ".join(items[:limit]) + (f"; +{more} more" if more > 0 else "")


@dataclass(frozen=True)
class RunVerdict:
    """One run of ours against the reference runs."""

    foreign: tuple[PodState, ...]
    settled_agrees: bool
    events_agree: bool
    only_ours: frozenset[str]  # event reasons ours gave and the closest reference run did not
    only_reference: frozenset[str]  # and the reverse

    @property
    def agrees(self) -> bool:
        return not self.foreign and self.settled_agrees and self.events_agree


def judge_run(ours: PodRecord, reference: Sequence[PodRecord]) -> RunVerdict:
    """One run of ours (or of the reference, against its other runs) against `reference`.

    Ours is judged over its window; the reference, watched longer, may take longer to get
    where ours got: ours agrees when it settled in a state a reference run held at the end of
    our window or reached after it, and its event reasons include every reason that run gave
    within our window and none it never gave."""
    window = ours.window
    mine = [s for s, at in zip(ours.states, _times(ours), strict=True) if at <= window]
    seen = {state for record in reference for state in record.states}
    foreign = tuple(dict.fromkeys(s for s in collapse(mine) if s not in seen))
    settled = ours.settled
    reachable = [record.states_from(window) for record in reference]
    ours_reasons = ours.reasons_by(window) - RUNTIME_TROUBLE
    runs = [
        (record.reasons_by(window) - RUNTIME_TROUBLE, record.event_reasons() - RUNTIME_TROUBLE)
        for record in reference
    ]
    events_agree = any(early <= ours_reasons <= every for early, every in runs)
    closest = min(
        (every for _, every in runs), key=lambda s: len(s ^ ours_reasons), default=frozenset()
    )
    return RunVerdict(
        foreign=foreign,
        settled_agrees=any(settled in states for states in reachable),
        events_agree=events_agree,
        only_ours=ours_reasons - closest,
        only_reference=frozenset() if events_agree else closest - ours_reasons,
    )


def _times(record: PodRecord) -> list[float]:
    if len(record.times) == len(record.states):
        return record.times
    return [0.0] * len(record.states)


@dataclass(frozen=True)
class Verdict:
    """One scenario: our runs, the reference runs, and how they compare."""

    name: str
    ours: tuple[PodRecord, ...]
    reference: tuple[PodRecord, ...]
    runs: tuple[RunVerdict, ...]  # one per run of ours
    foreign: tuple[Foreign, ...]  # every run's, each state once, in the order first seen
    reference_alike: int | None  # reference runs that agree with the other reference runs

    @property
    def agrees(self) -> bool:
        return bool(self.runs) and all(run.agrees for run in self.runs)

    @property
    def ours_agreeing(self) -> int:
        return sum(run.agrees for run in self.runs)

    @property
    def only_ours(self) -> frozenset[str]:
        return frozenset().union(*(run.only_ours for run in self.runs))

    @property
    def only_reference(self) -> frozenset[str]:
        return frozenset().union(*(run.only_reference for run in self.runs))


def judge(name: str, ours: Sequence[PodRecord], reference: Sequence[PodRecord]) -> Verdict:
    """The verdict on one scenario from its records on both nodes (any number of runs each)."""
    runs = tuple(judge_run(record, reference) for record in ours)
    reference_states = [state for record in reference for state in record.states]
    foreign = tuple(
        Foreign(state, nearest(state, reference_states))
        for state in dict.fromkeys(state for run in runs for state in run.foreign)
    )
    alike = None
    if len(reference) > 1:
        alike = sum(
            judge_run(record, [*reference[:i], *reference[i + 1 :]]).agrees
            for i, record in enumerate(reference)
        )
    return Verdict(name, tuple(ours), tuple(reference), runs, foreign, alike)


def judge_all(records: Iterable[PodRecord], order: Sequence[str] = ()) -> list[Verdict]:
    """A verdict per scenario of `records` (in `order`, then the others as first met)."""
    by_scenario: dict[str, dict[str, list[PodRecord]]] = {name: {} for name in order}
    for record in records:
        sides = by_scenario.setdefault(record.scenario, {})
        sides.setdefault(record.side, []).append(record)
    verdicts = []
    for name, sides in by_scenario.items():
        ours = sorted(sides.get(OURS, []), key=lambda r: r.run)
        reference = sorted(sides.get(REFERENCE, []), key=lambda r: r.run)
        verdicts.append(judge(name, ours, reference))
    return verdicts
