"""Registry credentials for an image from the pod's imagePullSecrets (dockerconfigjson)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from kubelet_sim.cri import RegistryAuth

DOCKER_HUB = "docker.io"


def registry_of(image: str) -> str:
    """The registry host of an image reference (docker.io when it names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def auths_for(image: str, secrets: Iterable[dict[str, Any]]) -> list[RegistryAuth]:
    """Every credential in the secrets that applies to the image's registry, in order."""
    registry = registry_of(image)
    found: list[RegistryAuth] = []
    for secret in secrets:
        for server, entry in _entries(secret):
            host = server.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
            if host in ("index.docker.io", "registry-1.docker.io"):
                host = DOCKER_HUB
            if host == registry:
                found.append(
                    RegistryAuth(
                        server=server,
                        username=str(entry.get("username", "")),
                        password=str(entry.get("password", "")),
                        auth=str(entry.get("auth", "")),
                    )
                )
    return found


def _entries(secret: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    data = secret.get("data") or {}
    raw = data.get(".dockerconfigjson") or data.get(".dockercfg")
    if not raw:
        return []
    try:
        parsed = json.loads(base64.b64decode(raw))
    except (ValueError, binascii.Error):
        return []
    auths = parsed.get("auths", parsed) if isinstance(parsed, dict) else {}
    return [(str(k), v) for k, v in auths.items() if isinstance(v, dict)]
