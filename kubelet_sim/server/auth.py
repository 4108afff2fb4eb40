"""Authentication and authorization as the kubelet's server does them (pkg/kubelet/server/auth.go).

Who: the client certificate (`tls.X509Authenticator`, verified per request, never in the TLS
handshake), else a bearer token the API server vouches for (TokenReview); a certificate that
does not verify or a token that is rejected is an error, and an error is 401 even with
anonymous auth on (k8s.io/apiserver's delegating authenticator: union(x509, token), then
FailOnError(…, anonymous)); with nothing presented, anonymous if allowed. May they: a
SubjectAccessReview on the node's `nodes/<subresource>`, the subresource named by the path.

Tokens go through a `TokenGuard` (`tokens.py`: cached by hash, failed reviews bounded per
client address and per process, `budgets.py`; past the bound 429, not 401, since the token was
never judged; so are client certificates' failed checks, in `http.py`). A `Verdict`
says whether the request authenticated, so that the listener can close a connection that
keeps failing and let one that never authenticated make room first (`listener.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kubelet_sim.kube.reviews import Decision, User
from kubelet_sim.server.metrics import Counters
from kubelet_sim.server.tls import PeerCertificate
from kubelet_sim.server.tokens import Throttled, TokenGuard

ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))
# nodeAuthorizerAttributesGetter: these methods only; any other (HEAD, OPTIONS, …) is verb ""
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# the paths with a subresource of their own (isSubpath: the path itself or below it); any other
# path is nodes/proxy
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"))


class ReviewClient(Protocol):
    def authenticate(self, token: str) -> User | None: ...

    def authorize(
        self, user: User, verb: str, resource: str, subresource: str, name: str
    ) -> Decision: ...


@dataclass(frozen=True)
class Verdict:
    """A request's fate: refused with (status, text), or served (None); and whether it
    authenticated (True), failed to (False: 401 or 429), or came as system:anonymous (None)."""

    refusal: tuple[int, str] | None
    authenticated: bool | None


# a credential left unjudged: its client's failures are spent (budgets.py), so no check is made
THROTTLED = Verdict((429, "Too Many Requests"), False)


@dataclass(frozen=True)
class Attributes:
    verb: str
    subresource: str


def attributes(method: str, path: str) -> Attributes:
    """GetRequestAttributes: the verb from the method, the subresource from the path."""
    verb = _VERBS.get(method, "")
    for prefix, subresource in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return Attributes(verb, subresource)
    return Attributes(verb, "proxy")


class Gate:
    """Decides each request: (HTTP status, reason) to refuse it, or None to serve it."""

    def __init__(
        self,
        reviews: ReviewClient,
        node_name: str,
        anonymous: bool = False,
        *,
        tokens: TokenGuard,
    ) -> None:
        """`tokens`: the process's one guard, its listener's (one bound on failed TokenReviews
        per client, not per node)."""
        self.reviews = reviews
        self.node_name = node_name
        self.anonymous = anonymous
        self.tokens = tokens

    def authenticate(
        self,
        peer: PeerCertificate | None,
        authorization: str,
        client: str = "",
        counters: Counters | None = None,
    ) -> User | None:
        """The request's user, or None for 401. Raises Throttled (429)."""
        if peer is not None and peer.user is not None:
            return peer.user
        failed = peer is not None and bool(peer.error)  # a certificate that does not verify
        token = ""
        if authorization[:7].lower() == "bearer ":
            token = authorization[7:].strip()  # an empty token is no credential (bearertoken.go)
        if token:
            user = self.tokens.authenticate(token, client, self.reviews.authenticate, counters)
            if user is not None:
                return user
            failed = True  # bearertoken.go's invalidToken
        if self.anonymous and not failed:
            return ANONYMOUS
        return None

    def check(
        self, method: str, path: str, peer: PeerCertificate | None, authorization: str
    ) -> tuple[int, str] | None:
        return self.decide(method, path, peer, authorization).refusal

    def decide(
        self,
        method: str,
        path: str,
        peer: PeerCertificate | None,
        authorization: str,
        client: str = "",
        counters: Counters | None = None,
    ) -> Verdict:
        """`client`: the peer's IP address (the token guard's budgets); `counters`: the
        node's, for the guard's counts."""
        try:
            user = self.authenticate(peer, authorization, client, counters)
        except Throttled:
            return THROTTLED
        if user is None:
            return Verdict((401, "Unauthorized"), False)
        authenticated = None if user is ANONYMOUS else True
        attrs = attributes(method, path)
        decision = self.reviews.authorize(
            user, attrs.verb, "nodes", attrs.subresource, self.node_name
        )
        if not decision.allowed:
            # the kubelet's words (server.go's authorize filter)
            text = (
                f"Forbidden (user={user.name}, verb={attrs.verb}, resource=nodes, "
                f"subresource={attrs.subresource})"
            )
            return Verdict((403, text), authenticated)
        return Verdict(None, authenticated)
