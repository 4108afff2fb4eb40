"""A pod's status as a comparable *state*, and what one pod showed while it was observed.

`normalise(pod)` keeps what a node decides and drops what differs by nature between two nodes
or two runs (timestamps, container and image ids, IPs, messages). A state is a flat, sorted
set of `key → value` strings, so two states compare by equality and differ field by field:

- `phase`, `reason` (the pod's: `DeadlineExceeded`, `Evicted`)
- `cond.<Type>`: `True` or `False/<Reason>`
- per container, `<prefix>.<name>` with prefix `init`, `c` (app) or `eph` (ephemeral):
  the state, `waiting:<Reason>`, `running` or `terminated:<Reason>(<exitCode>)` (`none`
  when the status has no state); `.ready`, `.started` (only when written), `.restarts`,
  `.last` (`lastState.terminated`'s reason, or `exit <code>` when it has none), and where
  the status has them (v1.30+ kubelets) `.resources`, `.allocatedResources`, `.volumeMounts`,
  `.user` as compact JSON
- `observedGeneration`: `current` or `behind` (the pod's `metadata.generation`), where written

`GONE` stands for the pod deleted from the API (the watch's DELETED): whether and when a node
finishes a deletion is part of what it does. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubelet_sim.formats.jsontypes import Json

CONTAINER_KINDS = (("init", "initContainerStatuses"), ("c", "containerStatuses"))
EPHEMERAL = ("eph", "ephemeralContainerStatuses")
_PREFIXES = ("init", "c", "eph")
OURS, REFERENCE = "ours", "reference"  # the two sides of a comparison


@dataclass(frozen=True, order=True)
class PodState:
    """One normalised status; `fields` sorted by key (hashable, comparable)."""

    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, values: Mapping[str, str]) -> PodState:
        return cls(tuple(sorted(values.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.fields)

    def get(self, key: str, default: str = "") -> str:
        return self.as_dict().get(key, default)

    @property
    def phase(self) -> str:
        return self.get("phase")

    @property
    def gone(self) -> bool:
        return self == GONE

    def brief(self) -> str:
        """Phase, reason and containers, without conditions: `Running main=running r1 +ready`."""
        if self.gone:
            return self.short()
        values = self.as_dict()
        parts = [values.get("phase") or "(no phase)"]
        if values.get("reason"):
            parts.append(f"reason={values['reason']}")
        parts += [_container_short(name, values, brief=True) for name in container_keys(values)]
        return " ".join(parts)

    def short(self) -> str:
        """One line for people: `Running Ready=False/ContainersNotReady | main=running r1`."""
        if self.gone:
            return "(gone from the API)"
        values = self.as_dict()
        head = [values.get("phase") or "(no phase)"]
        if values.get("reason"):
            head.append(f"reason={values['reason']}")
        head += [f"{key[5:]}={v}" for key, v in values.items() if key.startswith("cond.")]
        parts = [" ".join(head)]
        parts += [_container_short(name, values) for name in container_keys(values)]
        return " | ".join(parts)


GONE = PodState((("gone", "true"),))


def container_keys(values: Mapping[str, str]) -> list[str]:
    """`init.x`, `c.y`, … in the order init, app, ephemeral (each sorted by name)."""
    prefixes = tuple(f"{p}." for p in _PREFIXES)
    bases = [k for k in values if k.startswith(prefixes) and k.count(".") == 1]  # no dot in names
    return sorted(bases, key=lambda k: (_PREFIXES.index(k.split(".", 1)[0]), k))


def _container_short(base: str, values: Mapping[str, str], *, brief: bool = False) -> str:
    """`c.main=terminated:Error(1) r1 last=Error`, with `ready`/`started` when true; `brief`:
    `main=…` for an app container, `init:x=…`/`eph:x=…` for the others."""
    prefix, name = base.split(".", 1)
    label = (name if prefix == "c" else f"{prefix}:{name}") if brief else base
    text = [f"{label}={values[base]}"]
    restarts = values.get(f"{base}.restarts", "0")
    if restarts != "0":
        text.append(f"r{restarts}")
    if values.get(f"{base}.last"):
        text.append(f"last={values[f'{base}.last']}")
    flags = [flag for flag in ("ready", "started") if values.get(f"{base}.{flag}") == "true"]
    if f"{base}.started" not in values:
        flags.append("started?")  # not written at all (a status without the field)
    if flags:
        text.append("+".join(flags))
    return " ".join(text)


def _container_state(status: Json) -> str:
    state: Json = status.get("state") or {}
    for kind in ("waiting", "running", "terminated"):
        if kind in state:
            detail: Json = state.get(kind) or {}
            value: str = kind
            if detail.get("reason"):
                value += f":{detail['reason']}"
            if kind == "terminated":
                value += f"({detail.get('exitCode')})"
            return value
    return "none"


def normalise(pod: Json) -> PodState:
    """The comparable state of a pod as the API shows it (see the module's docstring)."""
    status: Json = pod.get("status") or {}
    values: dict[str, str] = {"phase": str(status.get("phase") or "")}
    if status.get("reason"):
        values["reason"] = str(status["reason"])
    generation = _generation_seen(pod)
    if generation:
        values["observedGeneration"] = generation
    for condition in status.get("conditions") or []:
        text = str(condition.get("status") or "")
        if condition.get("reason"):
            text += f"/{condition['reason']}"
        values[f"cond.{condition.get('type')}"] = text
    for prefix, key in (*CONTAINER_KINDS, EPHEMERAL):
        for container in status.get(key) or []:
            base = f"{prefix}.{container.get('name')}"
            values[base] = _container_state(container)
            values[f"{base}.ready"] = "true" if container.get("ready") else "false"
            if container.get("started") is not None:
                values[f"{base}.started"] = "true" if container["started"] else "false"
            values[f"{base}.restarts"] = str(container.get("restartCount") or 0)
            for field_name in ("resources", "allocatedResources", "volumeMounts", "user"):
                if container.get(field_name):
                    values[f"{base}.{field_name}"] = json.dumps(
                        container[field_name], sort_keys=True, separators=(",", ":")
                    )
            last: Json = (container.get("lastState") or {}).get("terminated") or {}
            if last:
                values[f"{base}.last"] = str(last.get("reason") or f"exit {last.get('exitCode')}")
    return PodState.of(values)


def _generation_seen(pod: Json) -> str:
    """`current` or `behind`: whether the status tells of the pod's latest spec (v1.33+
    kubelets write observedGeneration). Not judged during a deletion, which bumps the
    generation of a pod whose node may not write again before it is gone."""
    meta: Json = pod.get("metadata") or {}
    seen = (pod.get("status") or {}).get("observedGeneration")
    if seen is None or meta.get("deletionTimestamp"):
        return ""
    return "current" if seen >= (meta.get("generation") or 0) else "behind"


def collapse(states: Iterable[PodState]) -> list[PodState]:
    """Consecutive identical states as one."""
    out: list[PodState] = []
    for state in states:
        if not out or out[-1] != state:
            out.append(state)
    return out


EventKey = tuple[str, str]  # (type, reason)


@dataclass
class PodRecord:
    """What one pod of one run showed while observed: its states and its events.

    `side` is OURS or REFERENCE; `events` maps each Event object's name to its type,
    reason and count as last seen (an event repeated is one object with a growing count).
    `times` and `event_times` say when each state and event was first seen (seconds from the
    pod's creation), `window` how long our node's pod is observed: the reference is watched
    longer (REFERENCE_SLACK), since ours may be faster than the kubelet, never elsewhere.
    """

    scenario: str
    side: str
    run: int
    pod: str
    states: list[PodState] = field(default_factory=list)
    events: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    event_times: dict[str, float] = field(default_factory=dict)
    window: float = math.inf

    def add(self, state: PodState, at: float = 0.0) -> bool:
        """Record a state unless it repeats the last one; whether it was new."""
        if self.states and self.states[-1] == state:
            return False
        self.states.append(state)
        self.times.append(at)
        return True

    def add_event(self, name: str, kind: str, reason: str, count: int, at: float = 0.0) -> None:
        self.events[name] = (kind, reason, max(count, 1))
        self.event_times.setdefault(name, at)

    @property
    def settled(self) -> PodState | None:
        """The state at the end of our window (None: the pod was never seen by then)."""
        return self.state_at(self.window)

    def _index_at(self, at: float) -> int:
        """The index of the state held at `at` (-1: none yet)."""
        times = self.times if len(self.times) == len(self.states) else [0.0] * len(self.states)
        return bisect.bisect_right(times, at) - 1

    def state_at(self, at: float) -> PodState | None:
        """The state held `at` seconds in (the last one for a time past the end)."""
        index = self._index_at(at)
        return self.states[index] if index >= 0 else None

    def states_from(self, at: float) -> set[PodState]:
        """The state held at `at` and every one after it."""
        return set(self.states[max(self._index_at(at), 0) :])

    def reasons_by(self, at: float) -> frozenset[str]:
        """The event reasons seen by `at` seconds in."""
        return frozenset(
            reason
            for name, (_, reason, _) in self.events.items()
            if self.event_times.get(name, 0.0) <= at
        )

    def event_counts(self) -> Counter[EventKey]:
        counts: Counter[EventKey] = Counter()
        for kind, reason, count in self.events.values():
            counts[(kind, reason)] += count
        return counts

    def event_reasons(self) -> frozenset[str]:
        return frozenset(reason for _, reason, _ in self.events.values())
