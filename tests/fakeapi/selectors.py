"""Label and field selectors with the real server's syntax and supported field labels."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.fakeapi.errors import bad_request

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]

_SET_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|!=|=|>|<)\s*([^\s,]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a `(...)` value set."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET_TERM.match(term):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    if m := _CMP_TERM.match(term):
        key, op, value = m.groups()
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        try:
            bound = int(value)
        except ValueError:
            raise bad_request(f"unable to parse requirement: {term}") from None
        if op == ">":
            return lambda labels: (
                _int_or_none(labels.get(key)) is not None and int(labels[key]) > bound
            )
        return lambda labels: _int_or_none(labels.get(key)) is not None and int(labels[key]) < bound
    if m := _EXISTS.match(term):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise bad_request(f"unable to parse requirement: {term.strip()}")


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def label_matcher(selector: str | None) -> Matcher:
    """Compile a label selector; an empty selector matches everything."""
    if not selector:
        return lambda obj: True
    terms = [_label_term(t) for t in _split_terms(selector)]

    def match(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(t(labels) for t in terms)

    return match


def _get(obj: Obj, dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pod_fields(obj: Obj) -> dict[str, str]:
    ips = _get(obj, "status.podIPs") or []
    pod_ip = _get(obj, "status.podIP") or (ips[0].get("ip") if ips else "")
    fields = {
        p: _str(_get(obj, p))
        for p in (
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.nominatedNodeName",
        )
    }
    fields["spec.hostNetwork"] = _str(bool(_get(obj, "spec.hostNetwork")))
    fields["status.podIP"] = _str(pod_ip)
    return fields


def _event_fields(obj: Obj) -> dict[str, str]:
    paths = [
        f"involvedObject.{p}"
        for p in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    ]
    fields = {p: _str(_get(obj, p)) for p in (*paths, "reason", "reportingComponent", "type")}
    fields["source"] = _str(_get(obj, "source.component"))
    return fields


def field_set(resource: str, obj: Obj) -> dict[str, str]:
    """The selectable fields of an object, as the resource's GetAttrs function exposes them."""
    meta = obj.get("metadata", {})
    fields = {"metadata.name": _str(meta.get("name"))}
    if resource not in ("namespaces", "nodes"):
        fields["metadata.namespace"] = _str(meta.get("namespace"))
    if resource == "pods":
        fields.update(_pod_fields(obj))
    elif resource == "nodes":
        fields["spec.unschedulable"] = _str(bool(_get(obj, "spec.unschedulable")))
    elif resource == "namespaces":
        fields["status.phase"] = _str(_get(obj, "status.phase"))
    elif resource == "secrets":
        fields["type"] = _str(obj.get("type"))
    elif resource == "events":
        fields.update(_event_fields(obj))
    return fields


_SAMPLE: dict[str, Obj] = {}


def supported_fields(resource: str) -> set[str]:
    """Field labels the resource accepts in a field selector."""
    return set(field_set(resource, _SAMPLE.get(resource, {"metadata": {}})))


def field_matcher(resource: str, selector: str | None) -> Matcher:
    """Compile a field selector; unsupported labels are a 400 like the real server's."""
    if not selector:
        return lambda obj: True
    allowed = supported_fields(resource)
    terms: list[tuple[str, bool, str]] = []
    for term in _split_terms(selector):
        m = re.match(r"^\s*([^!=\s]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        key, op, value = m.groups()
        if key not in allowed:
            raise bad_request(f"field label not supported: {key}")
        terms.append((key, op != "!=", value))

    def match(obj: Obj) -> bool:
        fields = field_set(resource, obj)
        return all((fields.get(k, "") == v) == eq for k, eq, v in terms)

    return match


def combined(resource: str, labels: str | None, fields: str | None) -> Matcher:
    """Both selectors ANDed (both are validated up front)."""
    lm, fm = label_matcher(labels), field_matcher(resource, fields)
    return lambda obj: lm(obj) and fm(obj)
