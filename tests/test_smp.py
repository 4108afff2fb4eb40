"""Two-way strategic merge patches for pod status."""

from __future__ import annotations

from kubelet_sim.smp import two_way_patch


def test_equal_gives_empty_patch() -> None:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert two_way_patch(status, status) == {}


def test_replaced_state_nulls_the_old_key() -> None:
    old = {
        "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    }
    new = {"containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t"}}}]}
    assert two_way_patch(old, new) == {
        "containerStatuses": [
            {"name": "c", "state": {"running": {"startedAt": "t"}, "waiting": None}}
        ],
        "$setElementOrder/containerStatuses": [{"name": "c"}],
    }


def test_conditions_merge_by_type_and_vanished_items_are_deleted() -> None:
    old = {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}]}
    new = {"conditions": [{"type": "A", "status": "True"}, {"type": "C", "status": "True"}]}
    assert two_way_patch(old, new) == {
        "conditions": [
            {"type": "A", "status": "True"},
            {"type": "C", "status": "True"},
            {"type": "B", "$patch": "delete"},
        ],
        "$setElementOrder/conditions": [{"type": "A"}, {"type": "C"}],
    }


def test_lists_without_merge_key_are_replaced_and_removed_keys_nulled() -> None:
    old = {"args": ["a"], "message": "x"}
    new = {"args": ["b"]}
    assert two_way_patch(old, new) == {"args": ["b"], "message": None}


def test_null_and_absent_are_the_same() -> None:
    """A null deletes a key, so a server that stored none must not be sent it again."""
    stored = {"conditions": [{"type": "Ready", "status": "True"}], "reason": None}
    wanted = {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    assert two_way_patch(stored, wanted) == {}
