"""Reading one table of an incremental snapshot in chunks, in key order, as Debezium's incremental snapshots do.

Every query here may carry a signal's ``additional-condition``, text from whoever can write the signal table. It is
checked against the server's catalog first (:mod:`walflow.capture.conditions`: only the row's visible columns, no function
that can act), then evaluated as the reader role (``walflow.postgres.reader.conn.id``, a role that may only read
the captured tables) on a connection of its own, in a READ ONLY transaction under ``database.query.timeout.ms``,
with the extended protocol (one statement): it can neither change data nor run forever while the slot waits, nor
touch the session the stream works in (see :class:`ChunkReader`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from sys import getsizeof
from typing import Any, NamedTuple

import orjson
import psycopg
from psycopg import sql

from walflow.capture.conditions import check_on_server as check_condition_on_server
from walflow.capture.conditions import check_reader_role, describe_error, visible_columns
from walflow.capture.snapshot_tables import SnapshotTable, _columns_sql, condition_sql, key_types, sql_fragment
from walflow.config.connector import ConnectorConfig
from walflow.config.expressions import analyse_condition
from walflow.config.filters import Filters
from walflow.errors import ExpressionError
from walflow.records.events import Serializer, TableSchema
from walflow.records.transforms import ColumnRules
from walflow.source.catalog import Catalog
from walflow.source.connection import quote_table
from walflow.source.publication import list_tables
from walflow.source.queries import render
from walflow.source.signals import SignalError


@dataclass
class Chunk:
    """One selected chunk waiting for its high watermark."""

    id: str
    table: SnapshotTable
    rows: list[Sequence[Any]]  # the chunk's rows (text values), in the order they were read
    dedupe: list[Any]  # FieldSpecs whose values identify a row (the event key, or the surrogate key)
    #: the selection cursor before this chunk: (table, last_key, max_key, null_phase, last_ctid)
    cursor_before: tuple[str, list[str] | None, list[str] | None, bool, str | None]
    in_window: bool = False
    #: the identities (:func:`row_key`) of rows a streamed change inside the window made stale
    stale: set[bytes] = field(default_factory=set)
    #: no two rows can share an identity (it is the primary key): without stale rows, all rows are emitted as read
    unique: bool = False
    #: the rows' physical positions, for rows without a key value (no streamed change can name them)
    ctids: list[str] | None = None
    #: the transactions the SELECT's snapshot did not see as committed, as (32-bit ids in progress, the first id
    #: not yet completed): one of them can commit between the snapshot and the low watermark, or have written its
    #: commit before the low watermark and still be invisible to the SELECT (its commit waits for the WAL flush or a
    #: synchronous standby before it shows), so its changes make rows stale even though they are streamed before the
    #: window opens
    unseen: tuple[frozenset[int], int] | None = None
    #: read-only windows (no watermark): the WAL position at which the rows are emitted, the first commit at or after
    #: the end of the WAL when the SELECT's snapshot was taken (:attr:`ChunkRead.wal_end`)
    close_at: int | None = None
    #: the identities of the chunk's rows, computed when a streamed change first concerns its table
    _identities: frozenset[bytes] | None = field(default=None, repr=False)

    def identities(self) -> frozenset[bytes]:
        """The identities (:func:`row_key`) of the chunk's rows: a streamed change is recorded as making a row stale
        only when it names one of them, so :attr:`stale` holds at most a chunk's rows however many rows a
        transaction committed inside the window changes."""
        if self._identities is None:
            self._identities = frozenset(row_key(row, self.dedupe) for row in self.rows)
        return self._identities

    @property
    def watched(self) -> bool:
        """Whether a streamed change of the chunk's table can make one of its rows stale now."""
        return self.in_window or self.unseen is not None

    def stale_by(self, xid: int | None) -> bool:
        """Whether a change of transaction ``xid`` streamed now makes the chunk's rows with its keys stale."""
        if self.in_window:
            return True
        if self.unseen is None or xid is None:
            return False
        in_progress, xmax = self.unseen
        # xid >= xmax in PostgreSQL's circular order of 32-bit ids
        return xid in in_progress or ((xid - xmax) & 0xFFFFFFFF) < 0x80000000

    def current(self) -> tuple[list[Sequence[Any]], int]:
        """The rows to emit when the window closes, and how many were dropped as stale.

        Identities are computed only when they can matter (a change inside the window, or a key that is not the
        primary key, where rows of one identity collapse to the last one as Debezium's buffer does): for most
        chunks no change touched the table in between, and the rows go out as they were read.
        """
        if self.ctids is not None:
            latest = dict(zip(self.ctids, self.rows))
            return list(latest.values()), 0
        if self.unique and not self.stale:
            return self.rows, 0
        latest = {row_key(row, self.dedupe): row for row in self.rows}
        dropped = sum(1 for key in self.stale if latest.pop(key, None) is not None)
        return list(latest.values()), dropped


def rows_size(rows: Sequence[Sequence[Any]]) -> int:
    """About how many bytes ``rows`` (text values) take in memory, from 32 rows spread over them: a round's
    selection is bounded by it, as wide rows would make a round of many rows large. (Measuring every value would
    cost about a twentieth of a whole incremental snapshot's time; a sample a few microseconds a chunk.)"""
    if not rows:
        return 0
    sample = rows[:: max(1, len(rows) // 32)]
    return len(rows) * sum(getsizeof(row) + sum(getsizeof(v) for v in row) for row in sample) // len(sample)


#: the end of the WAL, read after the statement's snapshot: replayed WAL on a hot standby, inserted WAL on a primary
#: (a transaction is visible only once its commit record is in the WAL), as an integer LSN
_WAL_END_AFTER_SNAPSHOT = (
    "((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END) - '0/0')::int8"
)


class ChunkRead(NamedTuple):
    """What :meth:`ChunkReader.read_chunk` read: the rows (text values), whether the table is done, the rows' ctids
    in the NULL-key phase (else ``None``), and the transactions the SELECT's snapshot did not see."""

    rows: list[Sequence[Any]]
    table_done: bool
    ctids: list[str] | None
    unseen: tuple[frozenset[int], int]
    #: read-only windows: the end of the WAL when the SELECT's snapshot was taken (every transaction it sees
    #: committed before it), where the chunk's rows take their place in the stream
    wal_end: int | None = None


@dataclass
class SnapshotProgress:
    """The persisted state of the running incremental snapshot, and the signals queued behind it."""

    signal_id: str
    tables: list[str]  # still to do, the current one first
    condition: dict[str, str] = field(default_factory=dict)  # data collection -> additional condition
    surrogate_key: str | None = None
    last_key: list[str] | None = None
    max_key: list[str] | None = None
    null_phase: bool = False  # reading rows whose surrogate key is NULL, by ctid
    last_ctid: str | None = None
    paused: bool = False
    rows: int = 0
    chunks: int = 0
    rows_per_table: dict[str, int] = field(default_factory=dict)
    #: later execute-snapshot signals, in arrival order: {"signal_id", "tables", "condition", "surrogate_key"}
    queued: list[dict[str, Any]] = field(default_factory=list)
    #: set when the signal was stopped or failed: its outcome is recorded, it must not be resumed or completed
    ended: bool = False
    #: the stop-snapshot signal that dropped some of its tables: it ends "stopped", not "completed"
    stopped_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def dedupe_fields(table: SnapshotTable, surrogate: str | None) -> list[Any]:
    """The fields that tell a chunk's rows apart: the surrogate key when the signal names one, else the event key."""
    if surrogate:
        return [f for f in table.schema.fields if f.index == table.schema.column_names.index(surrogate)]
    return list(table.schema.key_fields)


def row_key(row: Sequence[Any], fields: list[Any]) -> bytes:
    """The identity of a snapshot row, in the converted form streamed events are compared in."""
    return orjson.dumps([None if row[f.index] is None else f.converter.convert(row[f.index]) for f in fields])


class ChunkReader:
    """Plans the tables of a signal and reads their chunks on the stream's catalog connection (autocommit: the
    stream connection holds its peek's transaction open)."""

    def __init__(
        self,
        config: ConnectorConfig,
        conn: psycopg.Connection,
        filters: Filters,
        serializer: Serializer,
        rules: ColumnRules,
        reader: Callable[[], psycopg.Connection] | None = None,
    ) -> None:
        self.config = config
        self.conn = conn
        self.filters = filters
        self.serializer = serializer
        self.rules = rules
        self._open_reader = reader
        self._reader: psycopg.Connection | None = None

    @property
    def reader(self) -> psycopg.Connection:
        """The connection chunks are selected on: the reader role's (``walflow.postgres.reader.conn.id``), opened
        on first use, so that a signal's condition never runs as the connector's role nor on a connection whose
        session the stream relies on; the connector's own catalog connection when no reader is configured (then
        signals with a condition are refused, :meth:`plan`)."""
        if self._open_reader is None:
            return self.conn
        if self._reader is None or self._reader.closed:
            self._reader = self._open_reader()
        return self._reader

    def close(self) -> None:
        """Close the reader role's connection, if one was opened."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def check(self, name: str, oid: int, condition: str | None, surrogate: str | None) -> None:
        """Try a signal's condition and surrogate key on one table before accepting the signal.

        :meth:`plan` checks the condition against the catalog (its columns, the functions it names, the role that
        evaluates it); then ``LIMIT 0`` makes the server parse and plan the same WHERE and ORDER BY the chunks use
        (unknown columns, syntax and type errors, unorderable keys) without reading a row. Errors that depend on the
        data can only show while reading; :meth:`walflow.capture.incremental.IncrementalSnapshots.prepare` fails the signal
        then. A table without a primary key and no ``surrogate-key`` has no order to read it in: Debezium skips it
        with a warning, but a snapshot run that then reports success without having read the table misleads whoever
        asked for it, so the signal fails.
        """
        if not surrogate:
            info = Catalog(self.conn).table(oid)
            if info is not None and not info.primary_key:
                raise SignalError(
                    f"table {name} has no primary key, so its rows have no order to read them in chunks by: send a "
                    "'surrogate-key' naming a column to order by, or leave the table out of 'data-collections'"
                )
        if not (condition or surrogate):
            return
        table = self.plan(name, condition, surrogate, oid)
        if table is None:
            return
        source = quote_table(table.catalog.schema, table.catalog.name)
        # the condition alone first, then with the key's ORDER BY, so an error is blamed on what caused it
        checks: list[tuple[str, sql.Composable, sql.Composable]] = []
        if condition:
            checks.append((f"'additional-condition' {condition!r}", sql.SQL(" WHERE {}").format(condition_sql(condition)), sql.SQL("")))
        if surrogate and table.key:
            order = sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key))
            checks.append((f"'surrogate-key' {surrogate!r}", sql.SQL(""), order))
        reader = self.reader
        for what, where, order in checks:
            try:
                with self.reading(reader):
                    self.query(reader, sql.SQL("SELECT 1 FROM {} AS walflow_t{}{} LIMIT 0").format(source, where, order), [])
            except psycopg.Error as exc:
                if reader.closed or reader.broken:
                    raise
                raise SignalError(f"{what} does not work on {name}: {self.describe(exc)}; send the signal again with a valid one") from None

    @contextmanager
    def reading(self, conn: psycopg.Connection) -> Iterator[None]:
        """A READ ONLY transaction under ``database.query.timeout.ms``: every query that carries a signal's condition
        runs in one (a chunk's SELECT in the window :meth:`read_chunk` opens), so no expression it calls can change
        data, and none can run forever while the slot waits."""
        with conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            limit = self._timeout_sql()
            if limit is not None:
                conn.execute(limit)
            yield

    def _timeout_sql(self) -> sql.Composed | None:
        """``SET LOCAL statement_timeout`` to ``database.query.timeout.ms`` (None when it is 0: no limit)."""
        timeout = self.config.database_query_timeout_ms
        return sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(f"{timeout}ms")) if timeout else None

    @staticmethod
    def query(conn: psycopg.Connection, query: sql.Composable | bytes, params: list[Any]) -> psycopg.Cursor[Any]:
        """Run a query that carries a user's condition with the extended protocol (prepared), which refuses more than
        one statement whatever the text holds; the simple protocol, which psycopg uses for a query without
        parameters, would run them all."""
        return conn.execute(query, params, prepare=True)

    def describe(self, exc: BaseException) -> str:
        """A server error for the state table and the log: a statement timeout says which setting it hit; an error
        that may quote a row's values is told by its SQLSTATE alone (:func:`walflow.capture.conditions.describe_error`)."""
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return (
                f"the query was cancelled after database.query.timeout.ms={self.config.database_query_timeout_ms} "
                "(statement timeout): narrow or index the condition, or raise the setting"
            )
        return describe_error(exc)

    def plan(self, name: str, condition: str | None, surrogate: str | None, oid: int | None = None) -> SnapshotTable | None:
        """The plan of one table of a signal; with a condition, checked against the server first
        (:func:`check_condition_on_server`)."""
        if oid is None:
            # names like "My.Schema.Odd Table" are ambiguous to split; find the table among the captured ones
            oid = next((o for sch, tab, o, *_ in list_tables(self.conn, self.filters) if f"{sch}.{tab}" == name), None)
        if oid is None:
            return None
        info = Catalog(self.conn).table(oid)
        if info is None:
            return None
        if surrogate and surrogate not in info.columns:
            raise SignalError(f"'surrogate-key' {surrogate!r} is not a column of {name} (its columns: {', '.join(info.columns)})")
        key = [surrogate] if surrogate else list(info.primary_key)
        events = TableSchema.from_catalog(self.config, self.filters, self.serializer, info, self.rules)
        if surrogate and not (surrogate in events.column_names and any(f.index == events.column_names.index(surrogate) for f in events.fields)):
            # the rows' identities (stale rows, rows of one key in a chunk) are read from the events' columns
            raise SignalError(
                f"'surrogate-key' {surrogate!r} of {name} is not a column of its events (column.include.list or "
                "column.exclude.list leaves it out, or walflow does not capture its type); send the signal again "
                "with a column the events carry"
            )
        if condition:
            self._check_condition(name, condition, info, events)
        return SnapshotTable(events, info, key, key_types(info, key), condition=condition)

    def _check_condition(self, name: str, condition: str, info: Any, events: TableSchema) -> None:
        """Refuse a condition that cannot be evaluated safely (:mod:`walflow.capture.conditions`): no reader role configured,
        a reader role that can do more than read, a column the events do not carry as it is, a function that can act."""
        if self._open_reader is None:
            raise SignalError(
                f"'additional-condition' {condition!r} cannot be evaluated: connector {self.config.name} has no "
                "'walflow.postgres.reader.conn.id', the Connection of the role that evaluates conditions (a role "
                "that may only read the captured tables; include/sql/roles.sql creates one with -v reader=...). "
                "Set it, or send the signal without a condition"
            )
        columns = visible_columns(info, events, self.rules)
        reader = self.reader
        if reader.info.dbname != self.conn.info.dbname:
            raise SignalError(
                f"'walflow.postgres.reader.conn.id' of connector {self.config.name} connects to database "
                f"{reader.info.dbname!r}, the connector to {self.conn.info.dbname!r}: give the reader's Connection the "
                "connector's database"
            )
        try:
            check_reader_role(reader, info.oid, name)
            check_condition_on_server(reader, analyse_condition(condition), name, columns)
        except ExpressionError as exc:
            raise SignalError(f"'additional-condition' {condition!r} {exc}") from None
        except psycopg.Error as exc:
            if reader.closed or reader.broken:
                raise
            raise SignalError(f"'additional-condition' {condition!r} could not be checked on {name}: {self.describe(exc)}") from None
        finally:
            if not (reader.closed or reader.broken) and reader.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                reader.rollback()

    def max_key(self, table: SnapshotTable) -> list[str] | None:
        keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier("walflow_t", k)) for k in table.key)
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier("walflow_t", k)) for k in table.key)
        not_null = sql.SQL(" AND ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier("walflow_t", k)) for k in table.key)
        where = [not_null]
        if table.condition:
            where.append(condition_sql(table.condition))
        reader = self.reader
        with self.reading(reader):
            row = self.query(
                reader,
                sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT 1").format(
                    keys, quote_table(table.catalog.schema, table.catalog.name), sql.SQL(" AND ").join(where), order
                ),
                [],
            ).fetchone()
        return list(row) if row else None

    def read_chunk(
        self,
        table: SnapshotTable,
        progress: SnapshotProgress,
        prefix: str,
        low: str,
        high: str,
        inside: Callable[[list[Sequence[Any]]], None] | None = None,
        read_only: bool = False,
    ) -> ChunkRead:
        """Select the next chunk of ``table`` inside its watermark window and advance the cursor.

        The chunk's SELECT runs on the reader connection (:attr:`reader`) in a REPEATABLE READ, READ ONLY
        transaction whose first statement takes the snapshot the SELECT reads and returns the transactions that
        snapshot does not see (:attr:`Chunk.unseen`). After it commits, the connector's connection writes the low
        watermark and then the high one.

        The low watermark is a non-transactional logical decoding message (``pg_logical_emit_message(false, ...)``):
        it takes its place in the stream as soon as it is written. The snapshot is taken before it; a transaction
        that commits in between is one the snapshot does not see, and its changes make rows stale wherever they are
        streamed (:meth:`Chunk.stale_by`), as do those of a transaction that wrote its commit before the low
        watermark but was still invisible (waiting for its WAL flush or a synchronous standby) when the snapshot
        was taken. A transaction the snapshot sees committed before it, so its changes are streamed before the low
        watermark and the rows hold their result. The high watermark is a transactional message in a transaction of
        its own: the chunk's rows take its position (``source.sequence``: the end of the last commit before it, then
        its LSN), and a change streamed after it must sort after them, which a message outside any transaction,
        sharing the previous commit with the changes that follow it, would not guarantee. Its commit does not wait
        for the WAL flush (:meth:`walflow.capture.incremental.IncrementalSnapshots.prepare` flushes once per round).

        Each connection's statements go to the server as one pipeline: one round trip per chunk when the reader is
        the connector's own connection, two with a reader role. The server runs a pipeline's statements in order
        and skips the rest after an error, so no watermark is written for a chunk that was not read. (Measured on
        loopback, selecting the 977 chunks of a 1M-row table: 0.95-0.98 s in one round trip each against 1.25-1.30 s
        in three; farther from the database, each round trip saved is a network latency per chunk.) Every statement
        uses the extended protocol, which runs one statement per query whatever the text holds, so the signal's
        condition in the SELECT can neither change data (READ ONLY) nor add statements.

        :param inside: a test seam, called with the rows once the low watermark is written and before the high one
            (the window is open while it runs).
        :param read_only: write no watermark (``read.only``, a standby): the same statement that returns the unseen
            transactions returns the end of the WAL (:attr:`ChunkRead.wal_end`: replayed WAL on a standby, inserted WAL
            on a primary), evaluated after the snapshot was taken. Every transaction the snapshot sees committed
            before that position, and every one it does not see makes rows stale wherever it is streamed, so the rows
            may take their place at the first commit after it.
        """
        query, params = self._chunk_query(table, progress)
        conn, reader = self.conn, self.reader
        limit = self._timeout_sql()
        # the high watermark goes with the low one unless the test seam runs between them
        closing = high if inside is None else None
        try:
            with reader.pipeline() as pipeline:
                try:
                    reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    if limit is not None:
                        reader.execute(limit)
                    opened = reader.execute(
                        "SELECT pg_snapshot_xmax(s)::text::bigint, ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x), "
                        + (_WAL_END_AFTER_SNAPSHOT if read_only else "NULL::int8")
                        + " FROM pg_current_snapshot() AS s"
                    )
                    selected = self.query(reader, query, params)
                    reader.execute("COMMIT")
                    if reader is conn and not read_only:
                        self._watermarks(conn, prefix, low, closing)
                    pipeline.sync()
                    xmax, xip, wal_end = opened.fetchone()  # type: ignore[misc]
                    rows = selected.fetchall()
                except psycopg.Error:
                    # The server's first error is the one raised (it may show while later statements are queued).
                    # A Sync ends the pipeline's aborted state first: without it psycopg, leaving the pipeline,
                    # logs a second, misleading "pipeline aborted" warning beside the real cause.
                    with suppress(psycopg.Error):
                        pipeline.sync()
                    raise
            if reader is not conn and not read_only:
                with conn.pipeline():
                    self._watermarks(conn, prefix, low, closing)
            if inside is not None:
                inside([r[:-1] for r in rows] if progress.null_phase else rows)  # without the ctid column
                if not read_only:
                    with conn.pipeline():
                        self._watermarks(conn, prefix, None, high)
        except BaseException:
            for used in {id(c): c for c in (reader, conn)}.values():
                if not (used.closed or used.broken) and used.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    used.execute("ROLLBACK")
            raise
        unseen = (frozenset(int(x) & 0xFFFFFFFF for x in xip), int(xmax) & 0xFFFFFFFF)
        read = self._advance(table, progress, rows, unseen)
        return read._replace(wal_end=int(wal_end)) if wal_end is not None else read

    @staticmethod
    def _watermarks(conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        """Queue the low watermark (outside any transaction) and the high one (in a transaction of its own)."""
        if low is not None:
            conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (prefix, low))
        if high is not None:
            conn.execute("BEGIN")
            conn.execute("SET LOCAL synchronous_commit TO off")
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (prefix, high))
            conn.execute("COMMIT")

    def _chunk_query(self, table: SnapshotTable, progress: SnapshotProgress) -> tuple[bytes, list[Any]]:
        """The SELECT of the next chunk after the cursor, and its parameters: by key up to the maximum key, or, in
        the NULL-key phase, by physical position (with the ctid as the last column).

        The text depends only on the plan, the phase and whether there is a lower bound yet, so it is composed once
        per plan (quoting every identifier again for each chunk cost a tenth of a millisecond per chunk)."""
        params: list[Any] = []
        if progress.null_phase:
            if progress.last_ctid:
                params.append(progress.last_ctid)
        else:
            if progress.last_key is not None:
                params.extend(progress.last_key)
            params.extend(progress.max_key or [])
        kind = (progress.null_phase, bool(progress.last_ctid) if progress.null_phase else progress.last_key is not None)
        query = table.queries.get(kind)
        if query is None:
            query = table.queries[kind] = render(self._compose_chunk_query(table, *kind), self.conn)
        return query, params

    def _compose_chunk_query(self, table: SnapshotTable, null_phase: bool, lower: bool) -> sql.Composed:
        size = self.config.incremental_snapshot_chunk_size
        cols = _columns_sql(table)
        ident = quote_table(table.catalog.schema, table.catalog.name)
        where: list[sql.Composable] = []
        if table.condition:
            where.append(condition_sql(table.condition))
        if null_phase:
            # rows whose surrogate key is NULL cannot be paged by key: page them by physical position
            where.append(sql.SQL("{} IS NULL").format(sql.Identifier("walflow_t", table.key[0])))
            if lower:
                where.append(sql.SQL("walflow_t.ctid > %s::tid"))
            return sql.SQL("SELECT {}, walflow_t.ctid::text FROM {} AS walflow_t WHERE {} ORDER BY walflow_t.ctid LIMIT {}").format(
                cols, ident, sql.SQL(" AND ").join(where), sql.Literal(size)
            )
        keys = sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key)
        holders = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql_fragment(t)) for t in table.key_types)
        if lower:
            where.append(sql.SQL("({}) > ({})").format(keys, holders))
        where.append(sql.SQL("({}) <= ({})").format(keys, holders))
        return sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT {}").format(
            cols, ident, sql.SQL(" AND ").join(where), keys, sql.Literal(size)
        )

    def _advance(
        self, table: SnapshotTable, progress: SnapshotProgress, rows: list[Sequence[Any]], unseen: tuple[frozenset[int], int]
    ) -> ChunkRead:
        """Move the cursor past a chunk's rows and say whether the table is done."""
        size = self.config.incremental_snapshot_chunk_size
        if progress.null_phase:
            if rows:
                progress.last_ctid = rows[-1][-1]
            return ChunkRead([r[:-1] for r in rows], len(rows) < size, [r[-1] for r in rows], unseen)
        if rows:
            index = [table.schema.column_names.index(k) for k in table.key]
            progress.last_key = [rows[-1][i] for i in index]
        if len(rows) < size:
            if progress.surrogate_key:
                progress.null_phase, progress.last_ctid = True, None
                return ChunkRead(rows, False, None, unseen)
            return ChunkRead(rows, True, None, unseen)
        return ChunkRead(rows, False, None, unseen)
