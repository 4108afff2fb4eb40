"""Image lookups and pulls, with the kubelet's imageID strings. Credentials are never logged.

Images are the engine's, the same for every node on it: `EngineImages` is the process's one
view of them (each image's imageID string inspected once, whichever node asks).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from docker import auth as docker_auth
from docker import utils as docker_utils
from docker.errors import (
    APIError,
    DockerException,
    ImageNotFound,
    NotFound,
    create_api_error_from_http_exception,
)
from docker.utils.json_stream import json_stream
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import HTTPError, ReadTimeout, RequestException
from structlog.stdlib import BoundLogger

from kubelet_sim import cri
from kubelet_sim.runtime.stats import RuntimeStats

PULLABLE_PREFIX = "docker-pullable://"
IMAGE_ID_PREFIX = "docker://"


class EngineImages:
    """The engine's images for every node. Each call is counted in the asking node's `stats`."""

    def __init__(self, api: Any, pull_progress_deadline: float) -> None:
        self._api = api
        self._progress_deadline = pull_progress_deadline  # dockershim's (1m by default)
        self._image_ids: dict[str, str] = {}  # image sha → its imageID string

    def image_status(self, ref: str, stats: RuntimeStats) -> cri.ImageInfo | None:
        """The local image for `ref`, or None; never touches the network."""
        stats.add("image_inspects")
        return inspect_image(self._api, ref)

    def list_images(self, stats: RuntimeStats) -> list[cri.ImageSummary]:
        """Every image the engine holds (one call), for the Node's status.images."""
        stats.add("image_lists")
        listed = cast(list[dict[str, Any]], self._api.images())
        return [
            cri.ImageSummary(
                id=str(image.get("Id", "")),
                repo_tags=tuple(t for t in image.get("RepoTags") or () if "<none>" not in t),
                repo_digests=tuple(d for d in image.get("RepoDigests") or () if "<none>" not in d),
                size=int(image.get("Size") or 0),
            )
            for image in listed
        ]

    def pull_image(
        self, ref: str, auth: cri.RegistryAuth | None, stats: RuntimeStats, log: BoundLogger
    ) -> cri.ImageInfo:
        """Pull `ref`; ImagePullError carries the message the pod's ErrImagePull shows."""
        log = log.bind(image=ref, registry=auth.server if auth else None)
        log.info("pulling image")
        stats.add("pulls")
        pull(self._api, ref, auth, self._progress_deadline)
        self._image_ids.clear()  # a pull can add repo digests to an image we cached
        info = self.image_status(ref, stats)
        if info is None:
            raise cri.ImagePullError("the image is not present after the pull")
        log.info("pulled image", image_id=info.id)
        return info

    def image_id_for(self, image_sha: str, stats: RuntimeStats) -> str:
        """The imageID string for a container's image, inspected once per image."""
        if not image_sha:
            return ""
        cached = self._image_ids.get(image_sha)
        if cached is None:
            info = self.image_status(image_sha, stats)
            cached = status_image_id(info) if info else IMAGE_ID_PREFIX + image_sha
            self._image_ids[image_sha] = cached
        return cached


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
        user=str((attrs.get("Config") or {}).get("User") or ""),
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


def pull(api: Any, ref: str, auth: cri.RegistryAuth | None, progress_deadline: float) -> None:
    """Pull and consume Docker's progress stream; errors inside the stream count as failures.

    Docker answers 200 and reports some failures (manifest unknown, auth) only as an `error`
    line of the stream, so a plain pull call would "succeed". docker-py's own pull waits
    forever on a registry that never answers; here a pull that makes no progress for
    `progress_deadline` seconds is cancelled (dockershim's --image-pull-progress-deadline), and
    closing the stream makes Docker abandon it.
    """
    try:
        for line in _pull_stream(api, ref, auth, progress_deadline):
            message = line.get("error") or (line.get("errorDetail") or {}).get("message")
            if message:
                raise cri.ImagePullError(_pull_message(ref, str(message)))
    except APIError as exc:
        raise cri.ImagePullError(_pull_message(ref, str(exc.explanation or exc))) from None
    except (ReadTimeout, RequestsConnectionError) as exc:
        if not _timed_out(exc):
            raise cri.ImagePullError(_pull_message(ref, str(exc))) from None
        raise cri.ImagePullError(
            f"pull cancelled: no progress for {progress_deadline:g}s"
        ) from None
    except (DockerException, RequestException) as exc:
        raise cri.ImagePullError(_pull_message(ref, str(exc))) from None


def _pull_stream(
    api: Any, ref: str, auth: cri.RegistryAuth | None, progress_deadline: float
) -> Iterator[dict[str, Any]]:
    """APIClient.pull's request with a read timeout (docker-py's own passes timeout=None).

    Only public API: APIClient is a requests.Session, so the request is its `post` on the
    engine's versioned URL (`base_url`, `api_version`); an error status becomes docker-py's
    own APIError (`create_api_error_from_http_exception`, as its client raises them), and the
    progress lines are decoded by docker-py's `json_stream`, as its pull does with decode=True.
    A generator: the request is made at the first line asked for.
    """
    repository, tag = docker_utils.parse_repository_tag(ref)
    params = {"fromImage": repository, "tag": tag or "latest"}  # a digest goes in tag too
    headers = {}
    config = auth_config(auth)
    if config is None:
        registry, _ = docker_auth.resolve_repository_name(repository)
        header = docker_auth.get_config_header(api, registry)
    else:
        header = docker_auth.encode_header(config)
    if header:
        headers["X-Registry-Auth"] = header
    response = api.post(
        f"{api.base_url}/v{api.api_version}/images/create",
        params=params,
        headers=headers,
        stream=True,
        timeout=progress_deadline,
    )
    try:
        try:
            response.raise_for_status()
        except HTTPError as exc:
            create_api_error_from_http_exception(exc)  # raises APIError, NotFound, ...
        for line in json_stream(response.iter_content(chunk_size=None)):
            yield cast(dict[str, Any], line)
    finally:
        response.close()  # at once, also when the caller stops early: Docker drops the pull


def _timed_out(exc: BaseException) -> bool:
    """requests raises a read timeout inside a stream as ConnectionError(ReadTimeoutError)."""
    if isinstance(exc, ReadTimeout):
        return True
    return "timed out" in str(exc).lower()


def _pull_message(ref: str, reason: str) -> str:
    """Docker's own words: the waiting message of ErrImagePull (the kubelet shows the CRI's).

    The caller's event adds the `Failed to pull image "<ref>": ` prefix, as the kubelet's does.
    """
    del ref
    return reason.strip()
