"""The lake compared with its source, row by row: what every lake test and the torture run (tests/torture) check.

Values are normalised by type so that the two readers (psycopg for the source, pyiceberg for the lake) agree on
what equal means: JSON documents parsed, numbers of equal value equal, arrays as lists, columns the lake keeps as
history (dropped in the source) and its metadata columns left out.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import psycopg
from psycopg import sql

from tests.support import lake_rows


def _norm(value: Any) -> Any:
    if isinstance(value, (dict, list)) and not isinstance(value, str):
        if isinstance(value, list):
            return tuple(_norm(v) for v in value)
        return json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value[:1] in "{[" and value[-1:] in "}]":
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    if isinstance(value, decimal.Decimal):
        return value.normalize() if value.is_finite() else str(value)
    if isinstance(value, float) and value.is_integer():
        return decimal.Decimal(int(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return decimal.Decimal(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def source_table(dsn: str, schema: str, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The source table's columns and rows (jsonb read as text, so both sides parse it alike)."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        columns = [d.name for d in cur.description]
        return columns, cur.fetchall()


def differences(dsn: str, namespace: str, lake_table: str, schema: str, table: str, warehouse: str | None = None, limit: int = 5) -> list[str]:
    """What differs between the source table and its lake table, as multisets of rows over the source's columns
    (empty: equal). Keyed or not, equal means the same rows the same number of times."""
    columns, rows = source_table(dsn, schema, table)
    try:
        lake = lake_rows(namespace, lake_table, warehouse)
    except Exception as exc:  # noqa: BLE001 - a missing lake table is a difference, said as such
        return [f"{schema}.{table}: lake table {lake_table} cannot be read ({exc})"] if rows else []
    missing = [c for c in columns if lake and c not in lake[0]]
    if missing:
        return [f"{schema}.{table}: the lake table has no column(s) {missing} (it has {sorted(lake[0])})"]
    source_rows: dict[Any, int] = {}
    for row in rows:
        key = tuple(_norm(v) for v in row)
        source_rows[key] = source_rows.get(key, 0) + 1
    lake_counts: dict[Any, int] = {}
    for row in lake:
        key = tuple(_norm(row.get(c)) for c in columns)
        lake_counts[key] = lake_counts.get(key, 0) + 1
    out = []
    for key in set(source_rows) | set(lake_counts):
        if source_rows.get(key, 0) != lake_counts.get(key, 0):
            out.append(f"{schema}.{table}: row {dict(zip(columns, key))}: source {source_rows.get(key, 0)}, lake {lake_counts.get(key, 0)}")
            if len(out) >= limit:
                break
    return out
