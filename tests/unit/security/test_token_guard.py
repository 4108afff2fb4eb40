"""The bearer-token guard on a clock moved by hand: tokens are reviewed once per cache
lifetime (failed ones briefly), each client address spends a bounded number of failed reviews,
the process as a whole a bounded number more (never shutting out a client that authenticated
before), a good review costs nothing, and nothing it keeps holds a token."""

from __future__ import annotations

import contextlib

import pytest

from kubelet_sim.kube.reviews import ReviewUnavailable, User
from kubelet_sim.server import budgets, tokens
from kubelet_sim.server.metrics import Counters
from kubelet_sim.server.tokens import Throttled, TokenGuard

ALICE = User("alice", ("system:authenticated",))
GOOD = "g00d-token"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Api:
    """TokenReview's stand-in: GOOD is alice, "flaky" an error, anything else unknown."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def review(self, token: str) -> User | None:
        self.asked.append(token)
        if token == "flaky":
            raise ReviewUnavailable("the API server did not answer")
        return ALICE if token == GOOD else None


def test_answers_are_cached_good_ones_longer() -> None:
    clock, api, counters = Clock(), Api(), Counters()
    guard = TokenGuard(clock)
    assert guard.authenticate(GOOD, "10.0.0.1", api.review, counters) == ALICE
    assert guard.authenticate("bad", "10.0.0.1", api.review, counters) is None
    for _ in range(5):
        assert guard.authenticate(GOOD, "10.0.0.1", api.review, counters) == ALICE
        assert guard.authenticate("bad", "10.0.0.1", api.review, counters) is None
    assert api.asked == [GOOD, "bad"]
    clock.now += tokens.FAILED_TTL + 1
    guard.authenticate(GOOD, "10.0.0.1", api.review)
    guard.authenticate("bad", "10.0.0.1", api.review)
    assert api.asked == [GOOD, "bad", "bad"], "a failure is forgotten first"
    clock.now += tokens.TOKEN_TTL
    guard.authenticate(GOOD, "10.0.0.1", api.review)
    assert api.asked[-1] == GOOD
    assert counters.get("kubelet_sim_server_token_cache_hits_total", result="rejected") == 5
    assert counters.get("kubelet_sim_server_token_reviews_total", result="authenticated") == 1


def test_failed_reviews_are_bounded_per_address() -> None:
    clock, api, counters = Clock(), Api(), Counters()
    guard = TokenGuard(clock)
    burst = int(budgets.ADDRESS_BURST)
    for i in range(burst):
        assert guard.authenticate(f"random-{i}", "10.0.0.1", api.review, counters) is None
    with pytest.raises(Throttled):
        guard.authenticate("random-x", "10.0.0.1", api.review, counters)
    assert guard.authenticate("random-y", "10.0.0.2", api.review) is None, "its own budget"
    with pytest.raises(Throttled):  # an address does not spend a good review either
        guard.authenticate(GOOD, "10.0.0.1", api.review)
    assert guard.authenticate("random-0", "10.0.0.1", api.review) is None, "cached: free"
    clock.now += 1 / budgets.ADDRESS_PER_SECOND
    assert guard.authenticate(GOOD, "10.0.0.1", api.review) == ALICE, "refilled"
    assert guard.authenticate("random-z", "10.0.0.1", api.review) is None, "and refunded"
    assert len(api.asked) == burst + 3
    assert counters.get("kubelet_sim_server_token_reviews_throttled_total") == 1


def test_an_api_error_is_not_cached_but_spends() -> None:
    clock, api = Clock(), Api()
    guard = TokenGuard(clock)
    for _ in range(int(budgets.ADDRESS_BURST)):
        assert guard.authenticate("flaky", "10.0.0.1", api.review) is None
    assert api.asked == ["flaky"] * int(budgets.ADDRESS_BURST)
    with pytest.raises(Throttled):
        guard.authenticate("flaky", "10.0.0.1", api.review)


def test_ipv6_clients_share_their_64() -> None:
    guard, api = TokenGuard(Clock()), Api()
    for i in range(int(budgets.ADDRESS_BURST)):
        guard.authenticate(f"t{i}", f"2001:db8:0:1::{i + 1}", api.review)
    with pytest.raises(Throttled):
        guard.authenticate("t-next", "2001:db8:0:1:ffff::1", api.review)
    assert guard.authenticate("t-other", "2001:db8:0:2::1", api.review) is None
    for i in range(int(budgets.ADDRESS_BURST)):  # an IPv4-mapped address is its IPv4 address
        guard.authenticate(f"m{i}", "::ffff:10.9.9.9", api.review)
    with pytest.raises(Throttled):
        guard.authenticate("v", "10.9.9.9", api.review)


def test_the_guard_keeps_no_token() -> None:
    guard, api = TokenGuard(Clock()), Api()
    secret = "s3cr3t-token-value"
    guard.authenticate(secret, "10.0.0.1", api.review)
    guard.authenticate(GOOD, "10.0.0.1", api.review)
    kept = repr(vars(guard))
    assert secret not in kept
    assert GOOD not in kept
    assert all(len(key) == 32 for key in [*guard._failed, *guard._good])


def test_addresses_taking_turns_past_the_table_are_bounded_by_the_process() -> None:
    """Issue 41, item 10: 4,097 IPv6 /64s, one more than the table of addresses holds, each
    send 5 random tokens twice over (an address pushed out of the table came back with a full
    budget: 40,970 reviews at once). The process's bound holds them to PROCESS_BURST; a client
    that authenticated before is still reviewed, and its new good token gets in."""
    clock, api = Clock(), Api()
    guard = TokenGuard(clock)
    assert guard.authenticate(GOOD, "2001:db8:ffff::1", api.review) == ALICE
    addresses = [
        f"2001:db8:{i >> 16:x}:{i & 0xFFFF:x}::1" for i in range(budgets.ADDRESS_LIMIT + 1)
    ]
    throttled = 0
    for turn in range(2):
        for i, address in enumerate(addresses):
            for n in range(int(budgets.ADDRESS_BURST)):
                try:
                    guard.authenticate(f"random-{turn}-{i}-{n}", address, api.review)
                except Throttled:
                    throttled += 1
    assert len(api.asked) == 1 + budgets.PROCESS_BURST
    assert throttled == 2 * len(addresses) * budgets.ADDRESS_BURST - budgets.PROCESS_BURST

    def renewed(user: str) -> User | None:  # the known client's next token, as its own review
        api.asked.append(user)
        return ALICE

    assert guard.authenticate("renewed-token", "2001:db8:ffff::2", renewed) == ALICE
    with pytest.raises(Throttled):  # a stranger waits for the strangers' share to refill
        guard.authenticate("a-stranger's-token", "2001:db8:fffe::1", renewed)
    clock.now += 1.0  # PROCESS_PER_SECOND more
    assert guard.authenticate("a-stranger's-token", "2001:db8:fffe::1", renewed) == ALICE


def test_a_known_address_failing_spends_its_own_share_of_the_process() -> None:
    """The process's bound for known clients holds too: their failures spend it, not the
    strangers' (whose flood they do not feel)."""
    guard, api = TokenGuard(Clock()), Api()
    known = [f"10.1.{i >> 8}.{i & 0xFF}" for i in range(int(budgets.PROCESS_BURST))]
    for address in known:
        assert guard.authenticate(GOOD, address, api.review) == ALICE
    reviews = len(api.asked)
    for address in known:
        for n in range(int(budgets.ADDRESS_BURST)):
            with contextlib.suppress(Throttled):
                guard.authenticate(f"bad-{address}-{n}", address, api.review)
    assert len(api.asked) - reviews == budgets.PROCESS_BURST
    assert guard.authenticate("stranger-bad", "10.2.0.1", api.review) is None, "their own share"
