"""Two-way strategic merge patches for pod status."""

from __future__ import annotations

from kubelet_sim.formats.smp import POD_STATUS_SCHEMA, two_way_patch


def patch(old: dict[str, object], new: dict[str, object]) -> dict[str, object]:
    return two_way_patch(old, new, POD_STATUS_SCHEMA)


def test_equal_gives_empty_patch() -> None:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert patch(status, status) == {}


def test_replaced_state_nulls_the_old_key() -> None:
    old = {"reason": "X", "nested": {"waiting": {"reason": "ContainerCreating"}}}
    new = {"nested": {"running": {"startedAt": "t"}}}
    assert patch(old, new) == {
        "reason": None,
        "nested": {"running": {"startedAt": "t"}, "waiting": None},
    }


def test_container_statuses_have_no_merge_key_and_go_whole() -> None:
    """As the kubelet sends them: the real schema gives these lists no patch strategy, and a
    real server cannot apply `$setElementOrder` to them (v1.24 panics)."""
    old = {
        "containerStatuses": [
            {"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "b", "ready": False},
        ]
    }
    new = {
        "containerStatuses": [
            {"name": "a", "state": {"running": {"startedAt": "t"}}},
            {"name": "b", "ready": False},
        ]
    }
    assert patch(old, new) == {"containerStatuses": new["containerStatuses"]}
    assert patch(new, new) == {}


def test_pod_ips_merge_by_ip() -> None:
    old = {"podIPs": [{"ip": "10.0.0.1"}]}
    new = {"podIPs": [{"ip": "10.0.0.2"}]}
    assert patch(old, new) == {
        "podIPs": [{"ip": "10.0.0.2"}, {"ip": "10.0.0.1", "$patch": "delete"}],
        "$setElementOrder/podIPs": [{"ip": "10.0.0.2"}],
    }


def test_conditions_merge_by_type_and_vanished_items_are_deleted() -> None:
    old = {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}]}
    new = {"conditions": [{"type": "A", "status": "True"}, {"type": "C", "status": "True"}]}
    assert patch(old, new) == {
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
    assert patch(old, new) == {"args": ["b"], "message": None}


def test_null_and_absent_are_the_same() -> None:
    """A null deletes a key, so a server that stored none must not be sent it again."""
    stored = {"conditions": [{"type": "Ready", "status": "True"}], "reason": None}
    wanted = {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    assert patch(stored, wanted) == {}


def test_node_status_patch_replaces_changed_addresses_whole() -> None:
    """As nodeutil.PatchNodeStatus: merging addresses by type would keep a stale one."""
    from kubelet_sim.formats.smp import node_status_patch

    old = {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n1"},
        ],
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    new = {
        "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
        "conditions": [{"type": "Ready", "status": "False"}],
    }
    assert node_status_patch(old, new) == {
        "addresses": [{"$patch": "replace"}, {"type": "InternalIP", "address": "10.0.0.2"}],
        "conditions": [{"type": "Ready", "status": "False"}],
        "$setElementOrder/conditions": [{"type": "Ready"}],
    }
    assert node_status_patch(new, new) == {}
    first = node_status_patch({}, new)
    assert first == new, "nothing to replace yet: the addresses go as they are"
