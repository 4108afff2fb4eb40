"""`kubelet-sim compare`'s pure parts: the normaliser, the verdicts, scenarios and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.compare.report import as_json, table
from kubelet_sim.compare.scenarios import (
    WHEN_RUNNING,
    Scenario,
    ScenarioError,
    builtin_scenarios,
    parse_scenario,
    pod_for,
    resolve,
    tolerations_for,
)
from kubelet_sim.compare.states import (
    GONE,
    OURS,
    REFERENCE,
    PodRecord,
    PodState,
    collapse,
    normalise,
)
from kubelet_sim.compare.verdict import judge, judge_all


def _pod(phase: str = "Running", **container: Any) -> dict[str, Any]:
    """A pod as the API shows it, with the noise normalise must drop."""
    status = {
        "name": "main",
        "state": {"running": {"startedAt": "2026-11-02T10:00:00Z"}},
        "ready": True,
        "started": True,
        "restartCount": 0,
        "containerID": "docker://abc",
        "imageID": "docker-pullable://busybox@sha256:1",
        "image": "busybox",
    }
    status.update(container)
    return {
        "metadata": {"name": "p", "uid": "u1", "resourceVersion": "7"},
        "status": {
            "phase": phase,
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.5",
            "startTime": "2026-11-02T10:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-02T10:00:01Z"},
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [main]",
                },
            ],
            "containerStatuses": [status],
        },
    }


def _crashed(restarts: int, waiting: bool) -> dict[str, Any]:
    state = (
        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}}
        if waiting
        else {"terminated": {"reason": "Error", "exitCode": 1, "finishedAt": "x"}}
    )
    return _pod(
        state=state,
        ready=False,
        started=False,
        restartCount=restarts,
        lastState={"terminated": {"reason": "Error", "exitCode": 1, "startedAt": "y"}},
    )


# -- normalise -------------------------------------------------------------------------------


def test_normalise_keeps_what_a_node_decides_and_drops_times_ids_ips_and_messages() -> None:
    state = normalise(_crashed(2, waiting=True))
    assert state.as_dict() == {
        "phase": "Running",
        "cond.Ready": "True",
        "cond.ContainersReady": "False/ContainersNotReady",
        "c.main": "waiting:CrashLoopBackOff",
        "c.main.ready": "false",
        "c.main.started": "false",
        "c.main.restarts": "2",
        "c.main.last": "Error",
    }
    text = json.dumps(state.as_dict())
    for noise in ("10.0.0.1", "10.1.0.5", "docker://", "2026-", "back-off", "unready status"):
        assert noise not in text


def test_two_runs_of_the_same_behaviour_normalise_alike() -> None:
    one, other = _pod(), _pod(containerID="docker://def", imageID="other")
    other["metadata"] = {"name": "q", "uid": "u2", "resourceVersion": "99"}
    other["status"]["podIP"] = "10.1.0.9"
    assert normalise(one) == normalise(other)


def test_normalise_terminated_exit_codes_init_containers_and_the_pod_reason() -> None:
    pod = {
        "status": {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
            "initContainerStatuses": [
                {
                    "name": "init",
                    "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
                    "ready": True,
                    "restartCount": 0,
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {"terminated": {"exitCode": 137}},
                    "ready": False,
                    "restartCount": 1,
                    "lastState": {"terminated": {"exitCode": 2}},
                },
                {"name": "side", "state": {}, "ready": False, "restartCount": 0},
            ],
        }
    }
    values = normalise(pod).as_dict()
    assert values["reason"] == "DeadlineExceeded"
    assert values["init.init"] == "terminated:Completed(0)"
    assert "init.init.started" not in values  # not written: not made up either
    assert values["c.main"] == "terminated(137)"
    assert values["c.main.last"] == "exit 2"
    assert values["c.side"] == "none"


def test_a_pod_with_no_status_yet_is_a_state_too() -> None:
    assert normalise({"metadata": {"name": "p"}}).as_dict() == {"phase": ""}


def test_short_and_brief_read_as_one_line() -> None:
    state = normalise(_crashed(1, waiting=False))
    assert state.short() == (
        "Running ContainersReady=False/ContainersNotReady Ready=True"  # conditions by name
        " | c.main=terminated:Error(1) r1 last=Error"
    )
    assert state.brief() == "Running main=terminated:Error(1) r1 last=Error"
    assert normalise(_pod()).brief() == "Running main=running ready+started"
    assert GONE.short() == GONE.brief() == "(gone from the API)"


def test_consecutive_identical_states_collapse() -> None:
    a, b = normalise(_pod("Pending")), normalise(_pod())
    assert collapse([a, a, b, b, a]) == [a, b, a]
    record = PodRecord("s", OURS, 1, "s-ours-1")
    assert [record.add(s) for s in (a, a, b)] == [True, False, True]
    assert record.states == [a, b]
    assert record.settled == b


# -- verdicts --------------------------------------------------------------------------------


def _record(side: str, run: int, *states: PodState, events: tuple[str, ...] = ()) -> PodRecord:
    record = PodRecord("crash", side, run, f"crash-{side}-{run}")
    for state in states:
        record.add(state)
    for i, reason in enumerate(events):
        record.add_event(f"e{i}", "Warning" if reason == "BackOff" else "Normal", reason, 1)
    return record


PENDING = normalise(_pod("Pending", state={"waiting": {"reason": "ContainerCreating"}}))
TERMINATED = normalise(_crashed(1, waiting=False))
BACKOFF = normalise(_crashed(1, waiting=True))
EVENTS = ("Pulled", "Created", "Started")


def test_the_same_sequence_and_events_agree() -> None:
    verdict = judge(
        "crash",
        [_record(OURS, 1, PENDING, TERMINATED, events=EVENTS)],
        [_record(REFERENCE, 1, PENDING, TERMINATED, events=(*EVENTS, "Started"))],
    )
    assert verdict.agrees
    assert verdict.foreign == ()
    assert verdict.reference_alike is None  # one reference run: its noise is unknown


def test_a_state_the_reference_never_showed_is_foreign_with_its_nearest_reference_state() -> None:
    verdict = judge(
        "crash",
        [_record(OURS, 1, PENDING, BACKOFF, TERMINATED, events=EVENTS)],
        [_record(REFERENCE, 1, PENDING, TERMINATED, events=EVENTS)],
    )
    assert not verdict.agrees
    (foreign,) = verdict.foreign
    assert foreign.state == BACKOFF
    assert foreign.nearest == TERMINATED
    assert foreign.differences() == {"c.main": ("waiting:CrashLoopBackOff", "terminated:Error(1)")}
    assert foreign.short() == "c.main: waiting:CrashLoopBackOff (ref terminated:Error(1))"
    (run,) = verdict.runs
    assert run.settled_agrees
    assert run.events_agree


def test_a_state_any_reference_run_showed_is_not_foreign_and_settled_may_be_any_runs() -> None:
    reference = [
        _record(REFERENCE, 1, PENDING, TERMINATED, events=EVENTS),
        _record(REFERENCE, 2, PENDING, BACKOFF, events=EVENTS),
    ]
    ours = [_record(OURS, 1, PENDING, TERMINATED, BACKOFF, events=EVENTS)]
    verdict = judge("crash", ours, reference)
    assert verdict.agrees
    # The reference settles two ways: neither of its runs agrees with the other. Its noise.
    assert verdict.reference_alike == 0


def test_a_settled_state_no_reference_run_ended_in_disagrees() -> None:
    verdict = judge(
        "crash",
        [_record(OURS, 1, PENDING, TERMINATED, events=EVENTS)],
        [_record(REFERENCE, 1, PENDING, TERMINATED, BACKOFF, events=EVENTS)],
    )
    assert verdict.foreign == ()
    assert not verdict.runs[0].settled_agrees
    assert not verdict.agrees


def test_event_reasons_must_match_one_reference_run_counts_aside() -> None:
    reference = [
        _record(REFERENCE, 1, PENDING, events=("Pulled", "Created")),
        _record(REFERENCE, 2, PENDING, events=("Pulled", "Failed")),
    ]
    same_as_second = judge("x", [_record(OURS, 1, PENDING, events=("Failed", "Pulled"))], reference)
    assert same_as_second.agrees
    extra = judge(
        "x", [_record(OURS, 1, PENDING, events=("Pulled", "Created", "BackOff"))], reference
    )
    assert not extra.agrees
    assert extra.only_ours == {"BackOff"}
    assert extra.only_reference == set()


def test_the_references_own_noise_is_counted() -> None:
    reference = [
        _record(REFERENCE, 1, PENDING, TERMINATED, events=EVENTS),
        _record(REFERENCE, 2, PENDING, TERMINATED, events=EVENTS),
        _record(REFERENCE, 3, PENDING, BACKOFF, events=EVENTS),  # the odd one
    ]
    verdict = judge("crash", [_record(OURS, 1, PENDING, TERMINATED, events=EVENTS)], reference)
    assert verdict.reference_alike == 2
    assert verdict.agrees


def test_every_run_of_ours_must_agree() -> None:
    reference = [_record(REFERENCE, 1, PENDING, TERMINATED, events=EVENTS)]
    ours = [
        _record(OURS, 1, PENDING, TERMINATED, events=EVENTS),
        _record(OURS, 2, PENDING, BACKOFF, events=EVENTS),
    ]
    verdict = judge("crash", ours, reference)
    assert verdict.ours_agreeing == 1
    assert not verdict.agrees


def test_no_run_at_all_never_agrees() -> None:
    assert not judge("x", [], []).agrees
    assert not judge("x", [_record(OURS, 1, PENDING)], []).agrees
    assert not judge("x", [_record(OURS, 1)], [_record(REFERENCE, 1, PENDING)]).agrees


def test_a_pod_gone_from_the_api_is_a_state_of_its_own() -> None:
    verdict = judge(
        "del",
        [_record(OURS, 1, PENDING, TERMINATED)],
        [_record(REFERENCE, 1, PENDING, TERMINATED, GONE)],
    )
    assert not verdict.agrees  # ours never finished the deletion
    assert verdict.reference[0].settled == GONE


def test_judge_all_groups_by_scenario_in_the_order_given() -> None:
    records = [
        _record(REFERENCE, 1, PENDING),
        _record(OURS, 1, PENDING),
    ]
    other = PodRecord("other", OURS, 1, "other-ours-1", [PENDING])
    verdicts = judge_all([*records, other], order=["other", "crash"])
    assert [v.name for v in verdicts] == ["other", "crash"]
    assert verdicts[1].agrees
    assert not verdicts[0].agrees  # no reference run


# -- the report ------------------------------------------------------------------------------


def test_json_and_table_say_what_agrees_and_what_differs() -> None:
    agreeing = judge("same", [_record(OURS, 1, PENDING)], [_record(REFERENCE, 1, PENDING)])
    differing = judge(
        "crash-loop",
        [_record(OURS, 1, PENDING, BACKOFF, events=("BackOff",))],
        [_record(REFERENCE, 1, PENDING, TERMINATED, events=("Pulled",))],
    )
    out = as_json([agreeing, differing], runs=1)
    assert (out["agree"], out["total"], out["runs"]) == (1, 2, 1)
    entry = out["scenarios"][1]
    assert entry["name"] == "crash-loop"
    assert entry["agrees"] is False
    assert entry["foreign"][0]["differs"] == {
        "c.main": ["waiting:CrashLoopBackOff", "terminated:Error(1)"]
    }
    assert entry["settled"] == [BACKOFF.as_dict()]
    assert entry["reference_settled"] == [TERMINATED.as_dict()]
    assert entry["events"]["only_ours"] == ["BackOff"]
    assert entry["events"]["only_reference"] == ["Pulled"]
    assert entry["events"]["ours"] == [{"Warning BackOff": 1}]
    json.dumps(out)  # all plain JSON
    text = table([agreeing, differing])
    lines = text.splitlines()
    assert lines[0].startswith("SCENARIO")
    assert lines[1].split()[:2] == ["same", "yes"]
    assert "(same)" in lines[2]
    assert lines[3].split()[:2] == ["crash-loop", "no"]
    assert "main=waiting:CrashLoopBackOff r1 last=Error" in lines[3]
    assert "[+BackOff -Pulled]" in lines[3]
    assert "main=terminated:Error(1) r1 last=Error" in lines[4]
    assert "foreign: c.main: waiting:CrashLoopBackOff (ref terminated:Error(1))" in lines[5]
    assert lines[-1] == "1/2 scenarios agree"


# -- scenarios -------------------------------------------------------------------------------


def test_the_shipped_scenarios_load_and_cover_the_issue() -> None:
    names = {scenario.name for scenario in builtin_scenarios()}
    assert {
        "crash-loop-always", "crash-loop-onfailure", "exit-1-never", "exit-0-never",
        "exit-0-always", "init-passes", "init-fails", "bad-image-ifnotpresent",
        "bad-image-always", "never-pull-missing", "missing-configmap-key", "liveness-fails",
        "readiness-fails", "sigterm-ignored", "plain-delete", "active-deadline", "oom-kill",
        "sidecar-running", "sidecar-crashing", "sidecar-app-exits", "sidecar-delete",
        "fail-succeed-run", "spec-change", "resize-accepted", "resize-infeasible",
    } <= names  # fmt: skip
    sidecars = {name for name, s in _by_name().items() if s.since == 28}
    assert sidecars == {n for n in names if n.startswith("sidecar-")}, "v1.28 brought them"
    by_name = {scenario.name: scenario for scenario in builtin_scenarios()}
    assert by_name["sigterm-ignored"].delete_after == WHEN_RUNNING
    assert by_name["missing-configmap-key"].objects[0]["kind"] == "ConfigMap"
    for scenario in by_name.values():
        assert not any(
            k.startswith("compare.") for k in scenario.pod["metadata"].get("annotations", {})
        )


USER_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: mine
  uid: 1234
  resourceVersion: "5"
  annotations:
    compare.kubelet-sim.io/observe-seconds: "12"
    compare.kubelet-sim.io/delete-after: "4"
    team: x
spec:
  tolerations: [{key: own, operator: Exists}]
  initContainers: [{name: i, image: "{image}"}]
  containers: [{name: c, image: "{image}", command: [sleep, "1"]}, {name: d, image: nginx}]
status: {phase: Running}
"""


def _by_name() -> dict[str, Scenario]:
    return {scenario.name: scenario for scenario in builtin_scenarios()}


def test_a_users_pod_file_is_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(USER_POD)
    (scenario,) = resolve([str(path)])
    assert (scenario.name, scenario.observe, scenario.delete_after) == ("mine", 12.0, 4.0)
    assert "status" not in scenario.pod
    assert scenario.pod["metadata"] == {"name": "mine", "annotations": {"team": "x"}}
    taints = [{"key": "a", "effect": "NoSchedule", "value": "v"}, {"key": "own"}]
    pod = pod_for(
        scenario, name="mine-ours-1", node="n1", image="bb:1", tolerations=tolerations_for(taints)
    )
    assert pod["metadata"]["name"] == "mine-ours-1"
    assert pod["spec"]["nodeName"] == "n1"
    assert [c["image"] for c in pod["spec"]["containers"]] == ["bb:1", "nginx"]
    assert pod["spec"]["initContainers"][0]["image"] == "bb:1"
    assert pod["spec"]["tolerations"] == [
        {"key": "own", "operator": "Exists"},
        {"key": "a", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert scenario.pod["spec"]["containers"][0]["image"] == "{image}"  # the scenario unchanged


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("kind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c}]}", "name"),
        ("kind: Pod\nmetadata: {name: p}\nspec: {}", "no containers"),
        ("kind: Service\nmetadata: {name: s}", "exactly one Pod"),
        (
            "metadata: {name: p, annotations: {compare.kubelet-sim.io/observe-seconds: soon}}\n"
            "spec: {containers: [{name: c}]}",
            "number of seconds",
        ),
        (
            "metadata: {name: p, annotations: {compare.kubelet-sim.io/wat: x}}\n"
            "spec: {containers: [{name: c}]}",
            "unknown annotations",
        ),
        ("metadata: {name: p}\nspec: {containers: [{name: c}]}\n---\nkind: Service\n", "beside"),
        ("[unclosed", "not YAML"),
        (
            "metadata: {name: p, annotations: {compare.kubelet-sim.io/patch-after: '3'}}\n"
            "spec: {containers: [{name: c}]}",
            "need compare.kubelet-sim.io/patch",
        ),
        (
            "metadata: {name: p, annotations: {compare.kubelet-sim.io/patch: '[1]',"
            " compare.kubelet-sim.io/patch-after: '3'}}\nspec: {containers: [{name: c}]}",
            "JSON object",
        ),
        (
            "metadata: {name: p, annotations: {compare.kubelet-sim.io/since: soon}}\n"
            "spec: {containers: [{name: c}]}",
            "version like 1.28",
        ),
    ],
)
def test_a_bad_scenario_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(text, "f.yaml")


def test_resolve_names_shipped_scenarios_and_refuses_unknown_ones_and_twins() -> None:
    assert [s.name for s in resolve(["exit-0-never", "crash-loop-always"])] == [
        "exit-0-never",
        "crash-loop-always",
    ]
    assert len(resolve([])) == len(builtin_scenarios())
    with pytest.raises(ScenarioError, match="no scenario 'nope'"):
        resolve(["nope"])
    with pytest.raises(ScenarioError, match="two scenarios named exit-0-never"):
        resolve(["exit-0-never", "exit-0-never"])


# -- the recorder (the informers' handlers), on a clock moved by hand ------------------------


def _watched(clock: Any, scenario_text: str, observe: float = 10.0) -> Any:
    from kubelet_sim.compare.runner import _Watched

    scenario = parse_scenario(scenario_text, "s.yaml")
    start = clock.monotonic()
    after = scenario.delete_after
    return _Watched(
        PodRecord(scenario.name, OURS, 1, f"{scenario.name}-ours-1"),
        scenario,
        deadline=start + observe,
        delete_at=start + after if isinstance(after, float) else None,
    )


POD_TEXT = "metadata: {{name: s, annotations: {{{a}}}}}\nspec: {{containers: [{{name: main}}]}}"


def test_the_recorder_keeps_each_new_state_and_event_until_the_observation_ends() -> None:
    from kubelet_sim.compare.runner import _Recorder
    from tests.fakeruntime.clock import FakeClock

    clock = FakeClock()
    recorder = _Recorder(clock)
    watched = _watched(clock, POD_TEXT.format(a=""))
    recorder.watch(watched)
    pod = {**_pod("Pending"), "metadata": {"name": "s-ours-1"}}
    recorder.on_pod("ADDED", pod)
    recorder.on_pod("MODIFIED", pod)  # the same state again: one entry
    recorder.on_pod("MODIFIED", {**_pod(), "metadata": {"name": "other-ours-1"}})  # not ours
    event = {
        "metadata": {"name": "s-ours-1.1"},
        "involvedObject": {"kind": "Pod", "name": "s-ours-1"},
        "type": "Warning",
        "reason": "BackOff",
        "count": 1,
    }
    recorder.on_event("ADDED", event)
    recorder.on_event("MODIFIED", {**event, "count": 3})
    clock.advance(5)
    recorder.on_pod("DELETED", pod)
    clock.advance(6)  # past the observation: nothing more is recorded
    recorder.on_pod("ADDED", {**_pod(), "metadata": {"name": "s-ours-1"}})
    recorder.on_event("MODIFIED", {**event, "count": 9})
    assert watched.record.states == [normalise(pod), GONE]
    assert dict(watched.record.event_counts()) == {("Warning", "BackOff"): 3}


def test_a_delete_comes_due_after_its_seconds_or_once_running() -> None:
    from tests.fakeruntime.clock import FakeClock

    clock = FakeClock()
    timed = _watched(clock, POD_TEXT.format(a="compare.kubelet-sim.io/delete-after: '4'"))
    running = _watched(clock, POD_TEXT.format(a="compare.kubelet-sim.io/delete-after: Running"))
    never = _watched(clock, POD_TEXT.format(a=""))
    now = clock.monotonic()
    assert not timed.delete_due(now + 3.9)
    assert timed.delete_due(now + 4)
    assert not running.delete_due(now + 100)
    running.record.add(normalise(_pod("Pending")))
    running.record.add(normalise(_pod("Running")))
    running.record.add(normalise(_pod("Succeeded")))
    assert running.delete_due(now)  # Running once is enough
    running.deleted = True
    assert not running.delete_due(now)  # and once only
    assert not never.delete_due(now + 1000)


def test_a_patch_comes_due_once_running_and_only_once() -> None:
    from tests.fakeruntime.clock import FakeClock

    clock = FakeClock()
    patch = 'compare.kubelet-sim.io/patch: \'{"spec": {"activeDeadlineSeconds": 9}}\''
    when = "compare.kubelet-sim.io/patch-after: Running"
    watched = _watched(clock, POD_TEXT.format(a=f"{patch}, {when}"))
    assert watched.scenario.patch == {"spec": {"activeDeadlineSeconds": 9}}
    now = clock.monotonic()
    assert not watched.patch_due(now)
    watched.record.add(normalise(_pod("Running")))
    assert watched.patch_due(now)
    watched.patched = True
    assert not watched.patch_due(now)


def test_the_generation_seen_and_the_v1_34_container_fields_are_part_of_a_state() -> None:
    pod = _pod("Running")
    pod["metadata"] = {"name": "p", "generation": 2}
    pod["status"]["observedGeneration"] = 1
    (main,) = pod["status"]["containerStatuses"]
    main["allocatedResources"] = {"cpu": "100m"}
    main["volumeMounts"] = [{"name": "v", "mountPath": "/v"}]
    state = normalise(pod).as_dict()
    assert state["observedGeneration"] == "behind"
    assert state["c.main.allocatedResources"] == '{"cpu":"100m"}'
    assert state["c.main.volumeMounts"] == '[{"mountPath":"/v","name":"v"}]'
    pod["status"]["observedGeneration"] = 2
    assert normalise(pod).as_dict()["observedGeneration"] == "current"
    pod["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"  # a deletion bumps it: unjudged
    assert "observedGeneration" not in normalise(pod).as_dict()


def _timed(side: str, window: float, *steps: tuple[float, PodState], events=()) -> PodRecord:  # type: ignore[no-untyped-def]
    record = PodRecord("crash", side, 1, f"crash-{side}-1", window=window)
    for at, state in steps:
        record.add(state, at)
    for i, (at, reason) in enumerate(events):
        record.add_event(f"e{i}", "Normal", reason, 1, at)
    return record


def test_ours_may_get_there_faster_than_the_reference_never_elsewhere() -> None:
    """The reference is watched past our window: a state ours reached within it and the
    kubelet only after it is not foreign, and ours settles where the kubelet was at the end of
    our window or went after it. Slower is not allowed: settling where the kubelet had left
    before our window ended disagrees."""
    reference = _timed(
        REFERENCE, 20, (0, PENDING), (1, TERMINATED), (25, BACKOFF),
        events=((1, "Started"), (25, "BackOff")),
    )  # fmt: skip
    faster = _timed(OURS, 20, (0, PENDING), (1, TERMINATED), (15, BACKOFF),
                    events=((1, "Started"), (15, "BackOff")))  # fmt: skip
    assert judge("crash", [faster], [reference]).agrees
    on_time = _timed(OURS, 20, (0, PENDING), (1, TERMINATED), events=((1, "Started"),))
    assert judge("crash", [on_time], [reference]).agrees  # the BackOff came after our window
    early = _timed(REFERENCE, 20, (0, PENDING), (1, TERMINATED), (5, BACKOFF),
                   events=((1, "Started"), (5, "BackOff")))  # fmt: skip
    slower = judge("crash", [on_time], [early])
    assert not slower.agrees
    assert not slower.runs[0].settled_agrees  # TERMINATED was left at 5 s
    assert not slower.runs[0].events_agree  # and the BackOff within the window is missing


def test_a_node_telling_of_its_own_runtime_failing_is_shown_not_judged() -> None:
    reference = _timed(
        REFERENCE, 20, (0, PENDING), (1, TERMINATED),
        events=((1, "Started"), (2, "FailedKillPod")),
    )  # fmt: skip
    ours = _timed(OURS, 20, (0, PENDING), (1, TERMINATED), events=((1, "Started"),))
    verdict = judge("crash", [ours], [reference])
    assert verdict.agrees
    assert "FailedKillPod" in reference.event_reasons()  # still in the record (and the report)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("metadata: {name: p, annotations: [x]}\nspec: {containers: [{name: c}]}", "annotations"),
        ("metadata: [x]\nspec: {containers: [{name: c}]}", "metadata must be an object"),
        ("metadata: {name: p}\nspec: [x]", "spec must be an object"),
        ("metadata: {name: p}\nspec: {containers: [x]}", "spec.containers"),
        ("metadata: {name: [p]}\nspec: {containers: [{name: c}]}", "metadata.name"),
        ("a: &a [1, 2]\nb: *a\n", "aliases are not allowed"),
        ("metadata: {name: p}\nspec: {containers: [\n", "not YAML"),
        ("[" * 5000, "not YAML"),
    ],
)
def test_a_malformed_scenario_is_one_line_of_error(text: str, says: str) -> None:
    """Whatever the file holds, the error is a ScenarioError of one line, never a traceback."""
    with pytest.raises(ScenarioError, match=says) as raised:
        parse_scenario(text, "f.yaml")
    assert "\n" not in str(raised.value)
