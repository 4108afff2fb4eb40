"""The fields this API server knows, read once from its /openapi/v2.

An older server drops fields it does not know from a write (v1.24 and `hostIPs`), so a status
that carries them never matches what the server stored: every sync would write again, and a
`$setElementOrder` for such a list is refused with a 500. Pruning what we send to the server's
own schema keeps the versioned status cache honest on every server version.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import request_bytes, request_json
from kubelet_sim.logs import get_logger

POD_STATUS = "io.k8s.api.core.v1.PodStatus"
NODE_STATUS = "io.k8s.api.core.v1.NodeStatus"
_REF_PREFIX = "#/definitions/"
_DEFINITIONS = re.compile(rb'"definitions"\s*:\s*')


class ServerSchema:
    """Known properties by definition name; unknown definitions prune nothing.

    Built with what it reads from (`of_server`) and read on first use, once, under a lock:
    nothing fills it in from outside, and the nodes of one process share one read.
    """

    def __init__(
        self,
        definitions: dict[str, Json] | None = None,
        *,
        source: Callable[[], Json] | None = None,
        roots: Iterable[str] = (POD_STATUS, NODE_STATUS),
    ) -> None:
        self._definitions = definitions or {}
        self._source = source if definitions is None else None
        self._roots = tuple(roots)
        self._lock = threading.Lock()
        self._version: str | None = None
        self._version_source: Callable[[], str | None] | None = None

    @classmethod
    def of_server(cls, api: client.ApiClient) -> ServerSchema:
        def read() -> Json:
            return definitions_of(request_bytes(api, "/openapi/v2", timeout=(5.0, 60.0)))

        def version() -> str | None:
            return str(request_json(api, "GET", "/version", timeout=(5, 10)).get("gitVersion"))

        schema = cls(source=read)
        schema._version_source = version
        return schema

    def version(self) -> str | None:
        """The server's gitVersion, read once (None if it could not be read)."""
        with self._lock:
            source, self._version_source = self._version_source, None
            if source is not None:
                try:
                    self._version = source()
                except Exception as exc:  # as for the schema: say so, assume a current server
                    get_logger(__name__).warning("cannot read the server's version", error=str(exc))
            return self._version

    def properties(self) -> set[str]:
        """ "Definition.property" for every property of the kept definitions."""
        return {
            f"{name}.{prop}"
            for name, schema in self._read().items()
            for prop in (schema.get("properties") or {})
        }

    def _read(self) -> dict[str, Json]:
        """The server's schema, read once; on failure prune nothing (a newer server knows more)."""
        if self._source is None:
            return self._definitions
        with self._lock:
            source, self._source = self._source, None
            if source is not None:
                self._load(source)
            return self._definitions

    def _load(self, source: Callable[[], Json]) -> None:
        """`source` gives the document's definitions."""
        log = get_logger(__name__)
        try:
            definitions = source()
        except Exception as exc:  # ApiError, urllib3's transport errors, a body that is not JSON
            log.warning("cannot read the API server's schema; sending status as is", error=str(exc))
            return
        self._definitions = reachable(definitions, self._roots)
        log.debug("read the API server's schema", definitions=len(self._definitions))

    def knows(self, definition: str) -> bool:
        return definition in self._read()

    def prune(self, value: Any, definition: str) -> Any:
        """`value` without the fields the server's `definition` lacks, recursively."""
        schema = self._read().get(definition)
        if schema is None:
            return value
        return self._prune(value, schema)

    def _prune(self, value: Any, schema: Json) -> Any:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            return self.prune(value, ref[len(_REF_PREFIX) :])
        if isinstance(value, dict):
            props = schema.get("properties")
            if isinstance(props, dict):
                return {k: self._prune(v, props[k]) for k, v in value.items() if k in props}
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return {k: self._prune(v, extra) for k, v in value.items()}
            return value
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            return [self._prune(v, schema["items"]) for v in value]
        return value


def reachable(definitions: dict[str, Json], roots: Iterable[str]) -> dict[str, Json]:
    """The definitions `roots` refer to, directly or not (the rest of 3 MB is not kept)."""
    kept: dict[str, Json] = {}
    pending = [r for r in roots if r in definitions]
    while pending:
        name = pending.pop()
        if name in kept:
            continue
        kept[name] = definitions[name]
        for ref in _refs(definitions[name]):
            if ref in definitions and ref not in kept:
                pending.append(ref)
    return kept


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            yield ref[len(_REF_PREFIX) :]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def definitions_of(document: bytes) -> Json:
    """The `definitions` of an OpenAPI v2 document, decoded alone: a v1.24 server's document
    is 3.3 MB, two thirds of it `paths`, and decoding it whole held 11 MiB at its peak (7 MiB
    of which the allocator kept) where the definitions alone take 5. The first
    `"definitions":` is the document's own (a schema's property of that name comes inside
    them); anything unexpected decodes the whole document instead."""
    found = _DEFINITIONS.search(document)
    if found is not None:
        try:
            text = document[found.end() :].decode()
            value, _ = json.JSONDecoder().raw_decode(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    whole = json.loads(document)
    definitions = whole.get("definitions") if isinstance(whole, dict) else None
    return definitions if isinstance(definitions, dict) else {}
