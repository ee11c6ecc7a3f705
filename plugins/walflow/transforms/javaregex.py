"""Regular expressions of Kafka Connect's and Debezium's transforms: Java's syntax and meaning (translated by
:mod:`walflow.config.javaregex`), matched as ``Matcher.matches()`` matches (the whole text, case sensitive) with a
time bound, and Java's replacement syntax."""

from __future__ import annotations

import regex

from walflow.config.javaregex import compile_java
from walflow.errors import TransformError

#: the longest one match of a transform's regular expression against a topic name may take, in seconds
_MATCH_TIMEOUT_S = 1.0


class JavaPattern:
    """A regular expression in Java's syntax, matched as ``Matcher.matches()`` does (the whole text, case
    sensitive), with Java's replacement syntax (``$1``, ``${name}``, ``\\$``)."""

    def __init__(self, text: str, origin: str) -> None:
        self.text = text
        self.origin = origin
        self._compiled = compile_java(text, 0, origin)

    def fullmatch(self, name: str) -> regex.Match[str] | None:
        try:
            return self._compiled.fullmatch(name, timeout=_MATCH_TIMEOUT_S)
        except TimeoutError:
            raise TransformError(
                f"{self.origin}: matching {self.text!r} against {name!r} took over {_MATCH_TIMEOUT_S} s"
            ) from None

    def replace_first(self, name: str, replacement: str) -> str | None:
        """``name`` with its match replaced (Java's ``replaceFirst`` after ``matches()``), or ``None`` when it does
        not match."""
        match = self.fullmatch(name)
        if match is None:
            return None
        return name[: match.start()] + expand(match, replacement, self.origin) + name[match.end() :]


def expand(match: regex.Match[str], replacement: str, origin: str) -> str:
    """Java's ``Matcher.appendReplacement``: ``$n`` and ``${name}`` are groups, a backslash quotes the next
    character."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if ch == "$":
            if replacement.startswith("{", i + 1):
                end = replacement.find("}", i + 2)
                if end < 0:
                    raise TransformError(f"{origin}: unclosed group name in replacement {replacement!r}")
                out.append(match.group(replacement[i + 2 : end]) or "")
                i = end + 1
                continue
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                # Java takes as many digits as still name a group
                if int(replacement[i + 1 : j + 1]) > (match.re.groups or 0) and j > i + 1:
                    break
                j += 1
            if j == i + 1:
                raise TransformError(f"{origin}: '$' without a group number in replacement {replacement!r}")
            number = int(replacement[i + 1 : j])
            if number > (match.re.groups or 0):
                raise TransformError(
                    f"{origin}: replacement {replacement!r} names group {number}, which the regex lacks"
                )
            out.append(match.group(number) or "")
            i = j
            continue
        out.append(ch)
        i += 1
    return "".join(out)
