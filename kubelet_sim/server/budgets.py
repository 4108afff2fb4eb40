"""How many failed authentications the kubelet API pays for: failed TokenReviews (the API
server's work) and failed client certificate checks (ours), each kind with a `FailureBudget`.

Each client address may cause `ADDRESS_BURST` failures at once, refilled at
`ADDRESS_PER_SECOND`; IPv6 addresses count by their /64 (one host has a whole /64 to pick from).
The table of addresses holds `ADDRESS_LIMIT` of them, and one that is pushed out comes back with
a full budget: 4,097 /64s taking turns would each get a fresh burst. So the whole process is
bounded too: `PROCESS_BURST` failures at once, `PROCESS_PER_SECOND` after. That bound must not
shut out a good client whose neighbours fail, so it is kept twice: once for strangers, once for
addresses in good standing (a credential of theirs held within `GOOD_STANDING` seconds; only a
credential that holds puts an address there). A flood from addresses that never authenticated
spends only the strangers' share; a client that authenticated before is judged on the other.
A check that succeeds costs nothing: what it spent is given back, so good clients never wear
their own budget down. Past a budget the request is answered 429 without the check.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

ADDRESS_BURST = 5.0  # failures a client address may cause at once
ADDRESS_PER_SECOND = 1.0  # and then this many a second
ADDRESS_LIMIT = 4096  # client addresses remembered; past it the oldest go
PROCESS_BURST = 100.0  # failures the process's strangers (or its known clients) cause at once
PROCESS_PER_SECOND = 20.0  # and then this many a second
GOOD_STANDING = 3600.0  # an address whose credential held is known this long (a token's hour)

K = TypeVar("K")
V = TypeVar("V")


class Throttled(Exception):
    """No failure left to spend (the client's address's, or the process's): answer 429, check
    nothing."""


@dataclass
class Bucket:
    """A token bucket: `left` of `burst` at `when`, refilled at `rate` a second."""

    burst: float
    rate: float
    left: float
    when: float

    def take(self, now: float) -> bool:
        self.left = min(self.burst, self.left + (now - self.when) * self.rate)
        self.when = now
        if self.left < 1.0:
            return False
        self.left -= 1.0
        return True

    def give(self) -> None:
        self.left = min(self.burst, self.left + 1.0)


@dataclass(frozen=True)
class Spent:
    """What one check spent, to be given back if it succeeds."""

    address: str
    process: Bucket


class FailureBudget:
    """Per client address and per process, as the module says; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._addresses: dict[str, Bucket] = {}
        self._known: dict[str, float] = {}  # address: until when it is in good standing
        self._strangers = Bucket(PROCESS_BURST, PROCESS_PER_SECOND, PROCESS_BURST, clock())
        self._friends = Bucket(PROCESS_BURST, PROCESS_PER_SECOND, PROCESS_BURST, clock())

    def spend(self, client: str) -> Spent:
        """Take one failure from `client`'s address and from its share of the process.
        Raises Throttled (and takes nothing) when either has none left."""
        address = address_key(client)
        now = self._clock()
        with self._lock:
            mine = self._addresses.pop(address, None)
            mine = mine or Bucket(ADDRESS_BURST, ADDRESS_PER_SECOND, ADDRESS_BURST, now)
            remember(self._addresses, address, mine, ADDRESS_LIMIT)
            known = self._known.get(address, 0.0) > now
            process = self._friends if known else self._strangers
            if not mine.take(now):
                raise Throttled
            if not process.take(now):
                mine.give()
                raise Throttled
            return Spent(address, process)

    def refund(self, spent: Spent) -> None:
        """The check succeeded: what it spent comes back, and its address is known a while."""
        with self._lock:
            spent.process.give()
            mine = self._addresses.get(spent.address)
            if mine is not None:
                mine.give()
        self.vouch(spent.address)

    def vouch(self, client: str) -> None:
        """A credential of `client`'s held (a cached one too): its address is known a while."""
        address = address_key(client)
        until = self._clock() + GOOD_STANDING
        with self._lock:
            remember(self._known, address, until, ADDRESS_LIMIT)


def remember(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """Insert at the end (insertion order is age); past the limit the oldest entry goes."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]


def address_key(client: str) -> str:
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
