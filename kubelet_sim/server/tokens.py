"""Bearer tokens as the kubelet API checks them: each reviewed by the API server once per
cache lifetime, and the reviews that fail bounded (`budgets.FailureBudget`).

The kubelet caches TokenReview answers (k8s.io/apiserver's token cache: two minutes, keyed by
an HMAC of the token so that the cache never holds a token). Without a bound, random tokens
each cost one TokenReview call: a client could make the API server do a review per request.
So a failed review is cached too (briefly: `FAILED_TTL`), and the reviews that fail are spent
from a budget per client address and per process (`budgets.py`); a request that would need one
more gets 429 without a review. A review that succeeds costs nothing, so a client with good
tokens is never held back. One `TokenGuard` serves every node of a process (the listener's),
so a thousand nodes do not multiply the bound. No token, nor its hash, is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable

from kubelet_sim.kube.reviews import ReviewUnavailable, User
from kubelet_sim.server.budgets import FailureBudget, Throttled, remember
from kubelet_sim.server.metrics import Counters

__all__ = ["Throttled", "TokenGuard"]  # Throttled: what a caller of TokenGuard catches

TOKEN_TTL = 120.0  # a token the API server vouched for (the kubelet's cache TTL)
FAILED_TTL = 30.0  # a token it rejected
CACHE_LIMIT = 4096  # tokens remembered per kind (good, failed); past it the oldest go

HELP = {
    "kubelet_sim_server_token_reviews_total": (
        "counter", "TokenReviews sent to the API server, by result.",
    ),
    "kubelet_sim_server_token_cache_hits_total": (
        "counter", "Bearer tokens answered from the cache, by result.",
    ),
    "kubelet_sim_server_token_reviews_throttled_total": (
        "counter", "Requests answered 429: their address, or the process, spent its failed"
        " reviews.",
    ),
}  # fmt: skip

Review = Callable[[str], User | None]


class TokenGuard:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._secret = os.urandom(32)  # per process: the cache's keys mean nothing elsewhere
        self._lock = threading.Lock()
        self._good: dict[bytes, tuple[User, float]] = {}
        self._failed: dict[bytes, float] = {}
        self.budget = FailureBudget(clock)

    def authenticate(
        self, token: str, client: str, review: Review, counters: Counters | None = None
    ) -> User | None:
        """The token's user, or None (rejected, or the API server could not say). `client` is
        the peer's IP address. Raises Throttled when a review is needed and its budget
        (`budgets.py`) has none left."""
        key = hmac.new(self._secret, token.encode(), hashlib.sha256).digest()
        now = self._clock()
        with self._lock:
            good = self._good.get(key)
            if good is not None and good[1] > now:
                _count(counters, "kubelet_sim_server_token_cache_hits_total", "authenticated")
                user = good[0]
            elif self._failed.get(key, 0.0) > now:
                _count(counters, "kubelet_sim_server_token_cache_hits_total", "rejected")
                return None
            else:
                user = None
        if user is not None:
            self.budget.vouch(client)
            return user
        try:
            spent = self.budget.spend(client)
        except Throttled:
            if counters is not None:
                counters.add("kubelet_sim_server_token_reviews_throttled_total")
            raise
        try:
            user = review(token)
        except ReviewUnavailable:
            _count(counters, "kubelet_sim_server_token_reviews_total", "error")
            return None  # not cached, and the spend stays spent
        with self._lock:
            if user is None:
                remember(self._failed, key, now + FAILED_TTL, CACHE_LIMIT)
            else:
                remember(self._good, key, (user, now + TOKEN_TTL), CACHE_LIMIT)
        if user is not None:
            self.budget.refund(spent)
        _count(counters, "kubelet_sim_server_token_reviews_total", _result(user))
        return user


def _result(user: User | None) -> str:
    return "rejected" if user is None else "authenticated"


def _count(counters: Counters | None, name: str, result: str) -> None:
    if counters is not None:
        counters.add(name, result=result)
