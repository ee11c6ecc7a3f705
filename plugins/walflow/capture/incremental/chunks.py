"""Reading one table of an incremental snapshot in chunks, in key order, as Debezium's incremental snapshots do.

Every query here may carry a signal's ``additional-condition``, text from whoever can write the signal table. It is
checked against the server's catalog first (:mod:`walflow.capture.incremental.conditions`: only the row's visible
columns, no function that can act), then evaluated as the reader role (``walflow.postgres.reader.conn.id``, a role
that may only read the captured tables) on a connection of its own, in a READ ONLY transaction under
``database.query.timeout.ms``, with the extended protocol (one statement): it can neither change data nor run forever
while the slot waits, nor touch the session the stream works in (see :class:`ChunkReader`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.incremental.conditions import check_on_server as check_condition_on_server
from walflow.capture.incremental.conditions import check_reader_role, describe_error, visible_columns
from walflow.capture.incremental.marks import WindowMarks
from walflow.capture.incremental.progress import ChunkRead, SnapshotProgress
from walflow.capture.snapshot_tables import SnapshotTable, _columns_sql, condition_sql, key_types, sql_fragment
from walflow.config.connector import ConnectorConfig
from walflow.config.expressions import analyse_condition
from walflow.config.filters import Filters
from walflow.errors import ExpressionError
from walflow.records.column_rules import ColumnRules
from walflow.records.events import Serializer, TableSchema
from walflow.source.catalog import Catalog
from walflow.source.connection import quote_table
from walflow.source.publication import list_tables
from walflow.source.queries import render
from walflow.source.signals import SignalError


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
        data can only show while reading; :meth:`walflow.capture.incremental.selection.ChunkSelection.prepare` fails the
        signal then. A table without a primary key and no ``surrogate-key`` has no order to read it in: Debezium skips
        it with a warning, but a snapshot run that then reports success without having read the table misleads whoever
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
        checks: list[tuple[str, sql.Composed | sql.SQL, sql.Composed | sql.SQL]] = []
        if condition:
            checks.append(
                (
                    f"'additional-condition' {condition!r}",
                    sql.SQL(" WHERE {}").format(condition_sql(condition)),
                    sql.SQL(""),
                )
            )
        if surrogate and table.key:
            by_key = sql.SQL(" ORDER BY {}").format(
                sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key)
            )
            checks.append((f"'surrogate-key' {surrogate!r}", sql.SQL(""), by_key))
        reader = self.reader
        for what, where, order in checks:
            try:
                with self.reading(reader):
                    self.query(
                        reader, sql.SQL("SELECT 1 FROM {} AS walflow_t{}{} LIMIT 0").format(source, where, order), []
                    )
            except psycopg.Error as exc:
                if reader.closed or reader.broken:
                    raise
                raise SignalError(
                    f"{what} does not work on {name}: {self.describe(exc)}; send the signal again with a valid one"
                ) from None

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
    def query(conn: psycopg.Connection, query: sql.Composed | bytes, params: list[Any]) -> psycopg.Cursor[Any]:
        """Run a query that carries a user's condition with the extended protocol (prepared), which refuses more than
        one statement whatever the text holds; the simple protocol, which psycopg uses for a query without
        parameters, would run them all."""
        return conn.execute(query, params, prepare=True)

    def describe(self, exc: BaseException) -> str:
        """A server error for the state table and the log: a statement timeout says which setting it hit; an error
        that may quote a row's values is told by its SQLSTATE alone
        (:func:`walflow.capture.incremental.conditions.describe_error`)."""
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return (
                f"the query was cancelled after database.query.timeout.ms={self.config.database_query_timeout_ms} "
                "(statement timeout): narrow or index the condition, or raise the setting"
            )
        return describe_error(exc)

    def plan(
        self, name: str, condition: str | None, surrogate: str | None, oid: int | None = None
    ) -> SnapshotTable | None:
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
            raise SignalError(
                f"'surrogate-key' {surrogate!r} is not a column of {name} (its columns: {', '.join(info.columns)})"
            )
        key = [surrogate] if surrogate else list(info.primary_key)
        events = TableSchema.from_catalog(self.config, self.filters, self.serializer, info, self.rules)
        if surrogate and not (
            surrogate in events.column_names
            and any(f.index == events.column_names.index(surrogate) for f in events.fields)
        ):
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
        """Refuse a condition that cannot be evaluated safely (:mod:`walflow.capture.incremental.conditions`): no
        reader role
        configured, a reader role that can do more than read, a column the events do not carry as it is, a function
        that can act."""
        if self._open_reader is None:
            raise SignalError(
                f"'additional-condition' {condition!r} cannot be evaluated: connector {self.config.name} has no "
                "'walflow.postgres.reader.conn.id', the Connection of the role that evaluates conditions (a role "
                "that may only read the captured tables; walflow's roles.sql creates one with -v reader=...). "
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
            raise SignalError(
                f"'additional-condition' {condition!r} could not be checked on {name}: {self.describe(exc)}"
            ) from None
        finally:
            if (
                not (reader.closed or reader.broken)
                and reader.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            ):
                reader.rollback()

    def max_key(self, table: SnapshotTable) -> list[str] | None:
        keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier("walflow_t", k)) for k in table.key)
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier("walflow_t", k)) for k in table.key)
        not_null = sql.SQL(" AND ").join(
            sql.SQL("{} IS NOT NULL").format(sql.Identifier("walflow_t", k)) for k in table.key
        )
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
        marks: WindowMarks,
        inside: Callable[[list[Sequence[Any]]], None] | None = None,
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
        for the WAL flush (:meth:`walflow.capture.incremental.selection.ChunkSelection.prepare` flushes once per round).

        Each connection's statements go to the server as one pipeline: one round trip per chunk when the reader is
        the connector's own connection, two with a reader role. The server runs a pipeline's statements in order
        and skips the rest after an error, so no watermark is written for a chunk that was not read. (Measured on
        loopback, selecting the 977 chunks of a 1M-row table: 0.95-0.98 s in one round trip each against 1.25-1.30 s
        in three; farther from the database, each round trip saved is a network latency per chunk.) Every statement
        uses the extended protocol, which runs one statement per query whatever the text holds, so the signal's
        condition in the SELECT can neither change data (READ ONLY) nor add statements.

        :param inside: a test seam, called with the rows once the low watermark is written and before the high one
            (the window is open while it runs).
        :param marks: how the window is marked (:mod:`walflow.capture.incremental.marks`). Read-only windows write no
            watermark (``read.only``, a standby): the same statement that returns the unseen
            transactions returns the end of the WAL (:attr:`ChunkRead.wal_end`: replayed WAL on a standby, inserted WAL
            on a primary), evaluated after the snapshot was taken. Every transaction the snapshot sees committed
            before that position, and every one it does not see makes rows stale wherever it is streamed, so the rows
            may take their place at the first commit after it.
        """
        query, params = self._chunk_query(table, progress)
        conn, reader = self.conn, self.reader
        # the high watermark goes with the low one unless the test seam runs between them
        closing = high if inside is None else None
        try:
            xmax, xip, wal_end, rows = self._select(query, params, prefix, low, closing, marks)
            if reader is not conn:
                marks.write(conn, prefix, low, closing)
            if inside is not None:
                inside([r[:-1] for r in rows] if progress.null_phase else rows)  # without the ctid column
                marks.write(conn, prefix, None, high)
        except BaseException:
            for used in {id(c): c for c in (reader, conn)}.values():
                if (
                    not (used.closed or used.broken)
                    and used.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
                ):
                    used.execute("ROLLBACK")
            raise
        unseen = (frozenset(int(x) & 0xFFFFFFFF for x in xip), int(xmax) & 0xFFFFFFFF)
        read = self._advance(table, progress, rows, unseen)
        return read._replace(wal_end=int(wal_end)) if wal_end is not None else read

    def _select(
        self, query: bytes, params: list[Any], prefix: str, low: str, closing: str | None, marks: WindowMarks
    ) -> tuple[Any, Any, Any, list[Sequence[Any]]]:
        """The chunk's SELECT in its snapshot on the reader connection, as one pipeline (the watermarks too when the
        reader is the connector's own connection): the snapshot's first unfinished transaction id, the ids in
        progress, the end of the WAL (read-only windows) and the rows."""
        conn, reader = self.conn, self.reader
        limit = self._timeout_sql()
        with reader.pipeline() as pipeline:
            try:
                reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                if limit is not None:
                    reader.execute(limit)
                opened = reader.execute(
                    "SELECT pg_snapshot_xmax(s)::text::bigint, "
                    "ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x), "
                    + marks.wal_end_sql
                    + " FROM pg_current_snapshot() AS s"
                )
                selected = self.query(reader, query, params)
                reader.execute("COMMIT")
                if reader is conn:
                    marks.queue(conn, prefix, low, closing)
                pipeline.sync()
                snapshot = opened.fetchone()
                assert snapshot is not None  # a SELECT from one function call returns its row
                xmax, xip, wal_end = snapshot
                return xmax, xip, wal_end, selected.fetchall()
            except psycopg.Error:
                # The server's first error is the one raised (it may show while later statements are queued).
                # A Sync ends the pipeline's aborted state first: without it psycopg, leaving the pipeline,
                # logs a second, misleading "pipeline aborted" warning beside the real cause.
                with suppress(psycopg.Error):
                    pipeline.sync()
                raise

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
            return sql.SQL(
                "SELECT {}, walflow_t.ctid::text FROM {} AS walflow_t WHERE {} ORDER BY walflow_t.ctid LIMIT {}"
            ).format(cols, ident, sql.SQL(" AND ").join(where), sql.Literal(size))
        keys = sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key)
        holders = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql_fragment(t)) for t in table.key_types)
        if lower:
            where.append(sql.SQL("({}) > ({})").format(keys, holders))
        where.append(sql.SQL("({}) <= ({})").format(keys, holders))
        return sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT {}").format(
            cols, ident, sql.SQL(" AND ").join(where), keys, sql.Literal(size)
        )

    def _advance(
        self,
        table: SnapshotTable,
        progress: SnapshotProgress,
        rows: list[Sequence[Any]],
        unseen: tuple[frozenset[int], int],
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
