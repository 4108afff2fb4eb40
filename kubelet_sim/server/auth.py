"""Authentication and authorization as the kubelet's server does them (pkg/kubelet/server/auth.go).

Who: a client certificate verified against the client CA (during the TLS handshake), else a
bearer token the API server vouches for (TokenReview), else anonymous if allowed and no token
was presented (a rejected token is 401). May they: a
SubjectAccessReview on the node's `nodes/<subresource>`, the subresource named by the path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kubelet_sim.kube.reviews import Decision, User

ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}  # fmt: skip


class ReviewClient(Protocol):
    def authenticate(self, token: str) -> User | None: ...

    def authorize(
        self, user: User, verb: str, resource: str, subresource: str, name: str
    ) -> Decision: ...


@dataclass(frozen=True)
class Attributes:
    verb: str
    subresource: str


def attributes(method: str, path: str) -> Attributes:
    """GetRequestAttributes: the verb from the method, the subresource from the path."""
    verb = _VERBS.get(method, method.lower())
    for prefix, subresource in (
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/checkpoint", "checkpoint"),
    ):
        if path == prefix or path.startswith(prefix + "/"):
            return Attributes(verb, subresource)
    return Attributes(verb, "proxy")


def user_from_certificate(peer: dict[str, Any] | None) -> User | None:
    """The x509 authenticator: CN is the user, each O a group (the chain was verified already)."""
    if not peer:
        return None
    name, groups = "", []
    for rdn in peer.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    return User(name, (*groups, "system:authenticated")) if name else None


class Gate:
    """Decides each request: (HTTP status, reason) to refuse it, or None to serve it."""

    def __init__(self, reviews: ReviewClient, node_name: str, anonymous: bool = False) -> None:
        self.reviews = reviews
        self.node_name = node_name
        self.anonymous = anonymous

    def check(
        self, method: str, path: str, peer: dict[str, Any] | None, authorization: str
    ) -> tuple[int, str] | None:
        user = user_from_certificate(peer)
        token = ""
        if authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        if user is None and token:
            user = self.reviews.authenticate(token)
        if user is None and self.anonymous and not token:
            # unionauth.NewFailOnError(…, anonymous): a bearer token the API server rejects is
            # an error (bearertoken.go's invalidToken), so 401, never anonymous.
            user = ANONYMOUS
        if user is None:
            return 401, "Unauthorized"
        attrs = attributes(method, path)
        decision = self.reviews.authorize(
            user, attrs.verb, "nodes", attrs.subresource, self.node_name
        )
        if not decision.allowed:
            # the kubelet's words (server.go's authorize filter)
            return 403, (
                f"Forbidden (user={user.name}, verb={attrs.verb}, resource=nodes, "
                f"subresource={attrs.subresource})"
            )
        return None
