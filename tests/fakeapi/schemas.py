"""The fake's schemas: v1.24 (captured from a real server) and a current server's.

No current kube-apiserver runs on this machine (only v1.24 does), so its /openapi/v2 cannot be
captured as `openapi_v1_24.json` was. The official Python client's models are generated from
that document, though: every field a current server has is in some model's `openapi_types`.
The current schema is v1.24's, with each type given the fields its model has and v1.24 lacks
(new types are built from their models). Not written by hand, so it cannot share the agent's
beliefs — except the patch strategies of new list fields, which the models do not carry: those
are copied from the `patchStrategy`/`patchMergeKey` tags of upstream `core/v1/types.go`.

The fake reports the Kubernetes minor version the client was generated for (client 35.x is
Kubernetes 1.35).
"""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

import kubernetes
from kubernetes.client import models

from tests.fakeapi.openapi import REF_PREFIX, Schema, v1_24, version_document

Obj = dict[str, Any]

CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
TIME = META + "Time"

# `patchStrategy`/`patchMergeKey` of list fields added after v1.24 (upstream core/v1 types.go).
NEW_LIST_STRATEGIES: dict[tuple[str, str], tuple[str, str]] = {
    (CORE + "PodStatus", "hostIPs"): ("merge", "ip"),
    (CORE + "PodStatus", "resourceClaimStatuses"): ("merge,retainKeys", "name"),
    (CORE + "PodSpec", "resourceClaims"): ("merge,retainKeys", "name"),
    (CORE + "PodSpec", "schedulingGates"): ("merge", "name"),
    (CORE + "ContainerStatus", "volumeMounts"): ("merge", "mountPath"),
    (CORE + "ContainerStatus", "allocatedResourcesStatus"): ("merge", "name"),
}

_PRIMITIVES: dict[str, Obj] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"},
    "float": {"type": "number", "format": "double"},
    "object": {"type": "object"},
    "datetime": {"$ref": REF_PREFIX + TIME},
}


@cache
def current() -> Schema:
    minor = int(kubernetes.__version__.split(".", 1)[0])
    base = v1_24()
    definitions = copy.deepcopy(base.definitions)
    builder = _Builder(definitions)
    for name in list(definitions):
        builder.extend(name)
    return Schema(version_document(minor, "2026-01-01T00:00:00Z"), definitions)


class _Builder:
    def __init__(self, definitions: dict[str, Obj]) -> None:
        self.definitions = definitions
        self.done: set[str] = set()

    def extend(self, name: str) -> None:
        """Give definition `name` the fields its client model has and it lacks."""
        if name in self.done:
            return
        self.done.add(name)
        model = _model_for(name)
        definition = self.definitions[name]
        props = definition.get("properties")
        if model is None or not isinstance(props, dict):
            return
        for attribute, type_name in model.openapi_types.items():
            json_name = model.attribute_map[attribute]
            if json_name in props:
                continue
            schema = self.schema_of(type_name)
            strategy = NEW_LIST_STRATEGIES.get((name, json_name))
            if strategy is not None:
                schema["x-kubernetes-patch-strategy"], schema["x-kubernetes-patch-merge-key"] = (
                    strategy
                )
            props[json_name] = schema

    def schema_of(self, type_name: str) -> Obj:
        if type_name in _PRIMITIVES:
            return dict(_PRIMITIVES[type_name])
        if match := re.fullmatch(r"List\[(.+)\]", type_name):
            return {"type": "array", "items": self.schema_of(match[1])}
        if match := re.fullmatch(r"Dict\[str, (.+)\]", type_name):
            return {"type": "object", "additionalProperties": self.schema_of(match[1])}
        name = self.definition_for(type_name)
        return {"$ref": REF_PREFIX + name}

    def definition_for(self, model_name: str) -> str:
        """The definition a model is (an existing one, or one made from the model)."""
        for candidate in _definition_names(model_name):
            if candidate in self.definitions:
                self.extend(candidate)
                return candidate
        name = CORE + re.sub(r"^(Core)?V1", "", model_name)
        self.definitions[name] = {"type": "object", "properties": {}}
        self.extend(name)
        return name


def _definition_names(model_name: str) -> list[str]:
    bare = re.sub(r"^[A-Z][a-z]+V1(?=[A-Z])|^V1(?=[A-Z])", "", model_name)
    return [CORE + bare, META + bare, "io.k8s.api.coordination.v1." + bare]


def _model_for(definition: str) -> Any:
    """The client's model of a definition: V1Pod for core/v1 Pod, CoreV1Event for Event."""
    group, bare = definition.rsplit(".", 3)[-3], definition.rsplit(".", 1)[-1]
    for name in (f"{group.capitalize()}V1{bare}", f"V1{bare}"):
        model = getattr(models, name, None)
        if model is not None and hasattr(model, "openapi_types"):
            return model
    return None


SCHEMAS = {"current": current, "v1.24": v1_24}


def by_name(name: str) -> Schema:
    """`current` or `v1.24` (what FakeApiServer(schema=...) takes)."""
    if name not in SCHEMAS:
        raise ValueError(f"unknown schema {name!r}: one of {sorted(SCHEMAS)}")
    return SCHEMAS[name]()
