"""Who is asking the kubelet API, and may they: TokenReview and SubjectAccessReview.

The kubelet's webhook authenticator and authorizer (kubelet's `--authentication-token-webhook`,
`--authorization-mode=Webhook`) ask the API server; node credentials may create both. Access
decisions are cached briefly, as the kubelet's (5 minutes allowed, 30 s denied); tokens are
cached by the kubelet API server (`server/tokens.py`: keyed by a hash, failures bounded per
client address), so `authenticate` asks every time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kubelet_sim.kube.rest import ApiError, request_json

ALLOWED_TTL = 300.0
DENIED_TTL = 30.0
CACHE_LIMIT = 1024  # answers kept; past it the expired go, then everything


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class ReviewUnavailable(Exception):
    """The API server could not say whether the token is valid (an error, not a rejection)."""


class Reviews:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._access: dict[tuple[object, ...], tuple[Decision, float]] = {}
        self._lock = threading.Lock()

    def authenticate(self, token: str) -> User | None:
        """The token's user, or None if the API server does not know it. Raises
        ReviewUnavailable when it cannot say."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            answer = request_json(
                self._api, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body
            )
        except (ApiError, OSError) as exc:
            raise ReviewUnavailable(str(exc)) from None
        status = answer.get("status") or {}
        user = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = User(
                str(info.get("username") or ""),
                tuple(str(g) for g in info.get("groups") or ()),
                str(info.get("uid") or ""),
            )
        return user

    def authorize(
        self, user: User, verb: str, resource: str, subresource: str, name: str
    ) -> Decision:
        """May `user` do `verb` on nodes/<subresource> of node `name`?"""
        key = (user, verb, resource, subresource, name)
        now = time.monotonic()
        with self._lock:
            cached = self._access.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.name,
                "groups": list(user.groups),
                "uid": user.uid or None,
                "resourceAttributes": {
                    "verb": verb,
                    "group": "",
                    "version": "v1",
                    "resource": resource,
                    "subresource": subresource,
                    "name": name,
                },
            },
        }
        try:
            answer = request_json(
                self._api, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body
            )
        except (ApiError, OSError) as exc:
            return Decision(False, f"authorization could not be checked: {exc}")
        status = answer.get("status") or {}
        decision = Decision(bool(status.get("allowed")), str(status.get("reason") or ""))
        ttl = ALLOWED_TTL if decision.allowed else DENIED_TTL
        with self._lock:
            _bounded(self._access, now)[key] = (decision, now + ttl)
        return decision


def _bounded(cache: dict[Any, tuple[Any, float]], now: float) -> dict[Any, tuple[Any, float]]:
    if len(cache) >= CACHE_LIMIT:
        for key in [k for k, (_v, until) in cache.items() if until <= now]:
            del cache[key]
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
    return cache
