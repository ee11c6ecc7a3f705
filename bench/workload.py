"""The benchmarks' table and rows, one definition for all of them so that their figures describe the same rows."""

from __future__ import annotations

#: The benchmarks' table: a key and the common types (text, numeric, timestamp, boolean).
TABLE = """
CREATE TABLE bench (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    price numeric(12, 2),
    created timestamp NOT NULL,
    active boolean
)
"""

#: Rows ``%s`` to ``%s`` (ids, inclusive) of the benchmarks' table, in one statement (one transaction when streamed).
ROWS_SQL = (
    "INSERT INTO bench SELECT g, 'name-' || g, (g %% 100000) / 100.0, timestamp '2024-01-01' + g * interval '1 second', "
    "g %% 2 = 0 FROM generate_series(%s::bigint, %s::bigint) g"
)
