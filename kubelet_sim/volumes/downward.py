"""Downward API files: pod metadata rendered the way fieldpath.ExtractFieldPathAsString does."""

from __future__ import annotations

from typing import Any

from kubelet_sim.logs import get_logger
from kubelet_sim.volumes.atomic_writer import FileProjection
from kubelet_sim.volumes.objects import Payload, mode_of
from kubelet_sim.volumes.types import MountError

Json = dict[str, Any]
_GO_ESCAPES = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
}


def downward_payload(pod: Json, items: list[Json], default_mode: int) -> Payload:
    """downwardapi.CollectData: one file per item; all failing items reported together."""
    payload: Payload = {}
    errors: list[str] = []
    for item in items:
        path = str(item.get("path", ""))
        if "fieldRef" not in item:
            # resourceFieldRef needs the node's allocatable; not written (a known gap)
            get_logger("kubelet_sim.volumes").warning(
                "downward API item not supported, skipped", path=path
            )
            continue
        try:
            value = field_value(pod, str((item["fieldRef"] or {}).get("fieldPath", "")))
        except MountError as exc:
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
