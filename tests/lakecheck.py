"""The lake compared with its source, row by row: what every lake test and the torture run (tests/torture) check.

Values are normalised by type so that the two readers (psycopg for the source, pyiceberg for the lake) agree on
what equal means: JSON documents parsed, numbers of equal value equal, arrays as lists, columns the lake keeps as
history (dropped in the source) and its metadata columns left out.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import json
import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types import TypeInfo
from psycopg.types.enum import EnumInfo, register_enum
from psycopg.types.hstore import register_hstore

from tests.support import lake_rows


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        # a JSON object or an hstore, and (below) a map as pyiceberg reads it: its entries, sorted
        return tuple(sorted((str(k), _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return _norm(dict(value))
        return tuple(_norm(v) for v in value)
    if isinstance(value, str) and value[:1] in "{[" and value[-1:] in "}]":
        # a JSON document the lake keeps as text: compared as the source's parsed value is (a jsonb array is a list)
        try:
            return _norm(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.name  # psycopg's enum for a PostgreSQL enum type: its members are named by the labels
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
        hstore = TypeInfo.fetch(conn, "hstore")
        if hstore is not None:
            register_hstore(hstore, conn)  # read as dicts, as the lake's maps are compared
        # enum types, so that their arrays are read as lists (psycopg reads an array of an unknown type as its text)
        for (name,) in conn.execute("SELECT format_type(oid, NULL) FROM pg_type WHERE typtype = 'e'").fetchall():
            info = EnumInfo.fetch(conn, name)
            if info is not None:
                register_enum(info, conn)
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        columns = [d.name for d in cur.description]
        _TYPES[(dsn, schema, table)] = [d.type_code for d in cur.description]
        return columns, cur.fetchall()


#: the source columns' type OIDs of the last read of each table (:func:`source_table`)
_TYPES: dict[tuple[str, str, str], list[int]] = {}
#: numeric and bytea (and their arrays): the lake may hold them as text (exact decimals beyond what Spark holds, bytea
#: in base64 with binary.handling.mode base64)
_NUMERIC, _NUMERIC_ARRAY, _BYTEA, _BYTEA_ARRAY = 1700, 1231, 17, 1001


def _as_source(value: Any, oid: int) -> Any:
    """A lake value in the form the source's type reads: exact decimal text as a Decimal, base64 text as bytes."""
    if isinstance(value, list) and oid in (_NUMERIC_ARRAY, _BYTEA_ARRAY):
        return [_as_source(v, _NUMERIC if oid == _NUMERIC_ARRAY else _BYTEA) for v in value]
    if isinstance(value, str):
        if oid == _NUMERIC:
            return decimal.Decimal(value)
        if oid == _BYTEA:
            return base64.b64decode(value)
    return value


def differences(
    dsn: str, namespace: str, lake_table: str, schema: str, table: str, warehouse: str | None = None, limit: int = 5
) -> list[str]:
    """What differs between the source table and its lake table, as multisets of rows over the source's columns
    (empty: equal). Keyed or not, equal means the same rows the same number of times."""
    columns, rows = source_table(dsn, schema, table)
    try:
        lake = lake_rows(namespace, lake_table, warehouse)
    except Exception as exc:
        return [f"{schema}.{table}: lake table {lake_table} cannot be read ({exc})"] if rows else []
    missing = [c for c in columns if lake and c not in lake[0]]
    if missing:
        return [f"{schema}.{table}: the lake table has no column(s) {missing} (it has {sorted(lake[0])})"]
    source_rows: dict[Any, int] = {}
    for row in rows:
        key = tuple(_norm(v) for v in row)
        source_rows[key] = source_rows.get(key, 0) + 1
    lake_counts: dict[Any, int] = {}
    types = _TYPES.get((dsn, schema, table)) or [0] * len(columns)
    for row in lake:
        key = tuple(_norm(_as_source(row.get(c), oid)) for c, oid in zip(columns, types))
        lake_counts[key] = lake_counts.get(key, 0) + 1
    out = []
    for key in set(source_rows) | set(lake_counts):
        if source_rows.get(key, 0) != lake_counts.get(key, 0):
            out.append(
                f"{schema}.{table}: row {_shown(columns, key)}: source {source_rows.get(key, 0)},"
                f" lake {lake_counts.get(key, 0)}"
            )
            if len(out) >= limit:
                break
    return out


def _shown(columns: list[str], row: tuple[Any, ...], limit: int = 80) -> str:
    """A row of a difference, each value cut to ``limit`` characters (TOASTed values run to kilobytes)."""
    shown = []
    for column, value in zip(columns, row):
        text = repr(value)
        shown.append(f"{column}={text if len(text) <= limit else text[:limit] + f'… ({len(text)} characters)'}")
    return "{" + ", ".join(shown) + "}"
