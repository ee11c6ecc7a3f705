"""PostgreSQL's array literals (``{1,NULL,"a b"}``, ``{{1,2},{3,4}}``, ``[0:1]={a,b}``) split into element texts.

The element texts are then converted by the element type's converter, so arrays of every type share one parser;
the delimiter is the element type's (``,`` for almost all, ``;`` for ``box``, ``:`` for PostGIS geometries).
"""

from __future__ import annotations

from typing import Any


# -- arrays ----------------------------------------------------------------------------------------
def parse_array(text: str, delimiter: str = ",") -> list[Any]:
    """Split a PostgreSQL array literal (``{1,NULL,"a b"}``) into element texts (``None`` for NULL).

    A multi-dimensional literal (``{{1,2},{3,4}}``) gives nested lists, one level per dimension.
    """
    if text.startswith("["):  # explicit bounds: '[0:1]={a,b}'
        text = text[text.index("=") + 1 :]
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text[:50]!r}")
    body = text[1:-1]
    if not body:
        return []
    try:
        if body.startswith("{"):
            # an unquoted element never starts with a brace: this is a sub-array, so the array has 2+ dimensions
            nested, end = _parse_nested(text, 0, delimiter)
            if end != len(text):
                raise ValueError(f"not an array literal: {text[:50]!r}")
            return nested
        return _parse_flat(body, delimiter)
    except IndexError:
        raise ValueError(f"unterminated array literal: {text[:50]!r}") from None


def read_quoted(text: str, pos: int) -> tuple[str, int]:
    """The double-quoted element starting at ``text[pos] == '"'`` with its backslash escapes undone, and the
    position after its closing quote."""
    pos += 1
    out = []
    while text[pos] != '"':
        if text[pos] == "\\":
            pos += 1
        out.append(text[pos])
        pos += 1
    return "".join(out), pos + 1


def _parse_flat(body: str, delimiter: str = ",") -> list[Any]:
    """The elements of a one-dimensional array literal's body (between its braces)."""
    items: list[Any] = []
    i, n = 0, len(body)
    while i <= n:
        if i < n and body[i] == '"':
            value, i = read_quoted(body, i)
            items.append(value)
            i += 1  # the comma
        else:
            end = body.find(delimiter, i)
            if end < 0:
                end = n
            token = body[i:end]
            items.append(None if token == "NULL" else token)
            i = end + 1
    return items


def _parse_nested(text: str, pos: int, delimiter: str = ",") -> tuple[list[Any], int]:
    """Parse the sub-array starting at ``text[pos] == '{'``; return it and the position after its ``}``."""
    items: list[Any] = []
    pos += 1
    if text[pos] == "}":
        return items, pos + 1
    while True:
        ch = text[pos]
        if ch == "{":
            sub, pos = _parse_nested(text, pos, delimiter)
            items.append(sub)
        elif ch == '"':
            value, pos = read_quoted(text, pos)
            items.append(value)
        else:
            comma, close = text.find(delimiter, pos), text.find("}", pos)
            end = close if comma < 0 or close < comma else comma
            if end < 0:
                raise ValueError(f"unterminated array literal: {text[:50]!r}")
            token = text[pos:end]
            items.append(None if token == "NULL" else token)
            pos = end
        if text[pos] == delimiter:
            pos += 1
        elif text[pos] == "}":
            return items, pos + 1
        else:
            raise ValueError(f"malformed array literal near position {pos}: {text[:50]!r}")


def value_depth(items: list[Any]) -> int:
    depth = 1
    while items and items[0].__class__ is list:
        items = items[0]
        depth += 1
    return depth


def flatten_outer(items: list[Any], levels: int) -> list[Any]:
    """Merge the ``levels`` outermost dimensions into one (row-major order)."""
    for _ in range(levels):
        items = [sub for part in items for sub in part]
    return items
