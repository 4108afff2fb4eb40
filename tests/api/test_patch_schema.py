"""Our strategic-merge tables and schema pruning against the server's own /openapi/v2."""

from __future__ import annotations

import json
from typing import Any

from kubelet_sim.formats.smp import NODE_STATUS_SCHEMA, POD_STATUS_SCHEMA, PatchSchema
from kubelet_sim.kube.rest import request_bytes, request_json
from kubelet_sim.kube.schema import (
    NODE_STATUS,
    POD_STATUS,
    ServerSchema,
    definitions_of,
    reachable,
)
from tests.cluster import ApiUnderTest

# Fields of our tables that servers older than the field do not have (v1.24 lacks them).
NEWER_FIELDS = {"hostIPs", "resourceClaimStatuses"}


def _server_merge_keys(definition: dict[str, Any]) -> dict[str, str | None]:
    """Each list field's merge key (None: no patch strategy, the list is replaced whole)."""
    keys: dict[str, str | None] = {}
    for name, prop in definition["properties"].items():
        if prop.get("type") != "array":
            continue
        merges = "merge" in str(prop.get("x-kubernetes-patch-strategy", "")).split(",")
        keys[name] = prop.get("x-kubernetes-patch-merge-key") if merges else None
    return keys


def _compare(ours: PatchSchema, definition: dict[str, Any]) -> None:
    server = _server_merge_keys(definition)
    for field, key in server.items():
        assert ours.get(field) == key, (
            f"{field}: server merges by {key!r}, we by {ours.get(field)!r}"
        )
    for field, key in ours.items():
        if field in server:
            assert server[field] == key
        else:
            assert field in NEWER_FIELDS, f"{field} is in our table but not in the server's schema"


def test_patch_strategies_are_the_servers(cluster: ApiUnderTest) -> None:
    """containerStatuses has no merge key on a real server: the bug of issue 8, checked at the
    source (on the fake: against its copy of a real v1.24 server's schema)."""
    definitions = request_json(cluster.api, "GET", "/openapi/v2", timeout=(5, 60))["definitions"]
    _compare(POD_STATUS_SCHEMA, definitions[POD_STATUS])
    _compare(NODE_STATUS_SCHEMA, definitions[NODE_STATUS])
    assert _server_merge_keys(definitions[POD_STATUS])["containerStatuses"] is None


def test_status_is_pruned_to_the_fields_the_server_knows(cluster: ApiUnderTest) -> None:
    schema = ServerSchema.of_server(cluster.api)
    assert schema.knows(POD_STATUS)
    status = {
        "phase": "Running",
        "notAField": [{"ip": "10.0.0.1"}],
        "containerStatuses": [{"name": "c", "ready": True, "alsoNotAField": 1}],
    }
    assert schema.prune(status, POD_STATUS) == {
        "phase": "Running",
        "containerStatuses": [{"name": "c", "ready": True}],
    }


def test_pruning_follows_refs_and_keeps_maps() -> None:
    definitions = {
        "S": {
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/definitions/I"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }
        },
        "I": {"properties": {"a": {"type": "string"}}},
        "Unused": {"properties": {}},
    }
    kept = reachable(definitions, ["S"])
    assert set(kept) == {"S", "I"}
    schema = ServerSchema(kept)
    value = {"items": [{"a": "1", "b": 2}], "labels": {"x": "y"}, "new": True}
    assert schema.prune(value, "S") == {"items": [{"a": "1"}], "labels": {"x": "y"}}
    assert ServerSchema().prune(value, "S") == value, "no schema: nothing is dropped"


def test_the_definitions_are_decoded_alone_as_the_whole_document_has_them(
    cluster: ApiUnderTest,
) -> None:
    """The schema reads only the document's `definitions` (memory: issue 22); they are the
    whole document's, on the server and on documents laid out otherwise."""
    document = request_bytes(cluster.api, "/openapi/v2", timeout=(5, 60))
    assert definitions_of(document) == json.loads(document)["definitions"]
    nested = {"definitions": {"properties": {"definitions": {"type": "object"}}}}
    for layout in (
        {"swagger": "2.0", "paths": {"/a": {}}, **nested},
        {**nested, "paths": {"/a": {"definitions": 1}}},
        {"swagger": "2.0", "paths": {}},
    ):
        for text in (json.dumps(layout), json.dumps(layout, indent=2, separators=(",", " : "))):
            assert definitions_of(text.encode()) == layout.get("definitions", {}), text
