"""Consistent initial snapshots: every captured table read under one snapshot, as ``op: r`` events.

When the setup creates the slot, it exports the slot's snapshot and every reader imports it, so the tables
are read exactly as of the slot's consistent point: the stream then continues with no gap and no overlap.
When the slot already exists, the readers share a REPEATABLE READ snapshot of their own and the snapshot's
WAL position is recorded (the reference's isolation approach): changes between the slot's position and
the snapshot may be streamed again after it, which replays to the same state.

Tables are read in keyset-ordered chunks of ``snapshot.fetch.size`` rows (the primary key, compared as a row
value), so nothing holds a whole table in memory. With ``snapshot.max.threads`` above 1, that many reader processes
read key ranges of the tables in parallel, each on its own connection that imports the same snapshot and with its
own producer (:mod:`walflow.snapshot_workers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from walflow.catalog import Catalog, CatalogTable
from walflow.config import ConnectorConfig
from walflow.emitter import SnapshotEmitter
from walflow.errors import SourceError
from walflow.events import Filters, Serializer, TableSchema
from walflow.kafka import EventProducer
from walflow.patterns import compile_patterns
from walflow.source import connect, list_tables, quote_table
from walflow.transforms import ColumnRules

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


@dataclass
class SnapshotSummary:
    tables: list[str] = field(default_factory=list)
    rows_per_table: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    position_lsn: str | None = None
    exported_snapshot: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def key_types(catalog: CatalogTable, key: list[str]) -> list[str]:
    return [catalog.columns[k].type.name for k in key]


def plan_tables(
    conn: psycopg.Connection,
    config: ConnectorConfig,
    *,
    only: list[str] | None = None,
    serializer: Serializer | None = None,
) -> list[SnapshotTable]:
    """The captured tables a snapshot reads, with their keysets and SELECT overrides.

    :param only: regular expressions narrowing the tables (``snapshot.include.collection.list`` or an
        ad-hoc snapshot's ``data-collections``); ``None`` means every captured table.
    """
    filters = Filters(config)
    serializer = serializer or Serializer(config.key_converter_schemas_enable, config.value_converter_schemas_enable)
    rules = ColumnRules(config)
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
            override = config.snapshot_select_overrides.get(name) or config.snapshot_select_overrides.get(f'"{schema}"."{table}"')
            if not override:
                raise SnapshotError(
                    f"'snapshot.select.statement.overrides' names {name} but 'snapshot.select.statement.overrides.{name}' "
                    "holds no SELECT statement"
                )
        planned.append(SnapshotTable(events_schema, info, key, key_types(info, key), override))
    return planned


def debezium_table_order(tables: list[tuple[str, str, int, str, bool]], include: list[str]) -> list[tuple[str, str, int]]:
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
    return sql.SQL(text.replace("%", "%%"))  # type: ignore[arg-type]


def condition_sql(text: str) -> sql.Composed:
    """A user's condition (checked by :func:`walflow.expressions.check_condition`) ready for a WHERE clause: in
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
) -> Iterator[list[Any]]:
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
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(quote_table(table.catalog.schema, table.catalog.name)))
    except psycopg.errors.LockNotAvailable:
        error = SnapshotError(
            f"could not lock table {table.name} within snapshot.lock.timeout.ms={timeout_ms}: another session holds "
            "an exclusive lock (DDL in progress?). Retry later or raise 'snapshot.lock.timeout.ms'."
        )
        error.retryable = True  # the lock is usually gone a little later
        raise error from None


class InitialSnapshot:
    """Read the planned tables under one snapshot and produce their ``r`` events.

    :param snapshot_name: an exported snapshot to import (slot creation), or ``None`` to take one here.
    :param position_lsn: the WAL position the snapshot corresponds to, recorded in each event's source.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        conninfo: str,
        producer: EventProducer,
        *,
        snapshot_name: str | None,
        position_lsn: int | None,
        progress: Callable[[str], None] | None = None,
        fault_hook: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.conninfo = conninfo
        self.producer = producer
        self.snapshot_name = snapshot_name
        self.position_lsn = position_lsn
        self._progress = progress or (lambda msg: log.info("%s", msg))
        # test seam: called with "snapshot_row" per row; fault-injection tests kill the process there
        self._fault = fault_hook

    def run(self, tables: list[SnapshotTable]) -> SnapshotSummary:
        config = self.config
        summary = SnapshotSummary(tables=[t.name for t in tables], exported_snapshot=self.snapshot_name is not None)
        started = time.monotonic()
        if config.snapshot_delay_ms:
            self._progress(f"snapshot.delay.ms: waiting {config.snapshot_delay_ms} ms before the snapshot")
            time.sleep(config.snapshot_delay_ms / 1000)
        threads = max(1, config.snapshot_max_threads) if tables else 1
        leader = connect(self.conninfo, autocommit=True, application_name=f"walflow:{config.name}:snapshot")
        try:
            _begin_snapshot_transaction(leader, self.snapshot_name, config.database_query_timeout_ms)
            snapshot_name = self.snapshot_name
            if snapshot_name is None:
                # No slot export: this transaction's snapshot is the one every reader shares.
                snapshot_name = leader.execute("SELECT pg_export_snapshot()").fetchone()[0]  # type: ignore[index]
                self.position_lsn = _lsn(leader.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])  # type: ignore[index]
            # Debezium names the snapshot transaction in source.txId; reading it assigns the transaction an id
            xid = leader.execute("SELECT txid_current()").fetchone()[0]  # type: ignore[index]
            database = leader.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
            _lock_tables(leader, tables, config.snapshot_lock_timeout_ms)
            summary.position_lsn = _lsn_str(self.position_lsn)
            # Debezium marks the first table's first row "first" and the last one's last row "last", in the order
            # of the tables (with several threads too: its threads coordinate to emit them so)
            emitter = SnapshotEmitter(config, self.producer, database, self.position_lsn, xid, table_order=[t.name for t in tables])
            self._progress(
                f"snapshot of {len(tables)} table(s) at LSN {summary.position_lsn} with {threads} reader(s): "
                + ", ".join(t.name for t in tables)
            )
            if threads > 1:
                # reader processes, each importing this snapshot (snapshot_workers: key ranges, markers kept)
                from walflow.snapshot_workers import ReaderSpec, SnapshotReaders

                spec = ReaderSpec(
                    config, self.conninfo, self.producer.settings, self.producer.partitions, snapshot_name, self.position_lsn, xid,
                    database, emitter.started_us, tuple(t.name for t in tables), config.walflow_kafka_flush_timeout_s,
                )
                coordinator = SnapshotEmitter(config, self.producer, database, self.position_lsn, xid)
                coordinator.started_us = emitter.started_us
                readers = SnapshotReaders(spec, threads, self._progress)
                rows = readers.run(tables, coordinator)
                self.producer.add_sent(readers.records, readers.bytes)
                summary.rows_per_table.update(rows)
                summary.rows = sum(rows.values())
            else:
                for table in tables:
                    try:
                        summary.rows_per_table[table.name] = self._read(leader, table, emitter)
                    except psycopg.errors.QueryCanceled:
                        raise SnapshotError(
                            f"reading table {table.name} for the snapshot was cancelled after "
                            f"database.query.timeout.ms={config.database_query_timeout_ms} (statement timeout, per "
                            "chunk of snapshot.fetch.size rows): raise the setting (0 turns it off) or lower "
                            "snapshot.fetch.size, then run the setup again"
                        ) from None
                emitter.finish()
                summary.rows = emitter.rows
        finally:
            leader.close()
        summary.seconds = round(time.monotonic() - started, 3)
        rate = summary.rows / summary.seconds if summary.seconds else 0.0
        self._progress(f"snapshot produced {summary.rows} row(s) of {len(tables)} table(s) in {summary.seconds:.1f} s ({rate:.0f} rows/s)")
        return summary

    def _read(self, conn: psycopg.Connection, table: SnapshotTable, emitter: SnapshotEmitter) -> int:
        started = time.monotonic()
        next_log = started + PROGRESS_EVERY_S
        count = 0

        def rows() -> Iterator[list[Any]]:
            nonlocal count, next_log
            fault = self._fault
            for row in read_chunks(conn, table, self.config.snapshot_fetch_size):
                count += 1
                if fault is not None:
                    fault("snapshot_row")
                yield row
                if count % 10000 == 0 and time.monotonic() >= next_log:
                    next_log = time.monotonic() + PROGRESS_EVERY_S
                    elapsed = time.monotonic() - started
                    self._progress(f"snapshot {table.name}: {count} row(s), {count / elapsed:.0f} rows/s")

        emitter.table_rows(table.schema, rows())
        self._progress(f"snapshot {table.name}: done, {count} row(s) in {time.monotonic() - started:.1f} s")
        return count


def _lsn(text: str) -> int:
    from walflow.pgoutput import str_to_lsn

    return str_to_lsn(text)


def _lsn_str(value: int | None) -> str | None:
    from walflow.pgoutput import lsn_to_str

    return lsn_to_str(value) if value is not None else None


def create_slot_with_snapshot(conninfo: str, slot: str) -> tuple[psycopg.Connection, int, str]:
    """Create the slot on a replication connection, exporting its snapshot.

    Returns the connection (keep it open and idle while readers import the snapshot), the slot's
    consistent point and the snapshot's name.
    """
    try:
        repl = psycopg.connect(conninfo, autocommit=True, replication="database")  # type: ignore[call-arg]
    except psycopg.OperationalError as exc:
        raise SnapshotError(f"cannot open a replication connection to create slot {slot!r}: {str(exc).strip()}") from None
    try:
        row = repl.execute(
            sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')").format(sql.Identifier(slot)),
            prepare=False,
        ).fetchone()
    except psycopg.Error as exc:
        repl.close()
        raise SnapshotError(f"cannot create replication slot {slot!r}: {str(exc).strip()}") from None
    assert row is not None
    _name, consistent_point, snapshot_name, _plugin = row
    return repl, _lsn(consistent_point), snapshot_name
