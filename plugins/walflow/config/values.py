"""How Debezium's configuration writes a list: a comma-separated string (``a, b``), or, in YAML, a real list."""

from __future__ import annotations

from typing import Any


def split_list(value: Any) -> list[str]:
    """The items of a list setting, stripped, empty ones left out; ``None`` is no item. In a text, as Debezium splits
    its lists (``Strings.listOfRegex``), ``\\,`` is a comma within an item, and ``\\\\`` a backslash that escapes
    nothing of the list (both characters stay, for the regular expression).

    :raises TypeError: for a value that is neither text nor a list.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in _split_at_commas(value) if item.strip()]
    if isinstance(value, (list, tuple)):
        return [str(item).strip() for item in value if str(item).strip()]
    raise TypeError(f"expected a comma-separated string or a list, got {type(value).__name__}")


def _split_at_commas(text: str) -> list[str]:
    items: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            following = text[i + 1]
            current.append("," if following == "," else ch + following)
            i += 2
            continue
        if ch == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    items.append("".join(current))
    return items
