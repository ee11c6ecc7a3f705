"""Incremental snapshots (DBLog watermark windows) and the signals that drive them, run by the stream task.

:class:`IncrementalSnapshots` is what the stream batch holds: it builds the parts (the shared
:class:`~walflow.capture.incremental.state.SnapshotState`, the signals' actions, the queue, the chunk selection and
the watermark windows) and gives the batch and the dispatcher the one surface they use.

Progress (tables left, current table, last key, maximum key) lives in walflow's state table and is saved after the
chunk's events were acknowledged and before the slot advances past them, so a killed stream task resumes at the
last finished chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from walflow.capture.context import CaptureContext
from walflow.capture.emitter import SnapshotEmitter
from walflow.capture.incremental.chunks import ChunkReader
from walflow.capture.incremental.marks import window_marks
from walflow.capture.incremental.progress import Chunk, SnapshotProgress
from walflow.capture.incremental.queue import SnapshotQueue
from walflow.capture.incremental.selection import ChunkSelection
from walflow.capture.incremental.signals import SignalActions
from walflow.capture.incremental.state import SnapshotState
from walflow.capture.incremental.windows import WatermarkWindows
from walflow.capture.notifications import Notifier
from walflow.source.state import StateStore


class IncrementalSnapshots:
    """Signals and incremental-snapshot chunks of one connector, driven by
    :class:`~walflow.capture.stream.batch.StreamBatch` (see the module's docstring).

    :param reader: opens the connection of the role that evaluates signals' conditions.
    :param chunk_hook: the tests' seam between a chunk's SELECT and its high watermark.
    """

    def __init__(
        self,
        context: CaptureContext,
        store: StateStore,
        catalog_conn: psycopg.Connection,
        *,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None = None,
        reader: Callable[[], psycopg.Connection] | None = None,
    ) -> None:
        config, producer = context.config, context.producer
        self.config = config
        self.store = store
        row = catalog_conn.execute("SELECT current_database()").fetchone()
        assert row is not None  # a SELECT without FROM returns its row
        database: str = row[0]
        self.state = state = SnapshotState(config, store, Notifier(context))
        #: selects the chunks; ``reader`` opens the connection of the role that evaluates signals' conditions
        self.reader = ChunkReader(config, catalog_conn, context.filters, context.serializer, context.rules, reader)
        self.queue = SnapshotQueue(state, self._start_waiting)
        self.signals = SignalActions(state, self.queue, self.reader, context.filters, catalog_conn)
        #: how the chunks' windows are marked and closed: watermarks, or (read.only) WAL positions
        self.marks = window_marks(config)
        self.selection = ChunkSelection(state, self.reader, catalog_conn, chunk_hook, self.marks)
        # the chunks' records are assembled as the initial snapshot's are (SnapshotEmitter.encoder)
        emitter = SnapshotEmitter(context, database, None, None, marker_kind="incremental")
        self.windows = WatermarkWindows(state, producer, context.fmt, emitter, database, self.reader.describe)
        # the stream's side, bound once: the dispatcher calls them for every change of a watched table
        self.on_signal = self.signals.on_signal
        self.on_kafka_signal = self.signals.on_kafka_signal
        self.kafka_read_up_to = self.signals.kafka_read_up_to
        self.reread = self.signals.reread
        self.prepare = self.selection.prepare
        self.on_watermark = self.windows.on_watermark
        self.on_position = self.windows.on_position
        self.watches = self.windows.watches
        self.on_change = self.windows.on_change
        self.abandon = self.windows.abandon
        #: the state's own set and list (changed in place), read by the dispatcher at every change and commit
        self.window_tables: set[str] = state.window_tables
        self.blocking: list[tuple[str, list[str]]] = state.blocking

    def _start_waiting(self, signal_id: str, data: dict[str, Any], stops: list[Any]) -> None:
        self.signals.start_waiting(signal_id, data, stops)

    def close(self) -> None:
        """Close the reader role's connection, if the batch opened one."""
        self.reader.close()

    def save(self) -> None:
        """Persist progress and each signal's outcome; called once the batch's records were acknowledged and
        before the slot advances past the signals and watermarks it read (a crash in between reads them again,
        which :meth:`SnapshotQueue.known` and the empty chunk table make harmless). A finished signal makes the next
        queued one current."""
        self.queue.save()
        # after the progress: a batch that dies in between reads the Kafka signals again (recognised by known())
        self.signals.save_kafka_offsets()

    def record_outcome(self, signal_id: str, outcome: dict[str, Any]) -> None:
        """A signal's final status, written by :meth:`save` (after the batch's records were acknowledged)."""
        self.queue.record_outcome(signal_id, outcome)

    # -- what the batch reads -------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.state.active

    @property
    def progress(self) -> SnapshotProgress | None:
        return self.state.progress

    @property
    def chunks(self) -> dict[str, Chunk]:
        return self.state.chunks

    @property
    def kafka_offsets(self) -> dict[int, int]:
        return self.signals.kafka_offsets

    @property
    def next_close(self) -> int | None:
        return self.windows.next_close

    @property
    def wal_needed(self) -> int | None:
        return self.windows.wal_needed

    @property
    def rows_emitted(self) -> int:
        return self.state.rows_emitted

    @property
    def rows_dropped(self) -> int:
        return self.state.rows_dropped

    @property
    def signals_seen(self) -> int:
        return self.state.signals_seen
