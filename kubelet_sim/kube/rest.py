"""Plain-dict calls through the official client: JSON in, JSON out, one error type.

Our own code works with the JSON the API server speaks; the client's models stop here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubelet_sim.formats.jsontypes import Json

# (connect, read) seconds for ordinary requests; watches set their own read timeout.
REQUEST_TIMEOUT = (5.0, 30.0)


@dataclass
class ApiError(Exception):
    """An HTTP error from the API server, with the Status object's reason and message."""

    status: int
    reason: str = ""
    message: str = ""

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}".strip()

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def uid_changed(self) -> bool:
        """A write whose `metadata.uid` is not the stored object's: a new object of that name.

        Real servers answer a patch with 422 ("metadata.uid ... field is immutable"), a delete
        precondition with 409.
        """
        return self.conflict or (self.status == 422 and "metadata.uid" in self.message)

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def retriable(self) -> bool:
        """Worth retrying unchanged after a backoff: throttling and server-side failures."""
        return self.status == 429 or self.status >= 500

    @classmethod
    def from_exception(cls, exc: ApiException) -> ApiError:
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body or "{}")
        except (TypeError, ValueError):
            body = {}
        if isinstance(body, dict):
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        return cls(status=int(exc.status or 0), reason=reason, message=message)


def resource_version(obj: Json) -> int:
    """An object's resourceVersion as a number, to tell which of two copies is newer (0: none).

    Kubernetes calls them opaque; every server in use hands out etcd's increasing revision.
    """
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def call_json(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    """Call a generated client method and return the response body as a dict.

    `_preload_content=False` skips the client's model deserialisation (slow, and lossy for
    fields its models do not know).
    """
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    try:
        response = method(*args, _preload_content=False, **kwargs)
    except ApiException as exc:
        raise ApiError.from_exception(exc) from exc
    data = response.data
    response.release_conn()  # fully read: the connection is safe to reuse
    body: Json = json.loads(data) if data else {}
    return body


def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Json | None = None,
    *,
    content_type: str = "application/json",
    timeout: tuple[float, float] = REQUEST_TIMEOUT,
) -> Json:
    """Send a dict body as it is, with the client's host, auth and headers.

    The generated create/replace methods of kubernetes 37 first validate a dict into the
    client's pydantic models, which refuse fields they do not know (a newer server's) and
    re-format MicroTime values; writes of our own dicts therefore go through here.
    """
    request = serialize(api, method, path, body=body, content_type=content_type)
    data = _send(api, request, timeout)
    result: Json = json.loads(data) if data else {}
    return result


def read_json(
    api: client.ApiClient, path: str, *, timeout: tuple[float, float] = REQUEST_TIMEOUT
) -> Json | None:
    """GET `path`; None where the object is not there (404)."""
    try:
        return request_json(api, "GET", path, timeout=timeout)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def exists(api: client.ApiClient, path: str) -> bool:
    """Whether GET `path` finds the object (a 404 is False, another error raises)."""
    return read_json(api, path) is not None


def delete_options(uid: str, grace: int | None = None) -> Json:
    """DeleteOptions that delete only the object of this UID (one made again under the name
    is someone else's), with a grace period where given."""
    body: Json = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    return body


def request_bytes(
    api: client.ApiClient, path: str, *, timeout: tuple[float, float] = REQUEST_TIMEOUT
) -> bytes:
    """GET `path` and return the body as it came, for a caller that parses only part of it."""
    return _send(api, serialize(api, "GET", path), timeout)


Request = tuple[str, str, dict[str, str], Any, Any]  # method, url, headers, body, post params


def serialize(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, Any]] | None = None,
    body: Json | None = None,
    content_type: str | None = None,
) -> Request:
    """A request with the client's host, auth and headers, for `api.call_api`."""
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    request: Request = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    return request


def _send(api: client.ApiClient, request: Request, timeout: tuple[float, float]) -> bytes:
    method, url, headers, body, post_params = request
    try:
        response = api.call_api(method, url, headers, body, post_params, _request_timeout=timeout)
    except ApiException as exc:
        raise ApiError.from_exception(exc) from exc
    data: bytes = response.read()
    if not 200 <= response.status <= 299:
        raise ApiError.from_exception(
            ApiException(status=response.status, reason=response.reason, body=data.decode())
        )
    return data
