"""Consistent initial snapshots: every captured table read under one snapshot, as ``op: r`` events.

When the setup creates the slot, it exports the slot's snapshot and every reader imports it, so the tables
are read exactly as of the slot's consistent point: the stream then continues with no gap and no overlap.
When the slot already exists, the readers share a REPEATABLE READ snapshot of their own and the snapshot's
WAL position is recorded (the reference's isolation approach): changes between the slot's position and
the snapshot may be streamed again after it, which replays to the same state.

Tables are read in keyset-ordered chunks of ``snapshot.fetch.size`` rows (the primary key, compared as a row
value), so nothing holds a whole table in memory. With ``snapshot.max.threads`` above 1, that many reader processes
read key ranges of the tables in parallel, each on its own connection that imports the same snapshot and with its
own producer (:mod:`walflow.capture.snapshot_workers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.context import CaptureContext
from walflow.capture.emitter import SnapshotEmitter
from walflow.capture.notifications import INITIAL, Notifier, collections
from walflow.capture.snapshot_tables import (
    PROGRESS_EVERY_S,
    SnapshotError,
    SnapshotTable,
    _begin_snapshot_transaction,
    _lock_tables,
    read_chunks,
)
from walflow.capture.snapshot_workers import ReaderSpec, SnapshotReaders
from walflow.config.connector import ConnectorConfig
from walflow.kafka import EventProducer
from walflow.source.connection import connect

log = logging.getLogger(__name__)


@dataclass
class SnapshotSummary:
    tables: list[str] = field(default_factory=list)
    rows_per_table: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    position_lsn: str | None = None
    exported_snapshot: bool = False
    #: rows whose events could not be built, left out (event.processing.failure.handling.mode warn or skip) by this
    #: process (the reader processes of snapshot.max.threads log and report theirs to the lake themselves)
    rows_left_out: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Transaction:
    """The snapshot's transaction as the readers import it and the events name it."""

    #: the exported snapshot every reader imports
    snapshot_name: str
    #: its transaction id (``source.txId``; 0 on a standby)
    xid: int
    database: str


class _TableNotices:
    """Debezium's notifications of each table of an initial snapshot: IN_PROGRESS as it starts, then
    TABLE_SCAN_COMPLETED with its rows."""

    def __init__(self, notifier: Notifier, tables: list[SnapshotTable]) -> None:
        self.notifier = notifier
        # Debezium lists the tables in the order of a HashSet while it reads, sorted once a table is done
        self.snapshotted = collections(t.name for t in tables)
        self.captured_names = ",".join(sorted(t.name for t in tables))

    def in_progress(self, table: SnapshotTable) -> None:
        self.notifier.notify(
            INITIAL,
            "IN_PROGRESS",
            {"current_collection_in_progress": table.name, "data_collections": self.snapshotted},
        )

    def scanned(self, table: SnapshotTable, rows: int) -> None:
        self.notifier.notify(INITIAL, "TABLE_SCAN_COMPLETED", {
            "scanned_collection": table.name, "data_collections": self.captured_names,
            "total_rows_scanned": str(rows), "status": "SUCCEEDED",
        })  # fmt: skip


class InitialSnapshot:
    """Read the planned tables under one snapshot and produce their ``r`` events.

    :param producer: the producer the records go to (a plain one: the connector's transforms and topic creation
        are put before it, as :meth:`CaptureContext.for_task` does; an already transforming one is kept).
    :param snapshot_name: an exported snapshot to import (slot creation), or ``None`` to take one here.
    :param position_lsn: the WAL position the snapshot corresponds to, recorded in each event's source.
    :param context: the task's context, when the caller has one (built from ``config`` and writing with
        ``producer``): used instead of building one, and its producer written with.
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
        context: CaptureContext | None = None,
    ) -> None:
        self.config = config
        self.conninfo = conninfo
        self.context = context if context is not None else CaptureContext.for_task(config, producer)
        self.producer = self.context.producer
        self.snapshot_name = snapshot_name
        self.position_lsn = position_lsn
        self._progress = progress or (lambda msg: log.info("%s", msg))
        # test seam: called with "snapshot_row" per row; fault-injection tests kill the process there
        self._fault = fault_hook

    def run(self, tables: list[SnapshotTable]) -> SnapshotSummary:
        """Open the snapshot's transaction, read every table in it (here or with reader processes), and summarise.

        Debezium's notifications frame it: STARTED, each table's IN_PROGRESS and TABLE_SCAN_COMPLETED, COMPLETED.
        """
        config = self.config
        summary = SnapshotSummary(tables=[t.name for t in tables], exported_snapshot=self.snapshot_name is not None)
        started = time.monotonic()
        if config.snapshot_delay_ms:
            self._progress(f"snapshot.delay.ms: waiting {config.snapshot_delay_ms} ms before the snapshot")
            time.sleep(config.snapshot_delay_ms / 1000)
        notifier = Notifier(self.context)
        notifier.notify(INITIAL, "STARTED")
        notices = _TableNotices(notifier, tables)
        threads = max(1, config.snapshot_max_threads) if tables else 1
        leader = connect(self.conninfo, autocommit=True, application_name=f"walflow:{config.name}:snapshot")
        try:
            transaction = self._begin(leader, tables)
            summary.position_lsn = _lsn_str(self.position_lsn)
            # Debezium marks the first table's first row "first" and the last one's last row "last", in the order
            # of the tables (with several threads too: its threads coordinate to emit them so)
            emitter = SnapshotEmitter(
                self.context,
                transaction.database,
                self.position_lsn,
                transaction.xid,
                table_order=[t.name for t in tables],
            )
            self._progress(
                f"snapshot of {len(tables)} table(s) at LSN {summary.position_lsn} with {threads} reader(s): "
                + ", ".join(t.name for t in tables)
            )
            if threads > 1:
                rows = self._read_with_readers(tables, threads, transaction, emitter, notices)
                summary.rows_per_table.update(rows)
                summary.rows = sum(rows.values())
            else:
                summary.rows_per_table.update(self._read_here(leader, tables, emitter, notices))
                summary.rows = emitter.rows
            summary.rows_left_out = emitter.left_out
        finally:
            leader.close()
        notifier.notify(INITIAL, "COMPLETED")
        self._summarise(summary, started, len(tables))
        return summary

    def _begin(self, leader: psycopg.Connection, tables: list[SnapshotTable]) -> _Transaction:
        """Begin the snapshot's transaction on the leader's connection and name it for the readers and the events.

        It imports the slot's exported snapshot, or exports its own and records the WAL position it stands at;
        ``snapshot.locking.mode: shared`` then locks the tables for the snapshot's length.
        """
        config = self.config
        _begin_snapshot_transaction(leader, self.snapshot_name, config.database_query_timeout_ms)
        snapshot_name = self.snapshot_name
        if snapshot_name is None:
            # No slot export: this transaction's snapshot is the one every reader shares.
            snapshot_name = _scalar(leader, "SELECT pg_export_snapshot()")
            # on a hot standby, as Debezium: the WAL received so far
            self.position_lsn = _lsn(
                _scalar(
                    leader,
                    "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn()"
                    " ELSE pg_current_wal_lsn() END)::text",
                )
            )
        # Debezium names the snapshot transaction in source.txId; reading it assigns the transaction an id (a
        # standby assigns none: 0, as Debezium reports it there)
        xid = _scalar(leader, "SELECT CASE WHEN pg_is_in_recovery() THEN 0 ELSE txid_current() END")
        database = _scalar(leader, "SELECT current_database()")
        if config.snapshot_locking_mode == "shared":
            _lock_tables(leader, tables, config.snapshot_lock_timeout_ms)
        return _Transaction(snapshot_name, xid, database)

    def _read_with_readers(
        self,
        tables: list[SnapshotTable],
        threads: int,
        transaction: _Transaction,
        emitter: SnapshotEmitter,
        notices: _TableNotices,
    ) -> dict[str, int]:
        """Read the tables with ``threads`` reader processes, each importing this snapshot (snapshot_workers: key
        ranges, markers kept); this process writes the rows they hold back. The rows per table."""
        config = self.config
        spec = ReaderSpec(
            config,
            self.conninfo,
            self.producer.settings,
            self.producer.partitions,
            transaction.snapshot_name,
            self.position_lsn,
            transaction.xid,
            transaction.database,
            emitter.started_us,
            tuple(t.name for t in tables),
            config.walflow_kafka_flush_timeout_s,
        )
        coordinator = SnapshotEmitter(self.context, transaction.database, self.position_lsn, transaction.xid)
        coordinator.started_us = emitter.started_us
        readers = SnapshotReaders(spec, threads, self._progress)
        for table in tables:
            notices.in_progress(table)
        rows = readers.run(tables, coordinator)
        for table in tables:
            notices.scanned(table, rows.get(table.name, 0))
        self.producer.add_sent(readers.records, readers.bytes)
        return rows

    def _read_here(
        self, leader: psycopg.Connection, tables: list[SnapshotTable], emitter: SnapshotEmitter, notices: _TableNotices
    ) -> dict[str, int]:
        """Read the tables one after the other in the leader's transaction. The rows per table."""
        rows: dict[str, int] = {}
        for table in tables:
            notices.in_progress(table)
            try:
                rows[table.name] = self._read(leader, table, emitter)
            except psycopg.errors.QueryCanceled:
                raise SnapshotError(
                    f"reading table {table.name} for the snapshot was cancelled after "
                    f"database.query.timeout.ms={self.config.database_query_timeout_ms} (statement timeout, per "
                    "chunk of snapshot.fetch.size rows): raise the setting (0 turns it off) or lower "
                    "snapshot.fetch.size, then run the setup again"
                ) from None
            notices.scanned(table, rows[table.name])
        emitter.finish()
        return rows

    def _summarise(self, summary: SnapshotSummary, started: float, table_count: int) -> None:
        """The snapshot's duration in the summary, and its rate in the progress log."""
        summary.seconds = round(time.monotonic() - started, 3)
        rate = summary.rows / summary.seconds if summary.seconds else 0.0
        self._progress(
            f"snapshot produced {summary.rows} row(s) of {table_count} table(s) in {summary.seconds:.1f} s "
            f"({rate:.0f} rows/s)"
        )

    def _read(self, conn: psycopg.Connection, table: SnapshotTable, emitter: SnapshotEmitter) -> int:
        started = time.monotonic()
        next_log = started + PROGRESS_EVERY_S
        count = 0

        def rows() -> Iterator[Sequence[Any]]:
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


def _scalar(conn: psycopg.Connection, query: str) -> Any:
    """The one value of a query that returns one row (a SELECT without FROM always does)."""
    row = conn.execute(query).fetchone()
    assert row is not None, f"no row from {query!r}"
    return row[0]


def _lsn(text: str) -> int:
    from walflow.source.pgoutput import str_to_lsn

    return str_to_lsn(text)


def _lsn_str(value: int | None) -> str | None:
    from walflow.source.pgoutput import lsn_to_str

    return lsn_to_str(value) if value is not None else None


def create_slot_with_snapshot(conninfo: str, slot: str, failover: bool = False) -> tuple[psycopg.Connection, int, str]:
    """Create the slot on a replication connection, exporting its snapshot (``failover``: PostgreSQL 17's failover
    slot, which standbys with ``sync_replication_slots`` keep a copy of).

    Returns the connection (keep it open and idle while readers import the snapshot), the slot's
    consistent point and the snapshot's name.
    """
    try:
        repl = psycopg.connect(conninfo, autocommit=True, replication="database")
    except psycopg.OperationalError as exc:
        raise SnapshotError(
            f"cannot open a replication connection to create slot {slot!r}: {str(exc).strip()}"
        ) from None
    try:
        row = repl.execute(
            sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export'{})").format(
                sql.Identifier(slot), sql.SQL(", FAILOVER true" if failover else "")
            ),
            prepare=False,
        ).fetchone()
    except psycopg.Error as exc:
        repl.close()
        raise SnapshotError(f"cannot create replication slot {slot!r}: {str(exc).strip()}") from None
    assert row is not None
    _name, consistent_point, snapshot_name, _plugin = row
    return repl, _lsn(consistent_point), snapshot_name
