"""Two-way strategic merge patches, as the kubelet's status manager sends for pod status.

A plain merge of a new status onto the old would keep stale keys (a `waiting` beside the new
`running`); the diff sets them to null, merges lists by their keys, deletes vanished items with
`$patch: delete` and fixes the order with `$setElementOrder/<list>`.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

# Lists that Kubernetes merges by a key (the patchMergeKey of their Go types) among the fields
# we patch; any other list is replaced whole.
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "podIPs": "ip",
    "hostIPs": "ip",
    "addresses": "type",
    "volumeMounts": "mountPath",
}


def two_way_patch(original: Json, modified: Json) -> Json:
    """The patch that turns `original` into `modified` (empty when they are equal)."""
    patch: Json = {}
    for key, new in modified.items():
        old = original.get(key)
        if key not in original:
            if new is not None:  # null and absent mean the same: nothing to send
                patch[key] = new
        elif old == new:
            continue
        elif isinstance(old, dict) and isinstance(new, dict):
            patch[key] = two_way_patch(old, new)
        elif isinstance(old, list) and isinstance(new, list) and key in MERGE_KEYS:
            items, order = _list_patch(old, new, MERGE_KEYS[key])
            if items is not None:
                patch[key] = items
            if order is not None:
                patch[f"$setElementOrder/{key}"] = order
        else:
            patch[key] = new
    for key, old in original.items():
        if key not in modified and old is not None:
            patch[key] = None
    return patch


def _list_patch(
    old: list[Any], new: list[Any], merge_key: str
) -> tuple[list[Json] | None, list[Json] | None]:
    if not all(isinstance(i, dict) and merge_key in i for i in old + new):
        return list(new), None
    old_by_key = {item[merge_key]: item for item in old}
    new_keys = [item[merge_key] for item in new]
    items: list[Json] = []
    for item in new:
        before = old_by_key.get(item[merge_key])
        if before is None:
            items.append(item)
        elif before != item and (changes := two_way_patch(before, item)):
            items.append({merge_key: item[merge_key], **changes})
    for key, item in old_by_key.items():
        if key not in new_keys:
            items.append({merge_key: item[merge_key], "$patch": "delete"})
    order_changed = [i[merge_key] for i in old] != new_keys
    order = [{merge_key: k} for k in new_keys] if (items or order_changed) else None
    return (items or None), order
