"""The real API server's schema, as the fake's source of truth for patches and unknown fields.

`openapi_v1_34.json` and `openapi_v1_24.json` hold the definitions of the resources the fake
serves, copied (without descriptions) from the `/openapi/v2` of a real kube-apiserver v1.34.9
and v1.24 — not written by hand, so the fake cannot share the agent's beliefs about merge keys.
Regenerate one with `python -m tests.fakeapi.openapi 1.34.9` (or `1.24.0`: starts a real
control plane from the binary cache, see tests/kubeenv.py); tests/api/test_contract.py checks
the one of the run's version against its real server. The fake serves v1.34's unless told
`schema="v1.24"` (the contract test's fake against a v1.24 server).

The fake uses it as the real server uses its Go types: strategic merge follows the
`x-kubernetes-patch-strategy`/`-merge-key` extensions, and fields a type does not have are
dropped from every write.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tests.fakeapi import quantity
from tests.fakeapi.resources import Resource

Obj = dict[str, Any]


def schema_file(minor: int) -> Path:
    return Path(__file__).with_name(f"openapi_v1_{minor}.json")


REF_PREFIX = "#/definitions/"
MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"  # Go's RFC3339Micro: exactly 6 digits
_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")


_ZERO: dict[str, Any] = {"string": "", "integer": 0, "boolean": False}

# What Go encodes although the schema calls it optional: struct-valued fields (not pointers) and
# strings without `omitempty`. The OpenAPI document cannot say this; the Go types do. A zero
# metav1.Time (a struct, so `omitempty` keeps it) is encoded as null.
_ALWAYS: dict[str, dict[str, Any]] = {
    "io.k8s.api.core.v1.ContainerStatus": {"state": {}, "lastState": {}},
    "io.k8s.api.core.v1.ContainerStateRunning": {"startedAt": None},
    "io.k8s.api.core.v1.ContainerStateTerminated": {"startedAt": None, "finishedAt": None},
    "io.k8s.api.core.v1.PodCondition": {"lastProbeTime": None, "lastTransitionTime": None},
    "io.k8s.api.core.v1.NodeCondition": {"lastHeartbeatTime": None, "lastTransitionTime": None},
    "io.k8s.api.core.v1.Node": {"spec": {}, "status": {}},
    "io.k8s.api.core.v1.NodeStatus": {"daemonEndpoints": {}, "nodeInfo": {}},
    "io.k8s.api.core.v1.NodeDaemonEndpoints": {"kubeletEndpoint": {}},
    "io.k8s.api.core.v1.Event": {"reportingComponent": "", "reportingInstance": ""},
}

# Slices without `omitempty` that the schema does not list as required: Go encodes an empty one
# as null (it comes back from etcd as a nil slice). Every other empty slice is `omitempty`, so an
# empty list written is absent when read back.
_NULL_WHEN_EMPTY: dict[str, frozenset[str]] = {
    "io.k8s.api.core.v1.ContainerImage": frozenset({"names"}),
    "io.k8s.api.discovery.v1.EndpointSlice": frozenset({"ports"}),
}


class DecodeError(ValueError):
    """A body the server cannot decode into its type (it answers 400)."""


ROOTS = (
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.core.v1.Binding",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.discovery.v1.EndpointSlice",
    "io.k8s.api.authentication.v1.TokenRequest",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
)


@dataclass(frozen=True)
class Schema:
    """One server version's types: what it answers at /version and /openapi/v2, and how it
    decodes (prunes) and merges what it is sent."""

    version: Obj
    definitions: dict[str, Obj] = field(repr=False)

    @property
    def minor(self) -> int:
        return int(self.version["minor"])

    def document(self) -> Obj:
        """What GET /openapi/v2 answers (only the definitions the fake serves)."""
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": str(self.version["gitVersion"])},
            "paths": {},
            "definitions": self.definitions,
        }

    def resolve(self, schema: Obj | None) -> Obj | None:
        """Follow a `$ref` to its definition."""
        if schema is None:
            return None
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            return self.definitions.get(ref[len(REF_PREFIX) :])
        return schema

    def field_schema(self, schema: Obj | None, name: str) -> Obj | None:
        """The schema of field `name` inside the map `schema` (None: the type has no such field)."""
        schema = self.resolve(schema)
        if schema is None:
            return None
        props = schema.get("properties")
        if isinstance(props, dict):
            return props.get(name)
        extra = schema.get("additionalProperties")
        return extra if isinstance(extra, dict) else {}

    def items_schema(self, schema: Obj | None) -> Obj | None:
        schema = self.resolve(schema)
        items = (schema or {}).get("items")
        return items if isinstance(items, dict) else None

    def prune(self, value: Any, schema: Obj | None) -> Any:
        """Drop the fields the type does not have, as decoding into a Go struct does."""
        ref = str((schema or {}).get("$ref", ""))[len(REF_PREFIX) :]
        if ref == MICRO_TIME and value is not None:
            _check_micro_time(value)
            return value
        if ref == QUANTITY and isinstance(value, str | int | float):
            return quantity.canonical(str(value)) or value  # decoded, then encoded canonical
        schema = self.resolve(schema)
        if schema is None:
            return value
        if isinstance(value, dict):
            props = schema.get("properties")
            if isinstance(props, dict):
                pruned = {k: self.prune(v, props[k]) for k, v in value.items() if k in props}
                _encode_empty_lists(pruned, ref, schema)
                for name, empty in _ALWAYS.get(ref, {}).items():
                    if name not in pruned:
                        pruned[name] = self.prune(copy.deepcopy(empty), props.get(name))
                for name in schema.get("required") or ():  # Go encodes a zero for a missing one
                    zero = _ZERO.get(str((self.resolve(props.get(name)) or {}).get("type")))
                    if name not in pruned and zero is not None:
                        pruned[name] = zero
                return pruned
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return {k: self.prune(v, extra) for k, v in value.items()}
            return value
        if isinstance(value, list):
            items = self.items_schema(schema)
            return [self.prune(v, items) for v in value] if items is not None else value
        return value

    def prune_object(self, res: Resource, obj: Obj) -> Obj:
        """A written object as the server stores it: without fields its type lacks.

        Raises DecodeError where the real server's decoder fails (a MicroTime without 6 digits).
        """
        pruned: Obj = self.prune(obj, {"$ref": REF_PREFIX + definition_of(res)})
        return pruned


def _encode_empty_lists(obj: Obj, ref: str, schema: Obj) -> None:
    """Empty lists as Go encodes the nil slice that etcd gives back: null where the field has no
    `omitempty` (a required one, or one named in _NULL_WHEN_EMPTY), absent everywhere else."""
    keep_null = _NULL_WHEN_EMPTY.get(ref, frozenset()) | set(schema.get("required") or ())
    for name in [k for k, v in obj.items() if v == []]:
        if name in keep_null:
            obj[name] = None
        else:
            del obj[name]


def version_document(minor: int, build: str, go: str) -> Obj:
    return {
        "major": "1",
        "minor": str(minor),
        "gitVersion": f"v1.{minor}.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": build,
        "goVersion": go,
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _captured(minor: int, build: str, go: str) -> Schema:
    definitions = json.loads(schema_file(minor).read_text())
    return Schema(version_document(minor, build, go), definitions)


@cache
def v1_34() -> Schema:
    """The schema captured from a real v1.34.9 server: the fake's by default."""
    return _captured(34, "2026-11-28T00:00:00Z", "go1.25.5")


@cache
def v1_24() -> Schema:
    """The schema captured from a real v1.24 server: the contract test's fake against one."""
    return _captured(24, "2022-05-03T00:00:00Z", "go1.24.0")


SCHEMAS = {"v1.34": v1_34, "v1.24": v1_24}


def by_name(name: str) -> Schema:
    """`v1.34` or `v1.24` (what FakeApiServer(schema=...) takes)."""
    if name not in SCHEMAS:
        raise ValueError(f"unknown schema {name!r}: one of {sorted(SCHEMAS)}")
    return SCHEMAS[name]()


def _check_micro_time(value: Any) -> None:
    """Decode a MicroTime as Go's time.Parse(RFC3339Micro) would, with its error text for the
    usual mistake (no fraction, or not six digits of it)."""
    if isinstance(value, str) and _MICRO_TIME.fullmatch(value):
        return
    error = f'parsing time "{value}" as "{MICRO_TIME_LAYOUT}"'
    head = re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", str(value))
    if head:
        rest = str(value)[head.end() :]
        if not rest.startswith("."):
            error += f': cannot parse "{rest}" as ".000000"'
    raise DecodeError(error)


def definition_of(res: Resource) -> str:
    short = {"": "core", "coordination.k8s.io": "coordination", "discovery.k8s.io": "discovery"}
    group = short.get(res.group, res.group)
    return f"io.k8s.api.{group}.{res.version}.{res.kind}"


def capture(version: str) -> Path:
    """Copy the definitions from the /openapi/v2 of a real server of `version` (from the
    binary cache), descriptions left out, into the schema file of its minor."""
    from kubelet_sim.controlplane.binaries import find_binaries
    from kubelet_sim.kube.client import connect
    from kubelet_sim.kube.rest import request_json
    from tests.kubeenv import KubeEnv

    minor = int(version.removeprefix("v").split(".")[1])
    with KubeEnv(
        find_binaries(version=version, require_controllers=False), controllers=False
    ) as env:
        api = connect(str(env.admin_kubeconfig)).api
        document = request_json(api, "GET", "/openapi/v2", timeout=(5, 60))
    out = schema_file(minor)
    out.write_text(json.dumps(trimmed(document["definitions"]), indent=1, sort_keys=True) + "\n")
    return out


def trimmed(all_definitions: dict[str, Obj]) -> dict[str, Obj]:
    """The definitions ROOTS reach, without descriptions: what the fake keeps and compares."""
    kept: dict[str, Obj] = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in kept or name not in all_definitions:
            continue
        kept[name] = _strip_descriptions(all_definitions[name])
        pending.extend(_refs(kept[name]))
    return kept


def _strip_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_strip_descriptions(v) for v in schema]
    return schema


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [str(schema["$ref"])[len(REF_PREFIX) :]] if "$ref" in schema else []
        return found + [r for v in schema.values() for r in _refs(v)]
    if isinstance(schema, list):
        return [r for v in schema for r in _refs(v)]
    return []


if __name__ == "__main__":
    import sys

    written = capture(sys.argv[1] if len(sys.argv) > 1 else "1.34.9")
    print(f"wrote {written} ({len(json.loads(written.read_text()))} definitions)")
