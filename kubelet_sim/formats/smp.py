"""Two-way strategic merge patches, as the kubelet's status manager sends for pod status.

A plain merge of a new status onto the old would keep stale keys (a `waiting` beside the new
`running`); the diff sets them to null, merges the lists that have a merge key by that key,
deletes vanished items with `$patch: delete` and fixes their order with
`$setElementOrder/<list>`. Every other list is sent whole: a real API server cannot apply
`$setElementOrder` to a list without a merge key (v1.24 panics on it), and that is how the kubelet
sends `containerStatuses`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubelet_sim.formats.jsontypes import Json

# Merge keys of the lists that have one, by dotted path from the patched object (list items add
# no path element). A list not named here is replaced whole. From the
# `x-kubernetes-patch-merge-key` extensions in the API server's /openapi/v2 (v1.24, plus fields
# later versions added); tests/api/test_patch_schema.py compares them with a real server's.
PatchSchema = Mapping[str, str]

POD_STATUS_SCHEMA: PatchSchema = {
    "conditions": "type",
    "podIPs": "ip",
    "hostIPs": "ip",  # v1.28+
    "resourceClaimStatuses": "name",  # v1.28+
}
NODE_STATUS_SCHEMA: PatchSchema = {
    "addresses": "type",
    "conditions": "type",
}


def node_status_patch(original: Json, modified: Json) -> Json:
    """The patch the kubelet sends for node status (nodeutil.PatchNodeStatus): a two-way patch,
    except that changed addresses go whole with `$patch: replace`, since merging them by type
    would keep an address of a type the node no longer has."""
    old_addresses, new_addresses = original.get("addresses"), modified.get("addresses")
    replace = bool(old_addresses) and old_addresses != new_addresses
    if replace:
        modified = {k: v for k, v in modified.items() if k != "addresses"}
    patch = two_way_patch(original, modified, NODE_STATUS_SCHEMA)
    if replace:
        patch.pop("$setElementOrder/addresses", None)
        patch["addresses"] = [{"$patch": "replace"}, *(new_addresses or [])]
    return patch


def two_way_patch(original: Json, modified: Json, schema: PatchSchema, path: str = "") -> Json:
    """The patch that turns `original` into `modified` (empty when they are equal)."""
    patch: Json = {}
    for key, new in modified.items():
        old = original.get(key)
        field = f"{path}{key}"
        if key not in original:
            if new is not None:  # null and absent mean the same: nothing to send
                patch[key] = new
        elif old == new:
            continue
        elif isinstance(old, dict) and isinstance(new, dict):
            patch[key] = two_way_patch(old, new, schema, f"{field}.")
        elif isinstance(old, list) and isinstance(new, list) and field in schema:
            items, order = _list_patch(old, new, schema[field], schema, f"{field}.")
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
    old: list[Any], new: list[Any], merge_key: str, schema: PatchSchema, path: str
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
        elif before != item and (changes := two_way_patch(before, item, schema, path)):
            items.append({merge_key: item[merge_key], **changes})
    for key, item in old_by_key.items():
        if key not in new_keys:
            items.append({merge_key: item[merge_key], "$patch": "delete"})
    order_changed = [i[merge_key] for i in old] != new_keys
    order = [{merge_key: k} for k in new_keys] if (items or order_changed) else None
    return (items or None), order
