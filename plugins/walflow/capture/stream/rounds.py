"""The rounds of one stream batch: select incremental-snapshot chunks (if any), read the slot up to the current WAL
position through the dispatcher, flush, save the snapshots' progress and the schema facts, advance the slot.

Without a running incremental snapshot a batch is one round. With one, rounds follow each other until the WAL's end,
the batch's limits, or the snapshot's last chunk: each round ends with a flush and a move of the slot, so a killed
task resumes at the last finished chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg

from walflow.capture.batches import BatchSummary
from walflow.capture.context import CaptureContext
from walflow.capture.incremental import IncrementalSnapshots
from walflow.capture.rereads import Rereads
from walflow.capture.schema_facts import SchemaFacts
from walflow.capture.stream.changes import ChangeEvents
from walflow.capture.stream.checks import advance_slot, wal_end
from walflow.capture.stream.dispatch import Dispatcher
from walflow.capture.stream.peek import read_round
from walflow.errors import ConversionError, DriftError, RecordTooLargeError, SlotError
from walflow.source.connection import MESSAGES_SERVER_VERSION, ServerInfo
from walflow.source.lsn import Lsn

log = logging.getLogger("walflow.capture.stream")

#: Seconds between two progress lines in the task log.
PROGRESS_EVERY_S = 10.0
#: Rows of incremental-snapshot chunks selected per round (several chunks between one flush and the next), and
#: about how much memory their rows may take (wide rows make a round of fewer rows). Each round ends with a flush, a
#: save of the progress and a move of the slot, a pause of the whole pipeline: 60,000 rows a round made a 1M-row
#: snapshot 5% faster than 20,000 (176-179k against 158-170k rows/s in alternating runs, 2026-11-25).
ROUND_ROWS = 60_000
ROUND_BYTES = 64 << 20


class BatchRounds:
    """The rounds of one batch (see the module's docstring).

    :param snapshots: the batch's incremental snapshots, once started (a re-read may start them mid-round).
    :param facts: the schema facts for the lake, saved once Kafka acknowledged the round.
    :param rereads: the re-reads walflow starts for the lake, saved after the snapshots' progress.
    :param fault: the fault-injection tests' seam; does nothing in production.
    """

    def __init__(
        self,
        context: CaptureContext,
        events: ChangeEvents,
        dispatcher: Dispatcher,
        summary: BatchSummary,
        started: float,
        *,
        snapshots: Callable[[], IncrementalSnapshots | None],
        facts: SchemaFacts | None,
        rereads: Rereads | None,
        fault: Callable[[str], None],
    ) -> None:
        self.config = context.config
        self.producer = context.producer
        self.events = events
        self.dispatcher = dispatcher
        self.summary = summary
        self.started = started
        self._snapshots = snapshots
        self._facts = facts
        self._rereads = rereads
        self._fault = fault
        #: an error at one change (a record Kafka cannot take, a table's key or topic drifting, a value not
        #: convertible): the batch stops before that change's transaction, confirms what came before, then raises it
        self.stop_error: RecordTooLargeError | DriftError | ConversionError | None = None

    def run(self, conn: psycopg.Connection, info: ServerInfo, slot_at: Lsn) -> None:
        """Round after round until the WAL's end, the batch's limits, an error at one change, or the incremental
        snapshots' last chunk (see the module's docstring)."""
        config, summary, started = self.config, self.summary, self.started
        inc = self._snapshots()
        while True:
            if inc is not None and inc.active:
                if info.version_num < MESSAGES_SERVER_VERSION:
                    raise SlotError(
                        f"incremental snapshots need PostgreSQL 14 or newer (watermarks are logical decoding "
                        f"messages); this server is {info.version}"
                    )
                self._fault("incremental_chunk")
                inc.prepare(max(config.incremental_snapshot_chunk_size, ROUND_ROWS), ROUND_BYTES)
            upto_text = wal_end(conn, inc.wal_needed if inc is not None else None)
            summary.upto_lsn = upto_text
            log.info(
                "connector %s: streaming slot %s from %s up to %s (at most %d events, %.0f s)",
                config.name,
                config.slot_name,
                summary.advanced_to or slot_at,
                upto_text,
                config.walflow_batch_max_events,
                config.walflow_batch_max_seconds,
            )
            summary.stopped_by = "end"
            self.dispatcher.begin_round(inc)
            advance_to = self._read(conn, upto_text, info.version_num)
            inc = self._end(conn, advance_to)
            if self.stop_error is not None:
                log.error(
                    "connector %s: stopped at a change it cannot stream; the slot is at %s, the end of the last "
                    "transaction before it",
                    config.name,
                    summary.advanced_to or slot_at,
                )
                break  # raised once the batch's state is saved: the next batch starts where this one ended
            if not (inc is not None and inc.active and summary.stopped_by == "end"):
                break
            if summary.events >= config.walflow_batch_max_events:
                summary.stopped_by = "walflow.batch.max.events"
                break
            if time.monotonic() - started >= config.walflow_batch_max_seconds:
                summary.stopped_by = "walflow.batch.max.seconds"
                break

    def _read(self, conn: psycopg.Connection, upto_text: str, server_version: int) -> int | None:
        """Read the slot up to ``upto_text`` through the dispatcher; return where the slot may advance to (None:
        nowhere yet). An error at one change stops the batch before that change's transaction (``stop_error``)."""
        summary, started = self.summary, self.started
        next_progress = time.monotonic() + PROGRESS_EVERY_S

        def after_block(lsn: int) -> None:
            nonlocal next_progress
            now = time.monotonic()
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                self._progress(summary, lsn, started)
            self._fault("produced")

        inc = self._snapshots()
        advance_to, self.stop_error = read_round(
            conn,
            self.config,
            upto_text,
            server_version,
            summary,
            self.dispatcher,
            open_chunks=len(inc.chunks) if inc is not None else 0,
            after_block=after_block,
        )
        return advance_to

    def _end(self, conn: psycopg.Connection, advance_to: int | None) -> IncrementalSnapshots | None:
        """After a round's read: the heartbeat, the flush, then (Kafka has acknowledged) the schema facts, the
        snapshots' progress and the re-reads saved, and the slot advanced. Returns the incremental snapshots, which
        a re-read this round may have started."""
        config, summary = self.config, self.summary
        if config.heartbeat_interval_ms > 0 and not summary.heartbeat_sent:
            # A batch runs far less often than a Debezium heartbeat interval, so each batch sends one.
            self.events.send_heartbeat()
            summary.heartbeat_sent = True
        self._fault("before_flush")
        self.producer.flush(config.walflow_kafka_flush_timeout_s)
        self._fault("flushed")
        summary.records = self.producer.sent
        summary.bytes = self.producer.bytes
        if self._facts is not None:
            self._facts.save()  # acknowledged: the definitions they describe are now the ones to compare with
            summary.schema_facts = [f"{f.schema}.{f.table}@{Lsn(f.lsn)}" for f in self._facts.produced]
        inc = self._snapshots()
        if inc is not None:
            # Saved before the slot moves past the signals and watermarks this round read: a crash after the
            # advance would otherwise lose a signal read this round.
            inc.abandon()
            inc.save()
            summary.snapshot_rows = inc.rows_emitted
            summary.snapshot_rows_dropped = inc.rows_dropped
            summary.signals = inc.signals_seen
            self._fault("incremental_saved")
        if self._rereads is not None:
            summary.rereads = list(self._rereads.started)
            # after the incremental snapshots' save: a sweep is written once its re-read is recorded complete
            if self._rereads.finish():
                self.producer.flush(config.walflow_kafka_flush_timeout_s)
            self._rereads.save()
        if advance_to is not None:
            summary.advanced_to = str(advance_slot(conn, config.slot_name, advance_to))
        return inc

    def _progress(self, summary: BatchSummary, lsn: int, started: float) -> None:
        """A progress line in the task log, every PROGRESS_EVERY_S while a round reads."""
        elapsed = time.monotonic() - started
        log.info(
            "connector %s: %d event(s), %.1f MB produced, %d acknowledged, LSN %s, %.0f events/s",
            self.config.name,
            summary.events,
            self.producer.bytes / 1e6,
            self.producer.acked,
            Lsn(lsn),
            summary.events / elapsed if elapsed else 0.0,
        )
