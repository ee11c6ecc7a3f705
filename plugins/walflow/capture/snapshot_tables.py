"""What an initial snapshot reads and how: the planned tables with their keys, keyset-ordered chunks of rows, and the
transaction that imports the snapshot.

Shared by the snapshot in one process (:mod:`walflow.capture.snapshot`), its reader processes
(:mod:`walflow.capture.snapshot_workers`) and the incremental snapshot's chunks
(:mod:`walflow.capture.incremental.chunks`), so that none of them imports another for these.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.context import CaptureHelpers
from walflow.config.patterns import compile_patterns
from walflow.errors import SourceError
from walflow.records.events import TableSchema
from walflow.source.catalog import Catalog, CatalogTable
from walflow.source.connection import quote_table
from walflow.source.publication import list_tables

log = logging.getLogger(__name__)

#: Seconds between two progress lines per table.
PROGRESS_EVERY_S = 10.0


class SnapshotError(SourceError):
    """A snapshot could not be taken; nothing it produced was confirmed."""


@dataclass
class SnapshotTable:
    """One table to snapshot, with the keyset it is read by."""

    schema: TableSchema
    catalog: CatalogTable
    key: list[str]
    key_types: list[str]
    override: str | None = None
    condition: str | None = None  # additional-condition of an ad-hoc snapshot
    #: the chunk SELECTs of an incremental snapshot built for this plan, by kind (:meth:`ChunkReader._chunk_query`)
    queries: dict[tuple[bool, bool], bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.schema.data_collection


def key_types(catalog: CatalogTable, key: list[str]) -> list[str]:
    return [catalog.columns[k].type.name for k in key]


def plan_tables(
    conn: psycopg.Connection, context: CaptureHelpers, *, only: list[str] | None = None
) -> list[SnapshotTable]:
    """The captured tables a snapshot reads, with their keysets and SELECT overrides.

    :param context: the task's context (its configuration, filters, column rules and serializer), or the helpers
        alone where there is no producer yet.
    :param only: regular expressions narrowing the tables (``snapshot.include.collection.list`` or an
        ad-hoc snapshot's ``data-collections``); ``None`` means every captured table.
    """
    config, filters, serializer, rules = context.config, context.filters, context.serializer, context.rules
    catalog = Catalog(conn)
    patterns = compile_patterns(only or [], "'snapshot.include.collection.list'")
    overrides = set(config.snapshot_select_statement_overrides)
    planned = []
    for schema, table, oid in debezium_table_order(list_tables(conn, filters), config.table_include_list):
        name = f"{schema}.{table}"
        if patterns and not any(p.fullmatch(name) for p in patterns):
            continue
        info = catalog.table(oid)
        if info is None:
            continue
        events_schema = TableSchema.from_catalog(config, filters, serializer, info, rules)
        key = list(info.primary_key)
        override = None
        if name in overrides or f'"{schema}"."{table}"' in overrides:
            override = config.snapshot_select_overrides.get(name) or config.snapshot_select_overrides.get(
                f'"{schema}"."{table}"'
            )
            if not override:
                raise SnapshotError(
                    f"'snapshot.select.statement.overrides' names {name} "
                    f"but 'snapshot.select.statement.overrides.{name}' holds no SELECT statement"
                )
        planned.append(SnapshotTable(events_schema, info, key, key_types(info, key), override))
    return planned


def debezium_table_order(
    tables: list[tuple[str, str, int, str, bool]], include: list[str]
) -> list[tuple[str, str, int]]:
    """The order in which Debezium snapshots tables: for each ``table.include.list`` entry in turn (all tables when
    there is none), the tables it matches that are not listed yet, sorted by ``schema.table``."""
    patterns = compile_patterns(include or [".*"], "'table.include.list'")
    ordered: list[tuple[str, str, int]] = []
    seen: set[int] = set()
    by_name = sorted(tables, key=lambda t: f"{t[0]}.{t[1]}")
    for pattern in patterns:
        for schema, table, oid, *_ in by_name:
            if oid not in seen and pattern.fullmatch(f"{schema}.{table}"):
                seen.add(oid)
                ordered.append((schema, table, oid))
    return ordered


#: Types whose cast to text is a function that differs from their output function (char(n) loses its padding,
#: inet shows /32): these are read through format('%s'), which uses the output function. (Queries built
#: from _columns_sql are always executed with a parameter list, so '%%' stands for '%'.)
_OUTPUT_FUNCTION_TYPES = {"bpchar", "inet", "cidr"}


def sql_fragment(text: str) -> sql.SQL:
    """A user-written SQL fragment (SELECT override, additional condition) for a query executed with a parameter
    list: psycopg reads ``%`` there as a placeholder, so ``LIKE 'a%'`` must reach it as ``%%``."""
    return sql.SQL(text.replace("%", "%%"))


def condition_sql(text: str) -> sql.Composed:
    """A user's condition (checked by :func:`walflow.config.expressions.check_condition`) ready for a WHERE clause: in
    parentheses on lines of their own, so a trailing ``--`` comment cannot swallow the closing one."""
    return sql.SQL("(\n{}\n)").format(sql_fragment(text))


def _columns_sql(table: SnapshotTable) -> sql.Composed:
    """Every column read as its text output, exactly what pgoutput sends, so one converter serves both paths."""
    parts = []
    for name in table.schema.column_names:
        column = sql.Identifier(name)
        info = table.catalog.columns.get(name)
        if info is not None and info.type.base_name in _OUTPUT_FUNCTION_TYPES:
            parts.append(sql.SQL("CASE WHEN {0} IS NULL THEN NULL ELSE format('%%s', {0}) END AS {0}").format(column))
        else:
            parts.append(sql.SQL("{0}::text").format(column))
    return sql.SQL(", ").join(parts)


def read_chunks(
    conn: psycopg.Connection,
    table: SnapshotTable,
    fetch_size: int,
    *,
    after: list[str] | None = None,
    upto: list[str] | None = None,
) -> Iterator[Sequence[Any]]:
    """Yield the table's rows (as text) in keyset order, ``fetch_size`` rows per query.

    :param after: exclusive lower bound of the key (text values), to resume or split.
    :param upto: inclusive upper bound of the key.
    """
    cols = _columns_sql(table)
    ident = quote_table(table.catalog.schema, table.catalog.name)
    if table.override or not table.key:
        query = (
            sql.SQL("SELECT {} FROM ({}) AS snapshot_override").format(cols, sql_fragment(table.override))
            if table.override
            else sql.SQL("SELECT {} FROM {}").format(cols, ident)
        )
        if table.condition:
            query = sql.SQL("{} WHERE {}").format(query, condition_sql(table.condition))
        with conn.cursor(name=f"walflow_snap_{table.catalog.oid}") as cur:
            cur.itersize = fetch_size
            cur.execute(query, [])
            while rows := cur.fetchmany(fetch_size):
                yield from rows
        return
    # Qualified: the select list casts every column to text under its own name, and an unqualified ORDER BY
    # would sort by that text instead of by the key's type.
    key_idents = sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key)
    placeholders = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql_fragment(t)) for t in table.key_types)
    key_index = [table.schema.column_names.index(k) for k in table.key]
    conditions: list[sql.Composable] = []
    if table.condition:
        conditions.append(condition_sql(table.condition))
    upto_params: list[str] = []
    if upto is not None:
        conditions.append(sql.SQL("({}) <= ({})").format(key_idents, placeholders))
        upto_params = list(upto)
    last = after
    with conn.cursor() as cur:
        while True:
            where = list(conditions)
            params: list[Any] = []
            if last is not None:
                where.insert(0, sql.SQL("({}) > ({})").format(key_idents, placeholders))
                params.extend(last)
            params.extend(upto_params)
            query = sql.SQL("SELECT {} FROM {} AS walflow_t{} ORDER BY {} LIMIT {}").format(
                cols,
                ident,
                sql.SQL(" WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
                key_idents,
                sql.Literal(fetch_size),
            )
            cur.execute(query, params)
            rows = cur.fetchall()
            if not rows:
                return
            yield from rows
            if len(rows) < fetch_size:
                return
            last = [rows[-1][i] for i in key_index]


def _begin_snapshot_transaction(conn: psycopg.Connection, snapshot_name: str | None, timeout_ms: int = 0) -> None:
    """READ ONLY: nothing a SELECT override calls can change data. ``timeout_ms`` (``database.query.timeout.ms``)
    bounds each query, which reads one chunk (or one fetch of a cursor)."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    if snapshot_name:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
    if timeout_ms:
        conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(f"{timeout_ms}ms")))


def _lock_tables(conn: psycopg.Connection, tables: list[SnapshotTable], timeout_ms: int) -> None:
    """ACCESS SHARE locks keep DDL out of the tables while they are read (``snapshot.lock.timeout.ms``)."""
    if not tables:
        return
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{timeout_ms}ms")))
    try:
        for table in tables:
            conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                    quote_table(table.catalog.schema, table.catalog.name)
                )
            )
    except psycopg.errors.LockNotAvailable:
        error = SnapshotError(
            f"could not lock table {table.name} within snapshot.lock.timeout.ms={timeout_ms}: another session holds "
            "an exclusive lock (DDL in progress?). Retry later or raise 'snapshot.lock.timeout.ms'."
        )
        error.retryable = True  # the lock is usually gone a little later
        raise error from None
