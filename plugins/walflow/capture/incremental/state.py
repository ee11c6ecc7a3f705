"""What the parts of one batch's incremental snapshots share: the current signal's progress, the chunks whose
windows are open, the outcomes waiting for the next save, and the counts the batch reports.

:mod:`~walflow.capture.incremental.signals` acts on signals, :mod:`~walflow.capture.incremental.queue` keeps the
signals queued and waiting and saves the progress, :mod:`~walflow.capture.incremental.selection` selects chunks
between watermarks, :mod:`~walflow.capture.incremental.windows` closes their windows as the stream reads on; each
reads and changes this state, and nothing else of the others'.
"""

from __future__ import annotations

import logging
from typing import Any

from walflow.capture.incremental.progress import Chunk, SnapshotProgress
from walflow.capture.notifications import INCREMENTAL, Notifier
from walflow.capture.snapshot_tables import SnapshotTable
from walflow.config.connector import ConnectorConfig
from walflow.records.events import now_ms
from walflow.source.state import StateStore

log = logging.getLogger("walflow.capture.incremental")

#: the logical decoding messages' prefix of the chunks' watermarks
WATERMARK_PREFIX = "walflow.watermark"
#: state-table key of the current signal's progress (and the queue behind it)
STATE_KEY = "incremental"
#: state-table key of the position up to which signals have been applied (see SignalActions.on_signal)
SIGNALS_KEY = "incremental_signals"
#: the state table's key of the Kafka signal channel's offsets (walflow.capture.kafka_signals)
KAFKA_SIGNALS_KEY = "kafka_signals"
#: state-table key of how many execute-snapshot signals wait for room in the queue (SnapshotQueue.wait)
WAITING_KEY = "incremental_waiting"


class SnapshotState:
    """The shared state of one batch's incremental snapshots (see the module's docstring)."""

    def __init__(self, config: ConnectorConfig, store: StateStore, notifier: Notifier) -> None:
        self.config = config
        self.store = store
        #: notification.enabled.channels: Debezium's notifications of the snapshots' progress
        self.notifier = notifier
        raw = store.get(STATE_KEY)
        #: the current signal's snapshot (tables left, cursor, counts) and the signals queued behind it
        self.progress: SnapshotProgress | None = SnapshotProgress(**raw) if raw else None
        #: the chunks selected and not emitted yet, by id, in the order they were selected
        self.chunks: dict[str, Chunk] = {}
        #: tables with a chunk a streamed change can make stale
        self.window_tables: set[str] = set()
        #: the current signal's plan of each table (another signal may have another condition or key for it)
        self.tables: dict[str, SnapshotTable] = {}
        #: terminal statuses (stopped, failed) to write with the next save, by signal id
        self.outcomes: dict[str, dict[str, Any]] = {}
        #: whether something changed that the next save writes
        self.dirty = False
        #: blocking snapshots asked for and not run yet: (signal id, tables)
        self.blocking: list[tuple[str, list[str]]] = []
        self.signals_seen = 0
        self.rows_emitted = 0
        #: buffered rows a streamed change inside their window made stale (so they were not emitted)
        self.rows_dropped = 0
        #: rows read of the current table (Debezium's total_rows_scanned)
        self.scanned = 0
        #: LSN of the last signal whose effect a save recorded: signals at or below it are read again only after
        #: a batch died between its save and its slot advance, and must not act twice (a stop or pause read
        #: again would hit a snapshot that started after it)
        self.signals_upto = int((store.get(SIGNALS_KEY) or {}).get("lsn") or 0)
        self.signals_read = self.signals_upto

    @property
    def active(self) -> bool:
        """Whether a snapshot is running (not paused) with tables left to read."""
        return self.progress is not None and not self.progress.paused and bool(self.progress.tables)

    def refresh_windows(self) -> None:
        """The tables still watched, once chunks closed or were dropped."""
        # in place: the incremental snapshots' surface hands this set to the dispatcher once
        watched = {c.table.name for c in self.chunks.values() if c.watched}
        self.window_tables.intersection_update(watched)
        self.window_tables.update(watched)

    def fail(self, progress: SnapshotProgress, name: str, error: str) -> None:
        """The current signal fails at table ``name`` with ``error``: its remaining tables and chunks are dropped,
        and the stream goes on."""
        self.table_done(progress, name, "SQL_EXCEPTION")
        log.warning(
            "incremental snapshot %s failed on %s: %s; its remaining tables %s are dropped and streaming continues",
            progress.signal_id,
            name,
            error,
            progress.tables,
        )
        self.outcomes[progress.signal_id] = {
            "status": "failed",
            "error": f"{name}: {error}",
            "tables_left": list(progress.tables),
            "rows": progress.rows,
            "chunks": progress.chunks,
            "at_ms": now_ms(),
        }
        progress.tables = []
        progress.ended = True
        progress.last_key = progress.max_key = progress.last_ctid = None
        progress.null_phase = False
        # every chunk in flight is this signal's (a round never mixes signals); their watermarks are ignored
        self.chunks.clear()
        self.window_tables.clear()
        self.dirty = True

    def notify(self, progress: SnapshotProgress, kind: str, data: dict[str, str]) -> None:
        """Debezium's notification of the snapshot's progress (``notification.enabled.channels``)."""
        self.notifier.notify(INCREMENTAL, kind, data, notification_id=progress.signal_id)

    def table_done(self, progress: SnapshotProgress, name: str, status: str) -> None:
        """Debezium's TABLE_SCAN_COMPLETED of the current table; the rows read count again from the next table."""
        self.notify(progress, "TABLE_SCAN_COMPLETED", {
            "data_collections": ",".join(progress.tables), "scanned_collection": name,
            "total_rows_scanned": str(self.scanned), "status": status,
        })  # fmt: skip
        self.scanned = 0

    def next_table(self) -> None:
        """The current table is done: the cursor moves to the next one."""
        progress = self.progress
        assert progress is not None
        progress.tables.pop(0)
        progress.last_key = progress.max_key = progress.last_ctid = None
        progress.null_phase = False
        self.dirty = True
        if not progress.tables:
            self.notify(progress, "COMPLETED", {})
