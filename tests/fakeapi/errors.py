"""Kubernetes `Status` errors with the real API server's reasons and messages."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.resources import Resource

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the server answers with a `Status` body, like apimachinery's StatusError."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = REASONS.get(code, "Unknown") if reason is None else reason
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        """The `Status` object the real server writes for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # omitempty, as a plain error turned into a 500 has none
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(res: Resource, name: str, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = kind or res.name
    return details


def not_found(res: Resource, name: str) -> ApiError:
    """404 as returned for a missing object."""
    return ApiError(404, f'{res.qualified} "{name}" not found', details=_details(res, name))


def already_exists(res: Resource, name: str) -> ApiError:
    """409 AlreadyExists on a duplicate create."""
    return ApiError(
        409, f'{res.qualified} "{name}" already exists', "AlreadyExists", _details(res, name)
    )


def conflict(res: Resource, name: str, why: str, sub: str = "") -> ApiError:
    """409 Conflict: `Operation cannot be fulfilled on pods "x": <why>`."""
    qualified = f"{res.qualified}/{sub}" if sub else res.qualified
    details = _details(res, name, f"{res.name}/{sub}" if sub else None)
    return ApiError(
        409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', "Conflict", details
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(res: Resource, name: str) -> ApiError:
    """409 for an update with an outdated resourceVersion."""
    return conflict(res, name, STALE)


def uid_immutable(res: Resource, name: str, want: str) -> ApiError:
    """422 for a write whose metadata.uid is not the stored one (the kubelet's status patch
    precondition): validation finds the immutable field changed."""
    return invalid(
        res,
        name,
        [
            cause(
                "FieldValueInvalid", "metadata.uid", f'Invalid value: "{want}": field is immutable'
            )
        ],
    )


def _precondition_conflict(res: Resource, name: str, why: str) -> ApiError:
    """409 as the storage layer words a failed delete precondition (it names the Kind)."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {res.kind} "{name}": {why}',
        "Conflict",
        _details(res, name),
    )


def uid_precondition(res: Resource, name: str, want: str, have: str) -> ApiError:
    """409 for a delete whose UID precondition does not match the stored object."""
    why = (
        f"the UID in the precondition ({want}) does not match the UID in record ({have}). "
        "The object might have been deleted and then recreated"
    )
    return _precondition_conflict(res, name, why)


def rv_precondition(res: Resource, name: str, want: str, have: str) -> ApiError:
    """409 for a delete whose resourceVersion precondition does not match."""
    why = (
        f"the ResourceVersion in the precondition ({want}) does not match the ResourceVersion "
        f"in record ({have}). The object might have been modified"
    )
    return _precondition_conflict(res, name, why)


def invalid(res: Resource, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with `details.causes`, message formatted like field.ErrorList."""
    texts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = _details(res, name, res.kind)
    details["causes"] = causes
    return ApiError(422, f'{res.kind} "{name}" is invalid: {joined}', "Invalid", details)


def cause(reason: str, field: str, message: str) -> dict[str, str]:
    """One `StatusCause` (reason FieldValueRequired, FieldValueInvalid, ...)."""
    return {"reason": reason, "message": message, "field": field}


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, message, "BadRequest")


def expired(rv: int, oldest: int) -> ApiError:
    """410 Expired, as the watch cache says it."""
    return ApiError(410, f"too old resource version: {rv} ({oldest})", "Expired")
