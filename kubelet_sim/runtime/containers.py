"""The container calls the engine and every node's runtime make alike: create (the stale name
retried, the owner's labels added), start, remove, and Docker's words for a refusal."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from docker.errors import APIError, NotFound
from structlog.stdlib import BoundLogger

from kubelet_sim import cri

_CONFLICT = re.compile(r'already in use by container "?([0-9a-f]{12,64})"?')


def explain(exc: APIError) -> str:
    return str(exc.explanation or exc).strip()


def stop_signal(attrs: dict[str, Any]) -> str:
    """The signal `docker stop` would send: the container's STOPSIGNAL, else SIGTERM."""
    return str((attrs.get("Config") or {}).get("StopSignal") or "SIGTERM")


def create(
    api: Any,
    name: str,
    body: dict[str, Any],
    owner_labels: Mapping[str, str] | None,
    log: BoundLogger,
) -> str:
    """POST /containers/create; on a name conflict remove the stale holder and retry once.

    dockershim did the same: a leftover from a crash between create and record must not
    block the pod forever; a running holder is not removed (then the error stands).
    """
    try:
        return _create_once(api, name, body, owner_labels)
    except APIError as exc:
        match = _CONFLICT.search(explain(exc)) if exc.status_code == 409 else None
        if match is None:
            raise cri.ContainerStartError(explain(exc)) from None
        try:
            api.remove_container(match.group(1), v=True)
        except APIError:
            raise cri.ContainerStartError(explain(exc)) from None
        log.info("removed a stale container holding the name", name=name)
        try:
            return _create_once(api, name, body, owner_labels)
        except APIError as again:
            raise cri.ContainerStartError(explain(again)) from None


def _create_once(
    api: Any, name: str, body: dict[str, Any], owner_labels: Mapping[str, str] | None
) -> str:
    if owner_labels:
        body = {**body, "Labels": {**(body.get("Labels") or {}), **owner_labels}}
        for mount in (body.get("HostConfig") or {}).get("Mounts") or []:
            options = mount.get("VolumeOptions")
            if options is not None:
                options["Labels"] = {**(options.get("Labels") or {}), **owner_labels}
    result = api.create_container_from_config(body, name=name)
    return str(result["Id"])


def start(api: Any, container_id: str) -> None:
    """Start; ContainerStartError with Docker's words (e.g. executable not found)."""
    try:
        api.start(container_id)
    except APIError as exc:
        raise cri.ContainerStartError(explain(exc)) from None


def remove(api: Any, container_id: str) -> None:
    """Force-remove (with anonymous volumes); a container already gone is fine."""
    try:
        api.remove_container(container_id, v=True, force=True)
    except NotFound:
        return
    except APIError as exc:
        if "already in progress" not in explain(exc):
            raise
