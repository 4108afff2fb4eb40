"""Downward API files: pod metadata rendered the way fieldpath.ExtractFieldPathAsString does,
container resources as pod/resource_fields.py computes them for env too."""

from __future__ import annotations

from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.resource_fields import ResourceFieldError, volume_resource_value
from kubelet_sim.pod.spec import PodView
from kubelet_sim.volumes.atomic_writer import FileProjection
from kubelet_sim.volumes.objects import Payload, mode_of
from kubelet_sim.volumes.types import MountError

_GO_ESCAPES = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
}


def downward_payload(
    pod: PodView, items: list[Json], default_mode: int, allocatable: Allocatable
) -> Payload:
    """downwardapi.CollectData: one file per item (a metadata field, or a container's resource
    with an unset limit read as the node's `allocatable`); all failing items reported
    together."""
    payload: Payload = {}
    errors: list[str] = []
    for item in items:
        path = str(item.get("path", ""))
        try:
            if item.get("fieldRef") is not None:
                value = field_value(pod.raw, str(item["fieldRef"].get("fieldPath", "")))
            elif item.get("resourceFieldRef") is not None:
                value = volume_resource_value(pod, item["resourceFieldRef"], allocatable)
            else:
                value = ""  # neither (the API server refuses it): an empty file, as upstream
        except (MountError, ResourceFieldError) as exc:
            errors.append(str(exc))
            continue
        payload[path] = FileProjection(value.encode(), mode_of(item.get("mode"), default_mode))
    if errors:
        raise MountError(aggregate(errors))
    return payload


def field_value(pod: Json, field_path: str) -> str:
    """The metadata fields a downward API volume may show, with `labels['k']` subscripts."""
    meta = pod.get("metadata") or {}
    path, subscript = _split_subscript(field_path)
    if subscript is not None:
        if path in ("metadata.labels", "metadata.annotations"):
            return str((meta.get(path.removeprefix("metadata.")) or {}).get(subscript, ""))
        raise MountError(f"fieldPath {_go_quote(field_path)} does not support subscript")
    if path in ("metadata.labels", "metadata.annotations"):
        return format_map(meta.get(path.removeprefix("metadata.")) or {})
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(meta.get(path.removeprefix("metadata."), ""))
    raise MountError(f"unsupported fieldPath: {field_path}")


def format_map(values: dict[str, Any]) -> str:
    """fieldpath.FormatMap: `key="value"` lines sorted by key, Go-quoted, no final newline."""
    return "\n".join(f"{key}={_go_quote(str(values[key]))}" for key in sorted(values))


def aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate's text: one message alone, several as `[a, b]` (duplicates once)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _split_subscript(field_path: str) -> tuple[str, str | None]:
    if not field_path.endswith("']"):
        return field_path, None
    path, sep, subscript = field_path.removesuffix("']").partition("['")
    return (path, subscript) if sep and path else (field_path, None)


def _go_quote(text: str) -> str:
    """Go's %q (strconv.Quote), so label values with quotes or newlines read as upstream."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)
