"""Image lookups and pulls, with the kubelet's imageID strings. Credentials are never logged."""

from __future__ import annotations

from typing import Any, cast

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from kubelet_sim import cri

PULLABLE_PREFIX = "docker-pullable://"
IMAGE_ID_PREFIX = "docker://"


def status_image_id(info: cri.ImageInfo) -> str:
    """containerStatuses[].imageID as the kubelet with Docker reported it (toPullableImageID)."""
    if info.repo_digests:
        return PULLABLE_PREFIX + info.repo_digests[0]
    return IMAGE_ID_PREFIX + info.id


def image_info(ref: str, attrs: dict[str, Any]) -> cri.ImageInfo:
    return cri.ImageInfo(
        ref=ref,
        id=str(attrs.get("Id", "")),
        repo_digests=tuple(attrs.get("RepoDigests") or ()),
    )


def inspect_image(api: Any, ref: str) -> cri.ImageInfo | None:
    """The local image `ref` names (a name, name:tag, name@digest or an id), or None. No network."""
    try:
        attrs = cast(dict[str, Any], api.inspect_image(ref))
    except (ImageNotFound, NotFound):
        return None
    except APIError as exc:
        if exc.status_code in (400, 404):  # an invalid reference is absent too
            return None
        raise
    return image_info(ref, attrs)


def auth_config(auth: cri.RegistryAuth | None) -> dict[str, str] | None:
    """docker-py's X-Registry-Auth payload; None lets Docker use no credentials."""
    if auth is None:
        return None
    config = {"serveraddress": auth.server}
    if auth.auth:
        config["auth"] = auth.auth
    if auth.username:
        config["username"] = auth.username
    if auth.password:
        config["password"] = auth.password
    return config


def pull(api: Any, ref: str, auth: cri.RegistryAuth | None) -> None:
    """Pull and consume Docker's progress stream; errors inside the stream count as failures.

    Docker answers 200 and reports some failures (manifest unknown, auth) only as an `error`
    line of the stream, so a plain pull call would "succeed".
    """
    try:
        for line in api.pull(ref, stream=True, decode=True, auth_config=auth_config(auth)):
            message = line.get("error") or (line.get("errorDetail") or {}).get("message")
            if message:
                raise cri.ImagePullError(_pull_message(ref, str(message)))
    except APIError as exc:
        raise cri.ImagePullError(_pull_message(ref, str(exc.explanation or exc))) from None
    except (DockerException, RequestException) as exc:
        raise cri.ImagePullError(_pull_message(ref, str(exc))) from None


def _pull_message(ref: str, reason: str) -> str:
    """Docker's own words: the waiting message of ErrImagePull (the kubelet shows the CRI's).

    The caller's event adds the `Failed to pull image "<ref>": ` prefix, as the kubelet's does.
    """
    del ref
    return reason.strip()
