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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
        notifier = Notifier(config, self.producer)
        notifier.notify(INITIAL, "STARTED")
        # Debezium lists the tables in the order of a HashSet while it reads, sorted once a table is done
        snapshotted = collections(t.name for t in tables)
        captured_names = ",".join(sorted(t.name for t in tables))
        threads = max(1, config.snapshot_max_threads) if tables else 1
        leader = connect(self.conninfo, autocommit=True, application_name=f"walflow:{config.name}:snapshot")
        try:
            _begin_snapshot_transaction(leader, self.snapshot_name, config.database_query_timeout_ms)
            snapshot_name = self.snapshot_name
            if snapshot_name is None:
                # No slot export: this transaction's snapshot is the one every reader shares.
                snapshot_name = leader.execute("SELECT pg_export_snapshot()").fetchone()[0]  # type: ignore[index]
                # on a hot standby, as Debezium: the WAL received so far
                self.position_lsn = _lsn(leader.execute(
                    "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END)::text"
                ).fetchone()[0])  # type: ignore[index]
            # Debezium names the snapshot transaction in source.txId; reading it assigns the transaction an id (a
            # standby assigns none: 0, as Debezium reports it there)
            xid = leader.execute("SELECT CASE WHEN pg_is_in_recovery() THEN 0 ELSE txid_current() END").fetchone()[0]  # type: ignore[index]
            database = leader.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
            if config.snapshot_locking_mode == "shared":
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
                spec = ReaderSpec(
                    config, self.conninfo, self.producer.settings, self.producer.partitions, snapshot_name, self.position_lsn, xid,
                    database, emitter.started_us, tuple(t.name for t in tables), config.walflow_kafka_flush_timeout_s,
                )
                coordinator = SnapshotEmitter(config, self.producer, database, self.position_lsn, xid)
                coordinator.started_us = emitter.started_us
                readers = SnapshotReaders(spec, threads, self._progress)
                for table in tables:
                    notifier.notify(INITIAL, "IN_PROGRESS", {"current_collection_in_progress": table.name, "data_collections": snapshotted})
                rows = readers.run(tables, coordinator)
                for table in tables:
                    notifier.notify(INITIAL, "TABLE_SCAN_COMPLETED", {
                        "scanned_collection": table.name, "data_collections": captured_names,
                        "total_rows_scanned": str(rows.get(table.name, 0)), "status": "SUCCEEDED",
                    })  # fmt: skip
                self.producer.add_sent(readers.records, readers.bytes)
                summary.rows_per_table.update(rows)
                summary.rows = sum(rows.values())
            else:
                for table in tables:
                    notifier.notify(INITIAL, "IN_PROGRESS", {"current_collection_in_progress": table.name, "data_collections": snapshotted})
                    try:
                        summary.rows_per_table[table.name] = self._read(leader, table, emitter)
                    except psycopg.errors.QueryCanceled:
                        raise SnapshotError(
                            f"reading table {table.name} for the snapshot was cancelled after "
                            f"database.query.timeout.ms={config.database_query_timeout_ms} (statement timeout, per "
                            "chunk of snapshot.fetch.size rows): raise the setting (0 turns it off) or lower "
                            "snapshot.fetch.size, then run the setup again"
                        ) from None
                    notifier.notify(INITIAL, "TABLE_SCAN_COMPLETED", {
                        "scanned_collection": table.name, "data_collections": captured_names,
                        "total_rows_scanned": str(summary.rows_per_table[table.name]), "status": "SUCCEEDED",
                    })  # fmt: skip
                emitter.finish()
                summary.rows = emitter.rows
        finally:
            leader.close()
        notifier.notify(INITIAL, "COMPLETED")
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
        repl = psycopg.connect(conninfo, autocommit=True, replication="database")  # type: ignore[call-arg]
    except psycopg.OperationalError as exc:
        raise SnapshotError(f"cannot open a replication connection to create slot {slot!r}: {str(exc).strip()}") from None
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
