"""walflow.config.patterns: a match slowed by a busy machine is not mistaken for runaway backtracking."""

from __future__ import annotations

import time
from typing import Any

import pytest

from walflow.config import patterns
from walflow.config.patterns import Pattern
from walflow.errors import PatternError


class _Starved:
    """A compiled pattern whose first ``misses`` matches exceed their wall-clock bound without computing."""

    def __init__(self, misses: int) -> None:
        self.misses = misses

    def fullmatch(self, name: str, timeout: float) -> Any:
        if self.misses:
            self.misses -= 1
            raise TimeoutError("regex timed out")
        return object()


def test_a_match_kept_waiting_is_tried_again() -> None:
    pattern = Pattern("public\\..+", "'table.include.list'")
    pattern._compiled = _Starved(misses=2)  # the first try and one retry time out while the thread waits
    assert pattern.fullmatch("public.items")


def test_runaway_backtracking_fails_with_the_pattern_and_the_name() -> None:
    # defeats regex's own safeguards (with letters, the case-insensitive translation's classes let regex see through it)
    pattern = Pattern(r"(?:(?:_|_)|(?:_|__))+!", "'schema.include.list'")
    started = time.thread_time()
    with pytest.raises(PatternError, match=r"'schema\.include\.list'.*'_{60}'.*CPU time"):
        pattern.fullmatch("_" * 60)
    # the first bound plus one retry that computed all along, not every retry. Counted in this thread's CPU time,
    # which a busy machine (make test's lanes beside) does not stretch: retries the machine starved spend less
    # than MATCH_TIMEOUT_S each, where computing through every retry would spend RETRIES * RETRY_TIMEOUT_S
    spent = time.thread_time() - started
    assert spent < patterns.MATCH_TIMEOUT_S * (1 + patterns.RETRIES) + patterns.RETRY_TIMEOUT_S + 0.25, spent


def test_a_signals_matches_share_one_budget() -> None:
    """Each match stays under its own bound, but together they spend the signal's budget: the match that spends the
    last of it fails, naming the origin and the pattern."""
    budget = patterns.MatchBudget(0.2, "signal 'bulk'")
    slow = Pattern(r"(?:(?:_|_)|(?:_|__))+!", "'data-collections'")
    with pytest.raises(
        PatternError, match=r"signal 'bulk': matching its patterns .* took more than 0\.2 s of CPU time in all"
    ):
        for i in range(50):
            slow.fullmatch("_" * 11 + str(i), budget)
    assert budget.left < 0
    fast = Pattern(r"public\..*", "'data-collections'")
    roomy = patterns.MatchBudget(1.0, "signal 'ok'")
    assert all(fast.fullmatch(f"public.t{i}", roomy) for i in range(1000)) and roomy.left > 0
