"""URL → (resource, namespace, name, subresource, verb), and the discovery documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakeapi import openapi, resources
from tests.fakeapi.resources import Resource

Obj = dict[str, Any]
TRUE = frozenset({"true", "1", "t", "True", "TRUE"})


@dataclass
class Route:
    """What a request addresses; `resource` None for discovery and unknown paths."""

    verb: str
    resource: Resource | None = None
    namespace: str | None = None
    name: str | None = None
    sub: str = ""
    document: Obj | None = None  # discovery answer
    log_resource: str = ""


def _verb(method: str, has_name: bool, params: dict[str, str]) -> str:
    if method == "GET":
        if has_name:
            return "get"
        return "watch" if params.get("watch") in TRUE else "list"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def parse(method: str, path: str, params: dict[str, str], types: openapi.Schema) -> Route:
    """Map a request path the way the API server's RequestInfoFactory does."""
    parts = [p for p in path.split("/") if p]
    if parts in (["api"], ["apis"], ["version"], ["api", "v1"]) or (
        parts[:2] == ["apis", "coordination.k8s.io"] and len(parts) <= 3
    ):
        return Route("get", document=discovery(parts, types))
    if parts == ["openapi", "v2"] and method == "GET":
        return Route("get", document=types.document())
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis" and parts[2] == "v1":
        group, rest = parts[1], parts[3:]
    else:
        return Route(_verb(method, False, params))
    namespace: str | None = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    res = resources.lookup(group, rest[0])
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    route = Route(_verb(method, name is not None, params), res, namespace, name, sub, None, rest[0])
    resize_unserved = sub == "resize" and types.minor < 33  # in-place resize: beta in v1.33
    if resize_unserved or not _servable(res, rest, namespace, name, sub):
        route.resource = None
    return route


def _servable(
    res: Resource | None, rest: list[str], namespace: str | None, name: str | None, sub: str
) -> bool:
    """Whether the path names something we serve (else 404)."""
    if res is None or len(rest) > 3:
        return False
    if namespace is not None and not res.namespaced:
        return False
    if sub and sub not in res.subresources:
        return False
    return not (namespace is None and res.namespaced and name is not None)


def _resource_list(group_version: str, group: str, minor: int) -> Obj:
    items = []
    for res in (*resources.ALL, resources.BINDINGS):
        if res.group != group:
            continue
        verbs = ["create"] if res is resources.BINDINGS else [
            "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch",
        ]  # fmt: skip
        items.append(
            {"name": res.name, "singularName": res.kind.lower(), "namespaced": res.namespaced,
             "kind": res.kind, "verbs": verbs}
        )  # fmt: skip
        for sub in sorted(res.subresources - ({"resize"} if minor < 33 else set())):
            sub_verbs = ["create"] if sub == "binding" else ["get", "patch", "update"]
            items.append(
                {"name": f"{res.name}/{sub}", "singularName": "", "namespaced": res.namespaced,
                 "kind": "Binding" if sub == "binding" else res.kind, "verbs": sub_verbs}
            )  # fmt: skip
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": items,
    }


def discovery(parts: list[str], types: openapi.Schema) -> Obj:
    """Minimal but valid discovery documents."""
    coordination = {
        "name": "coordination.k8s.io",
        "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"},
    }
    if parts == ["version"]:
        return dict(types.version)
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        }
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [coordination]}
    if parts == ["api", "v1"]:
        return _resource_list("v1", "", types.minor)
    if len(parts) == 2:
        return {"kind": "APIGroup", "apiVersion": "v1", **coordination}
    return _resource_list("coordination.k8s.io/v1", "coordination.k8s.io", types.minor)
