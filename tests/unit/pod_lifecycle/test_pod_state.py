"""The pod worker's states: each transition from the one state it leaves, only forward, and
the data that belongs to one state going with it."""

from __future__ import annotations

import pytest

from kubelet_sim.pod.admission import Rejection
from kubelet_sim.pod.status import WaitingReason
from kubelet_sim.podworkers.hooks import POST_START, PRE_STOP
from kubelet_sim.podworkers.state import (
    Deleted,
    HookEnded,
    LifecycleError,
    PodState,
    Syncing,
    Terminated,
)

DEADLINE = WaitingReason("DeadlineExceeded", "too long")


def test_a_pod_syncs_terminates_is_terminated_and_deleted_in_that_order() -> None:
    state = PodState()
    assert isinstance(state.lifecycle, Syncing)
    terminating = state.begin_terminating()
    assert state.lifecycle is terminating
    terminated = state.complete_terminating()
    assert state.lifecycle is terminated
    assert not terminated.rejected
    assert not state.deleted
    state.final_delete_sent()
    assert isinstance(state.lifecycle, Deleted)
    assert state.deleted


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_no_state_is_left_twice_or_skipped(steps: int) -> None:
    state = PodState()
    forward = [state.begin_terminating, state.complete_terminating, state.final_delete_sent]
    for step in forward[:steps]:
        step()
    for i, step in enumerate(forward):
        if i != steps:
            with pytest.raises(LifecycleError):
                step()
    if steps:
        with pytest.raises(LifecycleError):
            state.reject(Rejection("OutOfcpu", "no cpu"))


def test_a_rejected_pod_is_terminated_at_once_its_status_its_rejection() -> None:
    state = PodState()
    terminated = state.reject(Rejection("OutOfcpu", "Node didn't have enough cpu"))
    assert state.rejected
    assert terminated.reason == WaitingReason("OutOfcpu", "Node didn't have enough cpu")
    assert state.stop is None
    state.final_delete_sent()
    assert not state.rejected


def test_a_stop_syncpod_began_goes_on_while_terminating_and_its_other_data_is_dropped() -> None:
    state = PodState()
    syncing = state.lifecycle
    assert isinstance(syncing, Syncing)
    syncing.restarting["app"] = "c1"
    syncing.replacing.add("app")
    stop = state.begin_stop(now=5.0)
    stop.kills_pod = True
    assert syncing.killing_pod
    assert state.begin_stop(now=9.0) is stop  # goes on: began stays
    terminating = state.begin_terminating()
    assert terminating.stop is stop
    assert state.stop is stop
    assert stop.began == 5.0
    state.end_stop()
    assert state.stop is None
    state.complete_terminating()
    with pytest.raises(LifecycleError):
        state.begin_stop(now=10.0)
    with pytest.raises(LifecycleError):
        state.end_stop()


def test_a_syncing_pod_is_being_killed_only_while_its_stop_goes_on() -> None:
    syncing = Syncing()
    assert not syncing.killing_pod
    state = PodState(lifecycle=syncing)
    state.begin_stop(now=1.0)
    assert not syncing.killing_pod  # a sandbox's replacement stops its containers too
    assert syncing.stop is not None
    syncing.stop.kills_pod = True
    assert syncing.killing_pod
    state.end_stop()
    assert not syncing.killing_pod


def test_a_passed_deadline_is_told_once_from_terminating_on() -> None:
    state = PodState()
    with pytest.raises(LifecycleError):
        state.deadline_exceeded(DEADLINE)
    state.begin_terminating()
    assert state.deadline_exceeded(DEADLINE)
    assert not state.deadline_exceeded(DEADLINE)
    assert state.complete_terminating().reason == DEADLINE
    assert not state.deadline_exceeded(DEADLINE)


def test_a_deadline_passed_after_the_end_is_told_then() -> None:
    state = PodState()
    state.begin_terminating()
    state.complete_terminating()
    assert state.deadline_exceeded(DEADLINE)
    assert isinstance(state.lifecycle, Terminated)
    assert state.lifecycle.reason == DEADLINE


def test_a_made_sandbox_is_owed_its_own_sync_once() -> None:
    syncing = Syncing(acted_before_pull=True)
    assert syncing.take_acted_before_pull()
    assert not syncing.take_acted_before_pull()


def test_hook_reports_reach_the_start_or_the_stop_they_belong_to() -> None:
    state = PodState()
    state.post_starts.began("a")
    state.post_starts.began("b")
    stop = state.begin_stop(now=0.0)
    stop.pre_stop_running.add("s")
    assert state.post_starts.any_running
    assert state.post_starts.starting({"a", "b", "x"}) == {"a", "b"}
    state.inbox.post(HookEnded("a", POST_START))
    state.inbox.post(HookEnded("b", POST_START, "exited with 7"))
    state.inbox.post(HookEnded("s", PRE_STOP))
    state.take_reports()
    assert not state.post_starts.any_running
    assert stop.pre_stop_running == set()
    assert state.post_starts.starting({"a", "b"}) == {"b"}  # failed: still not returned
    assert state.post_starts.take_failed() == ["b"]
    assert state.post_starts.take_failed() == []
    state.post_starts.killed("b")
    assert state.post_starts.starting({"b"}) == {"b"}  # killed for it, still stopping
    assert state.post_starts.starting(set()) == frozenset()
    assert state.post_starts.starting({"b"}) == frozenset()  # stopped: forgotten


def test_a_pre_stop_report_after_the_stop_ended_is_dropped() -> None:
    state = PodState()
    state.begin_stop(now=0.0).pre_stop_running.add("s")
    state.end_stop()
    state.inbox.post(HookEnded("s", PRE_STOP))
    state.take_reports()
    assert state.stop is None


def test_a_post_start_that_never_ran_is_forgotten() -> None:
    state = PodState()
    state.post_starts.began("a")
    state.post_starts.abandoned("a")
    assert not state.post_starts.any_running
    state.post_starts.began("b")
    state.post_starts.ended("b", "failed")
    state.post_starts.abandoned("b")  # only a hook still running is abandoned
    assert state.post_starts.take_failed() == ["b"]
