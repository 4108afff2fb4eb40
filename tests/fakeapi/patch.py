"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

from tests.fakeapi import openapi

Obj = dict[str, Any]


class PatchError(Exception):
    """A patch that cannot be applied (the server answers 422 or 400)."""


# --- RFC 7386 -------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 -------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    try:
        idx = int(token)
    except ValueError:
        raise PatchError(f"invalid array index: {token}") from None
    limit = len(container) if adding else len(container) - 1
    if idx < 0 or idx > limit:
        raise PatchError(f"array index out of bounds: {idx}")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError("missing path")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, adding=False)]
        else:
            raise PatchError("missing path")
    return cur


def _member(doc: Any, path: str, tokens: list[str], missing: str) -> tuple[Any, Any]:
    """The object or array holding the member `path` names, and its key or index there; the
    member must be there (`missing`: the error for a key that is not)."""
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(missing)
        return parent, tokens[-1]
    if isinstance(parent, list):
        return parent, _index(parent, tokens[-1], adding=False)
    raise PatchError(f"missing path: {path}")


def _get_at(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, key = _member(doc, path, tokens, f"missing path: {path}")
    return parent[key]


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], adding=True), value)
    else:
        raise PatchError(f"missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the document root")
    missing = f"unable to remove nonexistent key: {tokens[-1]}: missing value"
    parent, key = _member(doc, path, tokens, missing)
    del parent[key]
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """Apply an RFC 6902 operation list to a copy of `doc`."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("invalid operation")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get_at(doc, path)
            doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get_at(doc, op["from"]))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get_at(doc, path) != op.get("value"):
                raise PatchError("testing value failed")
        else:
            raise PatchError(f"unexpected kind: {kind}")
    return doc


# --- strategic merge patch ------------------------------------------------------------------
# Driven by the real server's schema (tests/fakeapi/openapi.py): a list merges by its
# `x-kubernetes-patch-merge-key` when its `x-kubernetes-patch-strategy` says `merge`, a merged
# list without a key is a set of primitives, any other list is replaced whole.


class PatchServerError(PatchError):
    """What a real server fails on itself (a 500, or a panic that drops the connection)."""


def strategic_merge(original: Obj, patch: Obj, definition: str, types: openapi.Schema) -> Obj:
    """Apply a strategic merge patch to an object of the schema's `definition`."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    merged = _merge_map(original, patch, {"$ref": openapi.REF_PREFIX + definition}, types)
    return merged if merged is not None else {}


def _strategy(schema: Obj | None) -> tuple[bool, str | None]:
    """(merges, merge key) of a list field."""
    schema = schema or {}
    merges = "merge" in str(schema.get("x-kubernetes-patch-strategy", "")).split(",")
    key = schema.get("x-kubernetes-patch-merge-key")
    return merges, (str(key) if merges and key else None)


def _type_name(schema: Obj | None) -> str:
    ref = str((schema or {}).get("$ref", ""))
    return ref.rsplit(".", 1)[-1] if ref else "object"


def _strip(value: Any) -> Any:
    """Drop every `$` directive and null from a value that is stored as is."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [
            _strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") is not None)
        ]
    return copy.deepcopy(value)


def _merge_map(original: Any, patch: Obj, schema: Obj | None, types: openapi.Schema) -> Obj | None:
    """apimachinery's mergeMap: directives, $retainKeys, $setElementOrder lists, then fields."""
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip(patch)  # type: ignore[no-any-return]
    result: Obj = copy.deepcopy(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    patch = dict(patch)
    for key in [k for k in patch if k.startswith("$setElementOrder/")]:
        field = key.split("/", 1)[1]
        _check_order_directive(schema, field, types)
        order, inner = patch.pop(key), types.field_schema(schema, field)
        _merge_ordered(result, patch, field, order, inner, types)
    for key, value in patch.items():
        _merge_field(result, key, value, schema, types)
    return result


def _merge_field(
    result: Obj, key: str, value: Any, schema: Obj | None, types: openapi.Schema
) -> None:
    """One field of a patch map (or its $deleteFromPrimitiveList directive) merged into result."""
    if key.startswith("$deleteFromPrimitiveList/"):
        field = key.split("/", 1)[1]
        result[field] = [x for x in result.get(field) or [] if x not in value]
    elif key.startswith("$"):
        return
    elif value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        merged = _merge_map(result.get(key), value, types.field_schema(schema, key), types)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _merge_list(result.get(key), value, types.field_schema(schema, key), types)
    else:
        result[key] = copy.deepcopy(value)


def _merge_ordered(
    result: Obj, patch: Obj, field: str, order: Any, schema: Obj | None, types: openapi.Schema
) -> None:
    """mergePatchIntoOriginal: a list and its `$setElementOrder`, merged and ordered at once."""
    _, key = _strategy(schema)
    if not isinstance(order, list):
        raise PatchError(f"invalid $setElementOrder/{field}: not a list")
    original, changes = result.get(field), patch.pop(field, None)
    if original is None and changes is None:
        return
    if changes is None:
        merged = list(original)
    elif original is None:
        merged = _strip(changes)
    else:
        merged = _merge_list(original, changes, schema, types)
    in_order, server_only = _partition(merged, order, key)
    result[field] = _normalize_order(in_order, server_only, order, original or [], key)


def _ident(item: Any, key: str | None) -> Any:
    return item.get(key) if key and isinstance(item, dict) else item


def _partition(items: list[Any], by: list[Any], key: str | None) -> tuple[list[Any], list[Any]]:
    wanted = [_ident(i, key) for i in by]
    return (
        [i for i in items if _ident(i, key) in wanted],
        [i for i in items if _ident(i, key) not in wanted],
    )


def _normalize_order(
    patched: list[Any], server_only: list[Any], order: list[Any], live: list[Any], key: str | None
) -> list[Any]:
    """normalizeElementOrder + mergeSortedSlice: the patch's items in the patch's order, the
    server-only items in the live order, interleaved where the live list relates the two."""
    order_ids = [_ident(i, key) for i in order]
    live_ids = [_ident(i, key) for i in live]
    patched = sorted(patched, key=lambda i: order_ids.index(_ident(i, key)))
    server_only = sorted(server_only, key=lambda i: live_ids.index(_ident(i, key)))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patched):
        if j >= len(patched):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patched[j])
            j += 1
        else:
            left, right = _ident(server_only[i], key), _ident(patched[j], key)
            if (
                left in live_ids
                and right in live_ids
                and live_ids.index(left) < live_ids.index(right)
            ):
                out.append(server_only[i])
                i += 1
            else:
                out.append(patched[j])
                j += 1
    return out


def _check_order_directive(schema: Obj | None, field: str, types: openapi.Schema) -> None:
    """`$setElementOrder` on a field the type lacks is a 500 on a real server; on a list that
    merges by no key it panics there (v1.24 drops the connection): never a silent success."""
    field_schema = types.field_schema(schema, field)
    if field_schema is None:
        raise PatchServerError(
            f'unable to find api field in struct {_type_name(schema)} for the json field "{field}"'
        )
    merges, _ = _strategy(field_schema)
    if not merges:
        raise PatchServerError(
            f"$setElementOrder/{field}: {field} has no patch strategy; a real API server panics "
            "on this patch (comparing uncomparable type map[string]interface {})"
        )


def _union(original: list[Any], changes: list[Any]) -> list[Any]:
    """A set-list merge: the original's items, then the patch's new ones, each once."""
    merged: list[Any] = []
    for x in original + changes:
        if x not in merged:
            merged.append(x)
    return merged


def _merge_list(
    original: Any, patch: list[Any], schema: Obj | None, types: openapi.Schema
) -> list[Any]:
    """mergeSliceHandler/mergeSlice: replace, or merge by key (or as a set) and reorder."""
    merges, merge_key = _strategy(schema)
    if not merges or not isinstance(original, list):
        return _strip(patch)  # type: ignore[no-any-return]
    if merge_key is None:  # a set of primitives
        changes = [x for x in patch if not isinstance(x, dict)]
        merged: list[Any] = _union(original, changes)
        live = original
    else:
        live, changes = list(original), []
        for item in patch:  # mergeSliceWithSpecialElements: directives before merge keys
            directive = item.get("$patch") if isinstance(item, dict) else None
            if directive == "replace":
                return _strip([i for i in patch if "$patch" not in i])  # type: ignore[no-any-return]
            if not isinstance(item, dict) or merge_key not in item:
                raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}")
            if directive == "delete":
                live = [r for r in live if r.get(merge_key) != item[merge_key]]
            else:
                changes.append(item)
        items = types.items_schema(schema)
        merged = copy.deepcopy(live)
        for item in changes:
            pos = next(
                (n for n, old in enumerate(merged) if old.get(merge_key) == item[merge_key]), None
            )
            if pos is None:
                merged.append(_strip(item))
            else:
                merged[pos] = _merge_map(merged[pos], item, items, types)
    in_patch, server_only = _partition(merged, changes, merge_key)
    return _normalize_order(in_patch, server_only, changes, live, merge_key)
