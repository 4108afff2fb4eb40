"""Bearer tokens as the kubelet API checks them: each reviewed by the API server once per
cache lifetime, and the reviews that fail bounded per client address.

The kubelet caches TokenReview answers (k8s.io/apiserver's token cache: two minutes, keyed by
an HMAC of the token so that the cache never holds a token). Without a bound, random tokens
each cost one TokenReview call: a client could make the API server do a review per request.
So a failed review is cached too (briefly: `FAILED_TTL`), and each client address may spend
`FAILED_BURST` failed reviews at once, refilled at `FAILED_PER_SECOND`; a request that would
need one more gets 429 without a review. A review that succeeds costs its address nothing,
so a client with good tokens is never held back. IPv6 addresses count by their /64 (one host
has a whole /64 to pick from). One `TokenGuard` serves every node of a process (the
listener's), so a thousand nodes do not multiply the bound. No token, nor its hash, is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kubelet_sim.kube.reviews import ReviewUnavailable, User
from kubelet_sim.server.metrics import Counters

TOKEN_TTL = 120.0  # a token the API server vouched for (the kubelet's cache TTL)
FAILED_TTL = 30.0  # a token it rejected
FAILED_BURST = 5.0  # failed reviews a client address may spend at once
FAILED_PER_SECOND = 1.0  # and then this many a second
CACHE_LIMIT = 4096  # tokens remembered per kind (good, failed); past it the oldest go
CLIENT_LIMIT = 4096  # client addresses remembered; past it the oldest go

HELP = {
    "kubelet_sim_server_token_reviews_total": (
        "counter", "TokenReviews sent to the API server, by result.",
    ),
    "kubelet_sim_server_token_cache_hits_total": (
        "counter", "Bearer tokens answered from the cache, by result.",
    ),
    "kubelet_sim_server_token_reviews_throttled_total": (
        "counter", "Requests answered 429: their address spent its failed reviews.",
    ),
}  # fmt: skip


class Throttled(Exception):
    """The client's address has no failed review left to spend: answer 429, review nothing."""


Review = Callable[[str], User | None]
K = TypeVar("K")
V = TypeVar("V")


class TokenGuard:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._secret = os.urandom(32)  # per process: the cache's keys mean nothing elsewhere
        self._lock = threading.Lock()
        self._good: dict[bytes, tuple[User, float]] = {}
        self._failed: dict[bytes, float] = {}
        self._budgets: dict[str, tuple[float, float]] = {}  # address: (left, when)

    def authenticate(
        self, token: str, client: str, review: Review, counters: Counters | None = None
    ) -> User | None:
        """The token's user, or None (rejected, or the API server could not say). `client` is
        the peer's IP address. Raises Throttled when a review is needed and the address has
        none left."""
        key = hmac.new(self._secret, token.encode(), hashlib.sha256).digest()
        address = _address_key(client)
        now = self._clock()
        with self._lock:
            good = self._good.get(key)
            if good is not None and good[1] > now:
                _count(counters, "kubelet_sim_server_token_cache_hits_total", "authenticated")
                return good[0]
            failed_until = self._failed.get(key, 0.0)
            if failed_until > now:
                _count(counters, "kubelet_sim_server_token_cache_hits_total", "rejected")
                return None
            if not self._spend(address, now):
                if counters is not None:
                    counters.add("kubelet_sim_server_token_reviews_throttled_total")
                raise Throttled
        try:
            user = review(token)
        except ReviewUnavailable:
            _count(counters, "kubelet_sim_server_token_reviews_total", "error")
            return None  # not cached, and the address's spend stays spent
        with self._lock:
            if user is None:
                _remember(self._failed, key, now + FAILED_TTL, CACHE_LIMIT)
            else:
                _remember(self._good, key, (user, now + TOKEN_TTL), CACHE_LIMIT)
                self._refund(address)
        _count(counters, "kubelet_sim_server_token_reviews_total", _result(user))
        return user

    def _spend(self, address: str, now: float) -> bool:
        left, when = self._budgets.pop(address, (FAILED_BURST, now))
        left = min(FAILED_BURST, left + (now - when) * FAILED_PER_SECOND)
        if left >= 1.0:
            left -= 1.0
            spent = True
        else:
            spent = False
        _remember(self._budgets, address, (left, now), CLIENT_LIMIT)
        return spent

    def _refund(self, address: str) -> None:
        left, when = self._budgets.get(address, (FAILED_BURST, 0.0))
        self._budgets[address] = (min(FAILED_BURST, left + 1.0), when)


def _remember(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """Insert at the end (insertion order is age); past the limit the oldest entry goes."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]


def _address_key(client: str) -> str:
    """The address a budget is kept for: IPv4 as it is, IPv6 by its /64."""
    try:
        ip = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return client
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _result(user: User | None) -> str:
    return "rejected" if user is None else "authenticated"


def _count(counters: Counters | None, name: str, result: str) -> None:
    if counters is not None:
        counters.add(name, result=result)
