"""The bounded memo: at most `limit` entries, the oldest put dropped first."""

from __future__ import annotations

from kubelet_sim.formats.memo import BoundedMemo


def test_the_oldest_entry_goes_when_the_limit_is_passed() -> None:
    memo: BoundedMemo[str, str] = BoundedMemo(limit=2)
    memo.put("a", "SIGTERM")
    memo.put("b", "SIGUSR1")
    memo.put("a", "SIGINT")  # put again: the value changes, its place does not
    memo.put("c", "SIGKILL")
    assert "a" not in memo
    assert (memo.get("b"), memo.get("c"), len(memo)) == ("SIGUSR1", "SIGKILL", 2)
    memo.pop("b")
    memo.pop("missing")
    assert (memo.get("b"), len(memo)) == (None, 1)
