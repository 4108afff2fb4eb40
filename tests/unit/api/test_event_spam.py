"""The kubelet's event recorder drops what client-go's spam filter refuses: 25 events per
object at once, then one per 5 minutes (EventSourceObjectSpamFilter)."""

from __future__ import annotations

from kubelet_sim.kube.events import SPAM_BURST, SPAM_REFILL_SECONDS, EventRef, SpamFilter


def test_an_object_gets_25_events_then_one_per_five_minutes() -> None:
    now = [0.0]
    spam = SpamFilter(lambda: now[0])
    pod = EventRef("ns", "p", "uid-1")
    other = EventRef("ns", "q", "uid-2")
    assert all(spam.allow(pod) for _ in range(SPAM_BURST))
    assert not spam.allow(pod)
    assert spam.allow(other)  # each object has its own bucket
    now[0] += SPAM_REFILL_SECONDS / 2
    assert not spam.allow(pod)
    now[0] += SPAM_REFILL_SECONDS / 2
    assert spam.allow(pod)
    assert not spam.allow(pod)
