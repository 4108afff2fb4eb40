"""Run scenarios on two nodes of one cluster at once and record what the API shows of each pod.

`run_compare` makes a fresh namespace (with its `default` ServiceAccount and `kube-root-ca.crt`
where no controller makes them in time), then for each run creates every scenario's pod twice,
pinned by `spec.nodeName` to our node and to the reference node (tolerating both nodes'
taints), all at once. The package's own Informer watches the namespace's pods and events: every
status the watch delivers is normalised (`states.normalise`) into the pod's record until its
observation ends, as is each Event about it. Deletions a scenario asks for are made on time; at
the end of a run its pods are deleted and waited for, so runs do not overlap. The pods and the
namespace are removed at the end, also when `stop` is set (Ctrl-C), then without grace.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.compare.node_view import NodeComparison, compare_nodes
from kubelet_sim.compare.scenarios import (
    OBJECT_KINDS,
    WHEN_RUNNING,
    Scenario,
    pod_for,
    tolerations_for,
)
from kubelet_sim.compare.states import GONE, OURS, REFERENCE, PodRecord, normalise
from kubelet_sim.compare.verdict import Verdict, judge_all
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import DELETED, Informer
from kubelet_sim.kube.rest import ApiError, exists, request_json
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.kube.watches import events_in_namespace, pods_in_namespace
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.generation import generation_of

LABEL = "kubelet-sim.io/compare"
SIDE_LABEL = "kubelet-sim.io/compare-side"
SIDE_SUFFIX = {OURS: "ours", REFERENCE: "ref"}
NAMESPACE_PREFIX = "kubelet-sim-compare-"
SYNC_TIMEOUT = 30.0  # the first list of pods and events
DEFAULTS_WAIT = 5.0  # how long a controller gets to fill the new namespace
GONE_WAIT = 30.0  # past the longest grace period, for the pods of a run to be gone
FORCED_WAIT = 10.0
TICK = 0.5  # the longest wait without looking at `stop`
STRATEGIC_MERGE = "application/strategic-merge-patch+json"

Progress = Callable[[str], None]


class CompareError(Exception):
    """The comparison could not run (a node missing, a pod refused, no rights)."""


# How much longer than ours the reference's pod is watched: our node may get somewhere faster
# than the kubelet (a Docker event instead of a relist each second), never somewhere else.
REFERENCE_SLACK = 1.5


@dataclass
class Comparison:
    """What a compare run recorded; `verdicts()` judges it."""

    namespace: str
    node: str
    reference_node: str
    scenarios: list[Scenario]
    runs: int
    records: list[PodRecord] = field(default_factory=list)
    interrupted: bool = False
    # The two Node objects as they were before the scenarios (node_view.py).
    node_objects: NodeComparison = field(default_factory=NodeComparison)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (scenario, why)

    def verdicts(self) -> list[Verdict]:
        return judge_all(self.records, [scenario.name for scenario in self.scenarios])


@dataclass
class _Watched:
    record: PodRecord
    scenario: Scenario
    deadline: float  # monotonic: the end of its observation
    delete_at: float | None  # monotonic, for a delete after N seconds
    deleted: bool = False
    start: float = 0.0  # monotonic: its creation
    patched: bool = False

    def since_start(self, now: float) -> float:
        return now - self.start

    @property
    def seen_running(self) -> bool:
        return any(state.phase == "Running" for state in self.record.states)

    def delete_due(self, now: float) -> bool:
        if self.deleted:
            return False
        return self._due(self.scenario.delete_after, self.delete_at, now)

    def patch_due(self, now: float) -> bool:
        if self.patched or self.deleted or self.scenario.patch is None:
            return False
        return self._due(self.scenario.patch_after, self.patch_at, now)

    @property
    def patch_at(self) -> float | None:
        after = self.scenario.patch_after
        return self.start + after if isinstance(after, float | int) else None

    def _due(self, when: float | str | None, at: float | None, now: float) -> bool:
        if when == WHEN_RUNNING:
            return self.seen_running
        return at is not None and now >= at


class _Recorder:
    """The informers' handlers: each delivery into the record of its pod, while observed."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.changed = threading.Condition()
        self.watched: dict[str, _Watched] = {}

    def watch(self, watched: _Watched) -> None:
        with self.changed:
            self.watched[watched.record.pod] = watched

    def _open(self, name: str) -> _Watched | None:
        watched = self.watched.get(name)
        if watched is None or self.clock.monotonic() > watched.deadline:
            return None
        return watched

    def on_pod(self, kind: str, pod: Json) -> None:
        name = str((pod.get("metadata") or {}).get("name") or "")
        with self.changed:
            watched = self._open(name)
            if watched is not None and watched.record.add(
                GONE if kind == DELETED else normalise(pod),
                watched.since_start(self.clock.monotonic()),
            ):
                self.changed.notify_all()

    def on_event(self, kind: str, event: Json) -> None:
        involved: Json = event.get("involvedObject") or {}
        if kind == DELETED or involved.get("kind") != "Pod":
            return
        with self.changed:
            watched = self._open(str(involved.get("name") or ""))
            if watched is not None:
                watched.record.add_event(
                    str((event.get("metadata") or {}).get("name") or ""),
                    str(event.get("type") or ""),
                    str(event.get("reason") or ""),
                    int(event.get("count") or (event.get("series") or {}).get("count") or 1),
                    watched.since_start(self.clock.monotonic()),
                )


def pod_name(scenario: str, side: str, run: int) -> str:
    """`crash-loop-always-ours-1`, `crash-loop-always-ref-1`."""
    return f"{scenario}-{SIDE_SUFFIX[side]}-{run}"


def run_compare(
    kube: KubeConnection,
    node: str,
    reference_node: str,
    scenarios: Sequence[Scenario],
    *,
    image: str,
    runs: int = 1,
    observe: float | None = None,
    stop: threading.Event | None = None,
    progress: Progress = lambda _line: None,
    clock: Clock = SYSTEM_CLOCK,
) -> Comparison:
    """Run `scenarios` `runs` times on `node` (ours) and `reference_node` and record them.

    `observe` overrides every scenario's observation time (seconds). Returns the records
    (judge them with `Comparison.verdicts()`); `interrupted` when `stop` was set before the
    end. Raises CompareError when the comparison cannot run; the namespace is removed anyway.
    """
    if runs < 1:
        raise CompareError("runs must be at least 1")
    if not scenarios:
        raise CompareError("no scenario to run")
    if node == reference_node:
        raise CompareError("the node and the reference node must differ")
    stop = stop or threading.Event()
    api = kube.api
    nodes = (_read_node(kube, node), _read_node(kube, reference_node))
    scenarios, skipped = _for_server(kube, scenarios, progress)
    tolerations = tolerations_for([taint for read in nodes for taint in _taints(read)])
    namespace = f"{NAMESPACE_PREFIX}{secrets.token_hex(3)}"
    comparison = Comparison(namespace, node, reference_node, list(scenarios), runs)
    comparison.node_objects = compare_nodes(*nodes)
    comparison.skipped = skipped
    recorder = _Recorder(clock)
    try:
        request_json(
            api,
            "POST",
            "/api/v1/namespaces",
            {"metadata": {"name": namespace, "labels": {LABEL: "true"}}},
        )
    except ApiError as exc:
        raise CompareError(f"cannot create namespace {namespace}: {exc}") from exc
    progress(f"namespace {namespace}; ours: {node}, reference: {reference_node}")
    supervisor = Supervisor(tool="compare")  # the command's own watches, no node's
    informers = [
        Informer(pods_in_namespace(api, namespace), recorder.on_pod, supervisor=supervisor),
        Informer(events_in_namespace(api, namespace), recorder.on_event, supervisor=supervisor),
    ]
    try:
        for informer in informers:
            informer.start()
        _namespace_defaults(kube, namespace, stop, clock)
        _create_objects(kube, namespace, scenarios)
        for informer in informers:
            if not informer.answered.wait(SYNC_TIMEOUT) or informer.refused.is_set():
                raise CompareError(f"cannot list and watch {informer.source.description}")
        for run in range(1, runs + 1):
            if stop.is_set():
                break
            created = _start_run(
                kube, namespace, recorder, scenarios, run, (node, reference_node), clock,
                image=image, tolerations=tolerations, observe=observe,
            )  # fmt: skip
            comparison.records += [watched.record for watched in created]
            longest = max(watched.deadline for watched in created) - clock.monotonic()
            progress(f"run {run}/{runs}: {len(created)} pods created, observed for {longest:.0f} s")
            _observe(kube, namespace, recorder, created, stop, clock)
            if not stop.is_set():
                progress(f"run {run}/{runs}: deleting its pods")
                _delete_and_wait(kube, namespace, informers[0], created, stop, clock)
    finally:
        comparison.interrupted = stop.is_set()
        _clean_up(kube, namespace, informers[0], progress)
        for informer in informers:
            informer.stop()
    return comparison


def _for_server(
    kube: KubeConnection, scenarios: Sequence[Scenario], progress: Progress
) -> tuple[list[Scenario], list[tuple[str, str]]]:
    """The scenarios this server's kubelets can show, and those skipped with why."""
    if not any(scenario.since for scenario in scenarios):
        return list(scenarios), []
    schema = ServerSchema.of_server(kube.api)
    minor = generation_of(schema.version(), schema.properties()).minor
    runnable = [s for s in scenarios if s.since <= minor]
    skipped = [
        (s.name, f"shows what v1.{s.since} brought; the API server (and so its kubelets) is older")
        for s in scenarios
        if s.since > minor
    ]
    if not runnable:
        raise CompareError("no scenario for this API server's version: " + skipped[0][1])
    for name, why in skipped:
        progress(f"skipped {name}: {why}")
    return runnable, skipped


def _read_node(kube: KubeConnection, name: str) -> Json:
    try:
        return request_json(kube.api, "GET", f"/api/v1/nodes/{name}")
    except ApiError as exc:
        if exc.not_found:
            raise CompareError(f"node {name} not found") from exc
        raise CompareError(f"cannot read node {name}: {exc}") from exc


def _taints(node: Json) -> list[Json]:
    taints: list[Json] = (node.get("spec") or {}).get("taints") or []
    return taints


def _wait_until(
    condition: Callable[[], bool], timeout: float, stop: threading.Event, clock: Clock
) -> bool:
    """Whether `condition` held before the deadline (asked every 0.2 s; False on `stop`)."""
    deadline = clock.monotonic() + timeout
    while not condition():
        left = deadline - clock.monotonic()
        if left <= 0 or stop.wait(min(left, 0.2)):
            return False
    return True


def _namespace_defaults(
    kube: KubeConnection, namespace: str, stop: threading.Event, clock: Clock
) -> None:
    """The ServiceAccount `default` (pods are refused without it) and the ConfigMap
    `kube-root-ca.crt` (an automounted token's volume reads it): a controller-manager makes
    them; a cluster without one (a bare control plane) gets them from us after a short wait."""
    base = f"/api/v1/namespaces/{namespace}"
    wanted: list[tuple[str, Json]] = [
        (f"{base}/serviceaccounts", {"metadata": {"name": "default"}}),
    ]
    ca_file = kube.ca_file
    if ca_file and Path(ca_file).is_file():
        ca = Path(ca_file).read_text()
        wanted.append(
            (
                f"{base}/configmaps",
                {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ca}},
            )
        )
    for collection, body in wanted:
        path = f"{collection}/{body['metadata']['name']}"
        if _wait_until(lambda path=path: exists(kube.api, path), DEFAULTS_WAIT, stop, clock):  # type: ignore[misc]
            continue
        with contextlib.suppress(ApiError):  # made meanwhile (AlreadyExists), or not ours to make
            request_json(kube.api, "POST", collection, body)


def _create_objects(kube: KubeConnection, namespace: str, scenarios: Sequence[Scenario]) -> None:
    made: set[tuple[str, str]] = set()
    for scenario in scenarios:
        for obj in scenario.objects:
            key = (str(obj["kind"]), str(obj["metadata"]["name"]))
            if key in made:
                continue
            path = f"/api/v1/namespaces/{namespace}/{OBJECT_KINDS[key[0]]}"
            try:
                request_json(kube.api, "POST", path, obj)
            except ApiError as exc:
                raise CompareError(f"scenario {scenario.name}: {key[0]} {key[1]}: {exc}") from exc
            made.add(key)


def _start_run(
    kube: KubeConnection,
    namespace: str,
    recorder: _Recorder,
    scenarios: Sequence[Scenario],
    run: int,
    nodes: tuple[str, str],
    clock: Clock,
    *,
    image: str,
    tolerations: list[Json],
    observe: float | None,
) -> list[_Watched]:
    """Every scenario's pod on both nodes, created one after the other, watched from before
    its creation (its ADDED may come before the POST's answer)."""
    created = []
    for scenario in scenarios:
        for side, node in zip((OURS, REFERENCE), nodes, strict=True):
            name = pod_name(scenario.name, side, run)
            body = pod_for(
                scenario, name=name, node=node, image=image, tolerations=tolerations,
                labels={LABEL: scenario.name, SIDE_LABEL: side},
            )  # fmt: skip
            start = clock.monotonic()
            after = scenario.delete_after
            window = scenario.observe if observe is None else observe
            slack = REFERENCE_SLACK if side == REFERENCE else 1.0
            watched = _Watched(
                PodRecord(scenario.name, side, run, name, window=window),
                scenario,
                deadline=start + window * slack,
                delete_at=start + after if isinstance(after, float | int) else None,
                start=start,
            )
            recorder.watch(watched)
            try:
                request_json(kube.api, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
            except ApiError as exc:
                raise CompareError(f"scenario {scenario.name}: pod refused: {exc}") from exc
            created.append(watched)
    return created


def _observe(
    kube: KubeConnection,
    namespace: str,
    recorder: _Recorder,
    created: list[_Watched],
    stop: threading.Event,
    clock: Clock,
) -> None:
    """Until every pod's observation is over: make the deletions that come due."""
    end = max(watched.deadline for watched in created)
    while not stop.is_set():
        now = clock.monotonic()
        if now >= end:
            return
        with recorder.changed:
            patches = [w for w in created if now <= w.deadline and w.patch_due(now)]
            for watched in patches:
                watched.patched = True
            due = [w for w in created if now <= w.deadline and w.delete_due(now)]
            for watched in due:
                watched.deleted = True
        for watched in patches:
            _patch(kube, namespace, watched)
        for watched in due:
            _delete(kube, namespace, watched.record.pod)
        timed = [w.delete_at for w in created if not w.deleted and w.delete_at is not None]
        timed += [w.patch_at for w in created if not w.patched and w.patch_at is not None]
        wake = min([end, *timed]) - clock.monotonic()
        with recorder.changed:  # a new state may make a delete due (`Running`)
            recorder.changed.wait(max(min(wake, TICK), 0.0))


def _patch(kube: KubeConnection, namespace: str, watched: _Watched) -> None:
    scenario = watched.scenario
    path = f"/api/v1/namespaces/{namespace}/pods/{watched.record.pod}"
    if scenario.patch_subresource:
        path += f"/{scenario.patch_subresource}"
    try:
        request_json(kube.api, "PATCH", path, scenario.patch, content_type=STRATEGIC_MERGE)
    except ApiError as exc:
        if not exc.not_found:
            raise CompareError(f"scenario {scenario.name}: patch refused: {exc}") from exc


def _delete(kube: KubeConnection, namespace: str, name: str, grace: int | None = None) -> None:
    body: Json | None = None
    if grace is not None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace}
    try:
        request_json(kube.api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
    except ApiError as exc:
        if not exc.not_found:
            raise


def _delete_and_wait(
    kube: KubeConnection,
    namespace: str,
    pods: Informer,
    created: list[_Watched],
    stop: threading.Event,
    clock: Clock,
) -> None:
    """Delete a run's pods with their own grace periods and wait them gone; force the rest."""
    names = [watched.record.pod for watched in created]
    for name in names:
        _delete(kube, namespace, name)
    graces = [_grace(watched.scenario) for watched in created]

    def gone() -> bool:
        return not {f"{namespace}/{name}" for name in names} & pods.keys()

    if _wait_until(gone, max(graces, default=30) + GONE_WAIT, stop, clock):
        return
    for key in sorted({f"{namespace}/{name}" for name in names} & pods.keys()):
        _delete(kube, namespace, key.split("/", 1)[1], grace=0)
    _wait_until(gone, FORCED_WAIT, threading.Event(), clock)


def _grace(scenario: Scenario) -> float:
    spec: Json = scenario.pod.get("spec") or {}
    try:
        return min(float(spec.get("terminationGracePeriodSeconds", 30)), 600.0)
    except (TypeError, ValueError):
        return 30.0


def _clean_up(kube: KubeConnection, namespace: str, pods: Informer, progress: Progress) -> None:
    """Remove what is left without grace, then the namespace (not waited for)."""
    with contextlib.suppress(ApiError, OSError):
        for key in sorted(pods.keys()):
            _delete(kube, namespace, key.split("/", 1)[1], grace=0)
    try:
        request_json(kube.api, "DELETE", f"/api/v1/namespaces/{namespace}")
    except (ApiError, OSError) as exc:
        progress(f"could not delete namespace {namespace}: {exc}")
        return
    progress(f"namespace {namespace} deleted")
