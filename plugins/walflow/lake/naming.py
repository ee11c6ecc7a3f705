"""Names: lake tables from source tables, Spark SQL quoting, and which Kafka topics carry table changes."""

from __future__ import annotations

import hashlib
import re

from walflow.names import topic_name

_NOT_WORD = re.compile(r"[^\w]")


def table_name(schema: str, table: str) -> str:
    """Iceberg table name of a source table: ``<schema>__<table>``, lower-case, letters (any script), digits and ``_``.

    Catalogs differ in what they accept (Hive lower-cases, some reject dots and spaces), so other characters become
    ``_``. Two source tables must never share a lake table, so whenever the plain name is not exactly
    ``<schema>__<table>`` (a character was replaced or lower-cased, or the schema holds ``__`` or ends with ``_``,
    which makes the split ambiguous) a short stable hash of the exact source names is appended:
    ``public.orders`` stays ``public__orders``, ``"Sales"."a.b"`` becomes ``sales__a_b_3f2c9a1d``.
    """
    plain = f"{schema}__{table}"
    name = _NOT_WORD.sub("_", plain.lower())
    if name == plain and "__" not in schema and not schema.endswith("_"):
        return name
    digest = hashlib.sha1(f"{schema}\0{table}".encode()).hexdigest()[:8]
    return f"{name}_{digest}"


def sql_quote(name: str) -> str:
    """A Spark SQL identifier: backquoted, backquotes inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal. Spark reads backslash escapes inside literals, so both ``\\`` and ``'`` are
    escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_table_topic(topic: str, prefix: str, delimiter: str, transaction: str) -> bool:
    """Whether ``topic`` carries the change events of a captured table of the connector with this ``topic.prefix``,
    ``topic.delimiter`` and ``topic.transaction``: it starts with the prefix and the delimiter, and is not the
    transaction-metadata topic nor the logical-decoding-message topic (``<prefix><delimiter>message``).
    The heartbeat topic starts with ``topic.heartbeat.prefix``, so it never matches."""
    start = topic_name(prefix, "", delimiter=delimiter)
    internal = {
        topic_name(prefix, transaction, delimiter=delimiter),
        topic_name(prefix, "message", delimiter=delimiter),
    }
    return topic.startswith(start) and len(topic) > len(start) and topic not in internal


def names_from_topic(topic: str, prefix: str, delimiter: str) -> tuple[str, str]:
    """(schema, table) read back from a table topic's name, for a topic none of whose records names its source
    (the names in the records are exact; the topic name has lost every character Kafka rejects)."""
    rest = topic[len(topic_name(prefix, "", delimiter=delimiter)) :]
    schema, _, table = rest.partition(delimiter)
    return schema, table
