"""ConfigMap and Secret payloads: which files a volume (or projection) shows, with their modes.

Wording of the errors follows pkg/volume/configmap and pkg/volume/secret, since users match on it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.volumes.atomic_writer import FileProjection
from kubelet_sim.volumes.types import MountError, ObjectLookup

CONFIG_MAP, SECRET = "ConfigMap", "Secret"
DEFAULT_MODE = 0o644
Payload = dict[str, FileProjection]


def mode_of(value: Any, default: int = DEFAULT_MODE) -> int:
    """A mode from the spec (JSON carries it in decimal, 420 == 0644); only permission bits."""
    return default if value is None else int(value) & 0o777


def fetch(lookup: ObjectLookup, kind: str, namespace: str, name: str, optional: bool) -> Json:
    """The object, or an empty one if it is missing and optional (the volume is then empty)."""
    try:
        obj = lookup(kind, namespace, name)
    except Exception as exc:  # the API edge's error: its text is the FailedMount message
        raise MountError(str(exc)) from exc
    if obj is not None:
        return obj
    if optional:
        return {}
    raise MountError(f'{kind.lower()} "{name}" not found')


def config_map_payload(
    config_map: Json, items: list[Json], default_mode: int, optional: bool
) -> Payload:
    """configmap.MakePayload: all of `data` and `binaryData`, or just the listed keys."""
    values = _config_map_values(config_map)
    return _payload(
        values, items, default_mode, optional, "configmap references non-existent config key"
    )


def secret_payload(secret: Json, items: list[Json], default_mode: int, optional: bool) -> Payload:
    """secret.MakePayload: the decoded `data`, or just the listed keys."""
    values = {key: _decode(key, value) for key, value in (secret.get("data") or {}).items()}
    return _payload(values, items, default_mode, optional, "references non-existent secret key")


def _config_map_values(config_map: Json) -> dict[str, bytes]:
    values = {
        key: _decode(key, value) for key, value in (config_map.get("binaryData") or {}).items()
    }
    # a key is in `data` or `binaryData`, never both (API validation); `data` wins as upstream
    values.update(
        {key: str(value).encode() for key, value in (config_map.get("data") or {}).items()}
    )
    return values


def _payload(
    values: dict[str, bytes], items: list[Json], default_mode: int, optional: bool, missing: str
) -> Payload:
    if not items:
        return {key: FileProjection(data, default_mode) for key, data in values.items()}
    payload: Payload = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in values:
            if optional:
                continue
            raise MountError(f"{missing}: {key}")
        payload[str(item.get("path", ""))] = FileProjection(
            values[key], mode_of(item.get("mode"), default_mode)
        )
    return payload


def _decode(key: str, value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MountError(f"illegal base64 data for key {key}") from exc
