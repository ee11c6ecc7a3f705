"""The snapshots a stream batch takes besides streaming: its incremental snapshots (started on first use), the
blocking snapshots signals ask for, and the Kafka signal channel's signals, read before the batch streams."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import psycopg

from walflow.capture.batches import BatchSummary
from walflow.capture.context import CaptureContext
from walflow.capture.incremental import IncrementalSnapshots
from walflow.capture.kafka_signals import read_kafka_signals
from walflow.capture.snapshot import InitialSnapshot
from walflow.capture.snapshot_tables import plan_tables
from walflow.records.events import now_ms
from walflow.source.connection import connect
from walflow.source.signals import signal_key
from walflow.source.state import StateStore

log = logging.getLogger("walflow.capture.stream")


class BatchSnapshots:
    """One batch's incremental and blocking snapshots (see the module's docstring).

    :param catalog_conn: the batch's autocommit catalog connection, which the chunks are selected on.
    :param store: the connector's state, on a connection the peek's transaction does not hold.
    :param reader_conninfo: the role that evaluates signals' conditions (``walflow.postgres.reader.conn.id``).
    :param chunk_hook: the tests' seam between a chunk's SELECT and its high watermark.
    :param on_start: told when the incremental snapshots start (the dispatcher routes signals and changes to them).
    """

    def __init__(
        self,
        context: CaptureContext,
        conninfo: str,
        catalog_conn: psycopg.Connection,
        store: StateStore,
        *,
        reader_conninfo: str | None,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None,
        on_start: Callable[[IncrementalSnapshots], None],
    ) -> None:
        self.context = context
        self.config = context.config
        self.conninfo = conninfo
        self.reader_conninfo = reader_conninfo
        self._catalog_conn = catalog_conn
        self._store = store
        self._chunk_hook = chunk_hook
        self._on_start = on_start
        #: the incremental snapshots, once started
        self.incremental: IncrementalSnapshots | None = None

    def close(self) -> None:
        """Close the reader role's connection, if the incremental snapshots opened one."""
        if self.incremental is not None:
            self.incremental.close()

    def started(self) -> IncrementalSnapshots:
        """The batch's incremental snapshots, started on first use (a signal, saved progress, or a re-read)."""
        if self.incremental is None:
            self.incremental = IncrementalSnapshots(
                self.context,
                self._store,
                self._catalog_conn,
                chunk_hook=self._chunk_hook,
                reader=self._reader_factory(),
            )
            self._on_start(self.incremental)
        return self.incremental

    def read_kafka_signals(self, summary: BatchSummary) -> None:
        """The Kafka signal channel's new signals, applied; their blocking snapshots run before the batch streams (a
        Kafka signal has no place in the WAL)."""
        snapshots = self.started()
        signals, read = read_kafka_signals(self.config, self.context.producer.settings, snapshots.kafka_offsets)
        for signal in signals:
            snapshots.on_kafka_signal(signal.partition, signal.offset, signal.values)
        snapshots.kafka_read_up_to(read)
        if snapshots.blocking:
            self.run_blocking(snapshots, summary)

    def run_blocking(self, inc: IncrementalSnapshots, summary: BatchSummary) -> None:
        """Debezium's blocking snapshots: streaming pauses after the signal's transaction, the tables are read
        whole as an initial snapshot reads them (their current rows, ``r`` events with its markers), and streaming
        resumes with the next transaction. The signal's status is ``running`` meanwhile, and ``completed`` once the
        batch's records are acknowledged."""
        while inc.blocking:
            signal_id, names = inc.blocking.pop(0)
            plans = plan_tables(self._catalog_conn, self.context, only=[re.escape(name) for name in names])
            log.info(
                "connector %s: blocking snapshot %s of %s: streaming paused",
                self.config.name,
                signal_id,
                ", ".join(names),
            )
            inc.store.put(
                signal_key(signal_id),
                {
                    "status": "running",
                    "type": "blocking",
                    "tables_left": names,
                    "rows": 0,
                    "chunks": 0,
                    "at_ms": now_ms(),
                },
            )
            result = InitialSnapshot(
                self.config,
                self.conninfo,
                self.context.producer,
                snapshot_name=None,
                position_lsn=None,
                context=self.context,
            ).run(plans)
            summary.snapshot_rows += result.rows
            # written with the progress once Kafka acknowledged the rows: a batch that dies first takes it again
            inc.record_outcome(signal_id, {
                "status": "completed", "type": "blocking", "rows": result.rows,
                "rows_per_table": result.rows_per_table, "at_ms": now_ms(),
            })  # fmt: skip
            log.info(
                "connector %s: blocking snapshot %s: %d row(s); streaming resumes",
                self.config.name,
                signal_id,
                result.rows,
            )

    def _reader_factory(self) -> Callable[[], psycopg.Connection] | None:
        """What opens the reader role's connection (signals' conditions are evaluated as that role), or ``None``."""
        if self.reader_conninfo is None:
            return None
        conninfo, config = self.reader_conninfo, self.config
        # database.initial.statements too: the chunks read the tables in the session a snapshot reads them in
        return lambda: connect(
            conninfo,
            application_name=f"walflow:{config.name}:reader",
            initial_statements=config.database_initial_statements,
        )
