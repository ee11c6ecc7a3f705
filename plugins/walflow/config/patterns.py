"""Regular expressions written by users (include/exclude lists, column rules, signals), matched with a time bound.

Debezium's lists are Java regular expressions, translated to the ``regex`` module's syntax with Java's meaning
(:mod:`walflow.config.javaregex`). A careless (or hostile) one such as ``(?:[a-z_.]+)+\\d`` makes a backtracking
engine run for minutes on an ordinary table name, while the stream task holds the slot. The ``regex`` module
(lookarounds and back-references included, which linear-time engines such as RE2 refuse, and which Debezium's Java
patterns allow) is far less prone to catastrophic backtracking, and takes a ``timeout`` per match. A pattern that
still exceeds the bound on a name fails with :class:`PatternError`, naming the pattern, where it came from and the
name, instead of stalling the task.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from walflow.config.javaregex import CASE_INSENSITIVE, compile_java
from walflow.errors import PatternError

#: The longest one match of a user's pattern against one name may take, in seconds. Names are at most a few hundred
#: characters, which a sane pattern matches in microseconds: only runaway backtracking comes near this.
MATCH_TIMEOUT_S = 0.25
#: ``regex`` bounds a match by wall-clock time, which a busy machine also spends on other threads and processes: a
#: match that exceeds the bound is tried again (at most this many times, each bounded by :data:`RETRY_TIMEOUT_S`)
#: and condemned only when this thread itself spent :data:`MATCH_TIMEOUT_S` of CPU time on it.
RETRIES = 3
RETRY_TIMEOUT_S = 1.0

#: The CPU time all the matches of one signal's patterns may take together (each match is bounded too): a signal
#: naming many patterns against many captured tables must not hold the stream for a bound per match each.
SIGNAL_BUDGET_S = 1.0


class MatchBudget:
    """CPU time shared by several matches (those of one signal): :meth:`Pattern.fullmatch` charges each match to it
    and fails with :class:`PatternError` once it is spent.

    :param seconds: the CPU time all the matches may take together.
    :param origin: what the matches are for, quoted in the error (``signal 'snap-1'``).
    """

    __slots__ = ("left", "origin", "seconds")

    def __init__(self, seconds: float, origin: str) -> None:
        self.seconds = seconds
        self.left = seconds
        self.origin = origin

    def charge(self, spent: float, pattern: str) -> None:
        self.left -= spent
        if self.left < 0:
            raise PatternError(
                f"{self.origin}: matching its patterns (the last {pattern!r}) against the table names took more than "
                f"{self.seconds} s of CPU time in all. Name fewer tables per signal, or list them literally."
            )


class Pattern:
    """One anchored, case-insensitive user pattern (Debezium's lists match whole names, ignoring case).

    :param text: the regular expression as the user wrote it.
    :param origin: where it came from, quoted in errors (``'table.include.list'``, ``signal 'snap-1'``).
    :raises PatternError: when ``text`` is not a valid regular expression.
    """

    __slots__ = ("_compiled", "origin", "text")

    def __init__(self, text: str, origin: str) -> None:
        try:
            # Debezium compiles its lists with Java, case-insensitive: the same pattern, translated (config.javaregex)
            self._compiled = compile_java(text, CASE_INSENSITIVE, origin)
        except TypeError as exc:
            raise PatternError(f"{origin}: {text!r} is not a valid regular expression ({exc})") from None
        self.text = text
        self.origin = origin

    def fullmatch(self, name: str, budget: MatchBudget | None = None) -> bool:
        """Whether the whole of ``name`` matches; :class:`PatternError` when that takes longer than the bound, or
        when it spends the last of ``budget``."""
        if budget is None:
            return self._fullmatch(name)
        started = time.thread_time()
        try:
            return self._fullmatch(name)
        finally:
            budget.charge(time.thread_time() - started, self.text)

    def _fullmatch(self, name: str) -> bool:
        try:
            return self._compiled.fullmatch(name, timeout=MATCH_TIMEOUT_S) is not None
        except TimeoutError:
            pass
        for _ in range(RETRIES):
            started = time.thread_time()
            try:
                return self._compiled.fullmatch(name, timeout=RETRY_TIMEOUT_S) is not None
            except TimeoutError:
                if time.thread_time() - started >= MATCH_TIMEOUT_S:
                    break  # it computed all along: runaway backtracking, not a busy machine
        raise PatternError(
            f"{self.origin}: matching {self.text!r} against {name!r} took more than {MATCH_TIMEOUT_S} s of CPU time "
            "(runaway backtracking, typically nested repetition such as (a+)+ or overlapping alternatives such as "
            "(a|aa)+). Rewrite the pattern without nested repetition, or list the names literally (comma-separated)."
        )

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


def compile_patterns(texts: Iterable[str], origin: str) -> list[Pattern]:
    """Every pattern of a list (``origin`` names the list in errors)."""
    return [Pattern(text, origin) for text in texts]


def matches_any(patterns: Iterable[Pattern], name: str, budget: MatchBudget | None = None) -> bool:
    return any(p.fullmatch(name, budget) for p in patterns)
