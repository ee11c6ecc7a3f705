"""How walflow names things, shared by every stage (and by the lake job's executors, so plain Python only): Kafka
topics as Debezium names them, and ``schema.table`` names as users write them.
"""

from __future__ import annotations

import re


def split_table_name(name: str) -> tuple[str, str]:
    """'schema.table' (each part optionally double-quoted) into its two parts."""
    parts: list[str] = []
    current = ""
    quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == '"':
            if quoted and i + 1 < len(name) and name[i + 1] == '"':
                current += '"'
                i += 1
            else:
                quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
        i += 1
    parts.append(current)
    if len(parts) == 1:
        return "public", parts[0]
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{name!r} is not a table name of the form schema.table")
    return parts[0], parts[1]


_TOPIC_INVALID = re.compile(r"[^A-Za-z0-9._-]")


def topic_name(*parts: str, delimiter: str = ".") -> str:
    """A Kafka topic name as the connector builds it: parts joined by ``topic.delimiter``, every character Kafka
    rejects replaced by ``_`` (as Debezium does)."""
    return _TOPIC_INVALID.sub("_", delimiter.join(parts))


def prefixes_nest(prefix: str, delimiter: str, other: str, other_delimiter: str) -> bool:
    """Whether the topics of one topic prefix look like table topics of the other (``shop`` and ``shop.eu``: the
    topic ``shop.eu.public.orders`` starts with ``shop.``), or the two prefixes are equal."""
    mine, theirs = topic_name(prefix, "", delimiter=delimiter), topic_name(other, "", delimiter=other_delimiter)
    return mine.startswith(theirs) or theirs.startswith(mine)
