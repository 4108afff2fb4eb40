"""The bearer-token guard on a clock moved by hand: tokens are reviewed once per cache
lifetime (failed ones briefly), each client address spends a bounded number of failed reviews,
a good review costs nothing, and nothing it keeps holds a token."""

from __future__ import annotations

import pytest

from kubelet_sim.kube.reviews import ReviewUnavailable, User
from kubelet_sim.server import tokens
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
    burst = int(tokens.FAILED_BURST)
    for i in range(burst):
        assert guard.authenticate(f"random-{i}", "10.0.0.1", api.review, counters) is None
    with pytest.raises(Throttled):
        guard.authenticate("random-x", "10.0.0.1", api.review, counters)
    assert guard.authenticate("random-y", "10.0.0.2", api.review) is None, "its own budget"
    with pytest.raises(Throttled):  # an address does not spend a good review either
        guard.authenticate(GOOD, "10.0.0.1", api.review)
    assert guard.authenticate("random-0", "10.0.0.1", api.review) is None, "cached: free"
    clock.now += 1 / tokens.FAILED_PER_SECOND
    assert guard.authenticate(GOOD, "10.0.0.1", api.review) == ALICE, "refilled"
    assert guard.authenticate("random-z", "10.0.0.1", api.review) is None, "and refunded"
    assert len(api.asked) == burst + 3
    assert counters.get("kubelet_sim_server_token_reviews_throttled_total") == 1


def test_an_api_error_is_not_cached_but_spends() -> None:
    clock, api = Clock(), Api()
    guard = TokenGuard(clock)
    for _ in range(int(tokens.FAILED_BURST)):
        assert guard.authenticate("flaky", "10.0.0.1", api.review) is None
    assert api.asked == ["flaky"] * int(tokens.FAILED_BURST)
    with pytest.raises(Throttled):
        guard.authenticate("flaky", "10.0.0.1", api.review)


def test_ipv6_clients_share_their_64() -> None:
    guard, api = TokenGuard(Clock()), Api()
    for i in range(int(tokens.FAILED_BURST)):
        guard.authenticate(f"t{i}", f"2001:db8:0:1::{i + 1}", api.review)
    with pytest.raises(Throttled):
        guard.authenticate("t-next", "2001:db8:0:1:ffff::1", api.review)
    assert guard.authenticate("t-other", "2001:db8:0:2::1", api.review) is None
    for i in range(int(tokens.FAILED_BURST)):  # an IPv4-mapped address is its IPv4 address
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
