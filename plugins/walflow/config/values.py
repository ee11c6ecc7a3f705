"""How Debezium's configuration writes a list: a comma-separated string (``a, b``), or, in YAML, a real list."""

from __future__ import annotations

from typing import Any


def split_list(value: Any) -> list[str]:
    """The items of a list setting, stripped, empty ones left out; ``None`` is no item.

    :raises TypeError: for a value that is neither text nor a list.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return [str(item).strip() for item in value if str(item).strip()]
    raise TypeError(f"expected a comma-separated string or a list, got {type(value).__name__}")
