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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson
import psycopg
from psycopg import sql

from walflow.catalog import Catalog, CatalogTable
from walflow.config import ConnectorConfig
from walflow.envelope import EventFormat
from walflow.errors import RecordTooLargeError, SourceError
from walflow.events import Filters, Serializer, TableSchema
from walflow.kafka import ENCODE_RUN, EventProducer, too_large
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


class SnapshotEmitter:
    """Turns snapshot rows into ``r`` events and sends them; holds each table's last event back.

    ``source.snapshot`` follows Debezium: ``last`` for the snapshot's very last row, ``first`` for the first row of
    the first table, then ``last_in_data_collection`` and
    ``first_in_data_collection`` for each table's last and first rows, ``true`` otherwise. Holding one event per
    table back until the end lets the very last one become ``last`` whichever table it is from.

    :param table_order: the data collections in the order of the snapshot (Debezium's order).
    """

    def __init__(
        self,
        config: ConnectorConfig,
        producer: EventProducer,
        database: str,
        position_lsn: int | None,
        xid: int | None,
        marker_kind: str = "initial",
        table_order: list[str] | None = None,
    ) -> None:
        self.config = config
        self.producer = producer
        self.database = database
        self.position_lsn = position_lsn
        self.xid = xid
        self.fmt = EventFormat(config)
        self.started_us = time.time_ns() // 1000
        self.kind = marker_kind  # "initial" or "incremental"
        self.table_order = table_order or []
        self.first_table = self.table_order[0] if self.table_order else None
        self._ser = Serializer(config.key_converter_schemas_enable, config.value_converter_schemas_enable)
        #: held last rows: (key, table, after, whether it is also the first row of the first table)
        self._held: list[tuple[bytes | None, TableSchema, dict[str, Any], bool]] = []
        self.rows = 0

    def source(self, table: TableSchema, marker: str) -> dict[str, Any]:
        lsn = self.position_lsn
        return self.fmt.source(
            self.config.topic_prefix, self.database, table.schema, table.table, ts_us=self.started_us, snapshot=marker,
            sequence=f'[null,"{lsn}"]' if lsn is not None else None, tx_id=self.xid, lsn=lsn,
        )  # fmt: skip

    def encoder(self, table: TableSchema, marker: str, middle: bytes | None = None) -> Callable[..., tuple[bytes | None, bytes]]:
        """``encode(values, middle=None)``: a row's key and record value, the value assembled from pre-serialised
        parts (schema, source block with ``marker`` or the given ``middle``, or the one passed to ``encode``) around
        the row's JSON: snapshots are the hottest path walflow has. The row goes straight to JSON where the table
        allows it (:attr:`TableSchema.json_row`), else through its dict; the event row itself, which a caller needs
        only for a row it holds back or reports, is ``table.row(values)``.

        :raises ConversionError: for a value its column's converter refuses (naming the column and the value).
        """
        ser = self._ser
        fmt = self.fmt
        key_prefix = table.key_schema_json
        key_schemas = ser.key_schemas
        has_key = table.has_key
        key_names = [f.name for f in table.key_fields]
        key_only = bool(table.key_only)
        json_row = table.json_row
        row = table.row
        dumps = orjson.dumps
        join = b"".join
        head = b'{"before":null,"after":'
        tail = fmt.processing_tail()
        if ser.value_schemas:
            head, tail = table.value_schema_json + head, tail + b"}"
        regular = middle if middle is not None else self.middle(table, marker)
        ts = fmt.processing_time()
        count = 0

        def encode_json(values: Sequence[Any], middle: bytes | None = None) -> tuple[bytes | None, bytes]:
            nonlocal count, ts
            try:
                row_json, key_json = json_row(values)  # type: ignore[misc]
            except (ValueError, ArithmeticError):
                row(values)  # raises the ConversionError that names the column and its value
                raise
            count += 1
            if count & 0x1FFF == 0:
                ts = fmt.processing_time()
            key = (join((key_prefix, key_json, b"}")) if key_schemas else key_json) if has_key else None
            return key, join((head, row_json, regular if middle is None else middle, ts, tail))

        def encode(values: Sequence[Any], middle: bytes | None = None) -> tuple[bytes | None, bytes]:
            nonlocal count, ts
            after = row(values)
            if has_key:
                key = ser.key(key_prefix, {k: after[k] for k in key_names} if not key_only else table.key(after, values))
            else:
                key = None
            count += 1
            if count & 0x1FFF == 0:
                ts = fmt.processing_time()
            return key, join((head, dumps(after), regular if middle is None else middle, ts, tail))

        return encode if json_row is None else encode_json

    def middle(self, table: TableSchema, marker: str) -> bytes:
        """The serialised part of a value from its source block (with ``marker``) to its processing time."""
        source_key, after_source = self.fmt.envelope_parts("r")
        return source_key + orjson.dumps(self.source(table, marker)) + after_source

    def table_rows(self, table: TableSchema, rows: Iterator[list[Any]]) -> int:
        """Emit every row of one table; return how many.

        The table's last row is held back for its ``last``/``last_in_data_collection`` marker (an incremental
        snapshot's is sent as it is).
        """
        incremental = self.kind == "incremental"
        is_first_table = not incremental and table.data_collection == self.first_table
        first = None if incremental else self.middle(table, "first" if is_first_table else "first_in_data_collection")
        encode = self.encoder(table, "incremental" if incremental else "true")
        count, _, last = self.send_rows(table, rows, encode, first_middle=first)
        if last is not None:
            key, value, values = last
            if incremental:
                try:
                    self.producer.send(table.topic, key, value, self.fmt.context_headers or None)
                except RecordTooLargeError as exc:
                    raise self._too_large(exc, table, table.row(values)) from None
            else:
                self._held.append((key, table, table.row(values), is_first_table and count == 1))
        self.rows += count
        return count

    def send_rows(
        self,
        table: TableSchema,
        rows: Iterable[Sequence[Any]],
        encode: Callable[..., tuple[bytes | None, bytes]],
        first_middle: bytes | None = None,
        hold_first: bool = False,
    ) -> tuple[int, tuple[bytes | None, Sequence[Any]] | None, tuple[bytes | None, bytes, Sequence[Any]] | None]:
        """Encode and queue ``rows`` but the last (and the first, with ``hold_first``), :data:`ENCODE_RUN` rows at
        a time as :meth:`EventProducer.send_all` does; return the count, the first row's key and values when held,
        and the last row's key, record value and values, which the caller holds back for its marker or sends.

        ``first_middle``: the source block of the first row's record, when its marker differs from the rest's.
        :raises RecordTooLargeError: naming the row Kafka refused (the rows before it are queued).
        """
        send_records = self.producer.send_records
        headers = self.fmt.context_headers or None
        topic = table.topic
        count = 0
        first: tuple[bytes | None, Sequence[Any]] | None = None
        last: tuple[bytes | None, bytes, Sequence[Any]] | None = None
        rows = iter(rows)
        while block := list(islice(rows, ENCODE_RUN)):
            starting = count == 0
            count += len(block)
            if starting and first_middle is not None:
                records = [encode(block[0], first_middle), *[encode(values) for values in islice(block, 1, None)]]
            else:
                records = [encode(values) for values in block]
            if starting and hold_first:
                first = (records[0][0], block[0])
                del records[0], block[0]
            if last is not None:  # the previous run's last row: not the table's last after all
                records.insert(0, last[:2])
                block.insert(0, last[2])
            if not records:
                continue
            key, value = records.pop()
            last = (key, value, block.pop())
            queued = self.producer.sent
            try:
                send_records(topic, records, headers)
            except RecordTooLargeError as exc:
                raise self._too_large(exc, table, table.row(block[self.producer.sent - queued])) from None
        return count, first, last

    def finish(self) -> None:
        """Send the held last events (the tables were read in order): the final one is the snapshot's ``last``."""
        for i, (key, table, after, only_row_of_first_table) in enumerate(self._held):
            if i == len(self._held) - 1:
                marker = "last"
            else:
                marker = "first" if only_row_of_first_table else "last_in_data_collection"
            self.send_marked(table, key, after, marker)
        self._held.clear()

    def send_marked(self, table: TableSchema, key: bytes | None, after: dict[str, Any], marker: str) -> None:
        """Send one row held back for its ``source.snapshot`` marker."""
        payload = self.fmt.envelope(None, after, self.source(table, marker), "r", None)
        try:
            self.producer.send(table.topic, key, self._ser.value(table.value_schema_json, payload), self.fmt.context_headers or None)
        except RecordTooLargeError as exc:
            raise self._too_large(exc, table, after) from None

    def _too_large(self, exc: RecordTooLargeError, table: TableSchema, row: dict[str, Any] | None) -> RecordTooLargeError:
        key = {f.name: row.get(f.name) for f in table.key_fields} if (row is not None and table.has_key) else None
        return too_large(
            exc, table=table.data_collection, key=key, lsn=self.position_lsn, row=row,
            what="The snapshot stopped before producing it and is taken again from the start by the next setup run",
        )


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
    placeholders = sql.SQL(", ").join(sql.SQL("%s::" + t) for t in table.key_types)  # type: ignore[arg-type]
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
