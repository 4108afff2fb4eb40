"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]


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


def _get_at(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"missing path: {path}")
        return parent[tokens[-1]]
    if isinstance(parent, list):
        return parent[_index(parent, tokens[-1], adding=False)]
    raise PatchError(f"missing path: {path}")


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
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"unable to remove nonexistent key: {tokens[-1]}: missing value")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], adding=False)]
    else:
        raise PatchError(f"missing path: {path}")
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

# How lists merge, by field path (list items do not add a path element). A string is the merge
# key of a list of maps; "" marks a merged list of primitives (a set). Absent: replaced.
_COMMON: dict[Path, str] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): "",
}
_CONTAINER: dict[str, str] = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}
_POD: dict[Path, str] = {
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("status", "conditions"): "type",
    ("status", "containerStatuses"): "name",
    ("status", "initContainerStatuses"): "name",
    ("status", "ephemeralContainerStatuses"): "name",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}
for _kind in ("containers", "initContainers", "ephemeralContainers"):
    _POD[("spec", _kind)] = "name"
    for _field, _key in _CONTAINER.items():
        _POD[("spec", _kind, _field)] = _key

MERGE_KEYS: dict[str, dict[Path, str]] = {
    "pods": _POD,
    "nodes": {
        ("spec", "podCIDRs"): "",
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
    "namespaces": {("status", "conditions"): "type"},
}


def strategic_merge(original: Obj, patch: Obj, resource: str) -> Obj:
    """Apply a strategic merge patch with the merge keys Kubernetes declares for `resource`."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    keys = {**_COMMON, **MERGE_KEYS.get(resource, {})}
    merged = _merge_map(original, patch, (), keys)
    return merged if merged is not None else {}


def _strip(value: Any) -> Any:
    """Drop every `$` directive and null from a value that is stored as is."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [
            _strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") is not None)
        ]
    return copy.deepcopy(value)


def _merge_map(original: Any, patch: Obj, path: Path, keys: dict[Path, str]) -> Obj | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip(patch)  # type: ignore[no-any-return]
    result: Obj = copy.deepcopy(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
        elif key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [x for x in result.get(field) or [] if x not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, (*path, key), keys)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, (*path, key), keys)
        else:
            result[key] = copy.deepcopy(value)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _order(result[field], order, keys.get((*path, field)))
    return result


def _merge_list(original: Any, patch: list[Any], path: Path, keys: dict[Path, str]) -> list[Any]:
    strategy = keys.get(path)
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return _strip(patch)  # type: ignore[no-any-return]
    if strategy is None or not isinstance(original, list):
        return _strip(patch)  # type: ignore[no-any-return]
    if strategy == "":
        result = list(original)
        result.extend(x for x in patch if x not in result)
        return result
    result = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"list item of {'.'.join(path)} is not a map")
        pos = next(
            (i for i, old in enumerate(result) if old.get(strategy) == item.get(strategy)), None
        )
        if item.get("$patch") == "delete":
            result = [r for r in result if r.get(strategy) != item.get(strategy)]
        elif pos is None:
            result.append(_merge_map({}, item, path, keys))
        else:
            result[pos] = _merge_map(result[pos], item, path, keys)
    return result


def _order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """Sort by `$setElementOrder`; items it does not mention keep their place after those."""

    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [ident(o) for o in order]
    ranked = [i for i in items if ident(i) in wanted]
    ranked.sort(key=lambda i: wanted.index(ident(i)))
    return ranked + [i for i in items if ident(i) not in wanted]
