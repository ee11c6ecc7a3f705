"""Watermark windows: the buffered chunks as the stream reads on, and their rows emitted when the window closes.

While the stream reads the WAL after a chunk's low watermark, every change of that table removes the buffered row
with the same key (both keys for a key change): the streamed event is newer, and so is every change of a transaction
the SELECT's snapshot did not see, wherever it is streamed before the high watermark (:attr:`Chunk.unseen`). At the
high watermark the rows left are emitted as ``op: r`` events with ``source.snapshot = incremental``. In read-only
mode there are no watermarks: a chunk closes at the WAL position its snapshot showed (:attr:`Chunk.close_at`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from walflow.capture.emitter import SnapshotEmitter
from walflow.capture.incremental.progress import Chunk
from walflow.capture.incremental.state import SnapshotState
from walflow.errors import RecordTooLargeError
from walflow.kafka import EventProducer, too_large
from walflow.records.envelope import EventFormat
from walflow.source.signals import printable

log = logging.getLogger("walflow.capture.incremental")


class WatermarkWindows:
    """The chunks' windows as the stream reads on (see the module's docstring).

    :param describe: an error as the state table records it (:meth:`ChunkReader.describe`).
    """

    def __init__(
        self,
        state: SnapshotState,
        producer: EventProducer,
        fmt: EventFormat,
        emitter: SnapshotEmitter,
        database: str,
        describe: Callable[[BaseException], str],
    ) -> None:
        self.state = state
        self.config = state.config
        self.producer = producer
        self.fmt = fmt
        self._emitter = emitter
        self._database = database
        self._describe = describe

    def on_watermark(self, content: bytes, sequence: str, topics: dict[str, int]) -> None:
        """A watermark read at ``sequence`` (its ``source.sequence``): a low one opens its chunk's window, a high one
        emits the chunk's remaining rows."""
        try:
            mark = orjson.loads(content)
        except orjson.JSONDecodeError:
            mark = None
        if not isinstance(mark, dict):
            # not one walflow wrote (another client used the prefix): nothing to act on, but worth a line
            log.warning(
                "a logical decoding message with walflow's watermark prefix at %s is not a watermark: %s",
                sequence,
                printable(content[:200]),
            )
            return
        if mark.get("connector") != self.config.name:
            return
        chunk_id = mark.get("chunk")
        chunk = self.state.chunks.get(chunk_id) if isinstance(chunk_id, str) else None
        if chunk is None:
            return  # a watermark of an earlier, abandoned batch
        if mark.get("kind") == "low":
            chunk.in_window = True
            self.state.window_tables.add(chunk.table.name)
            return
        self._close(chunk, sequence, topics)

    @property
    def next_close(self) -> int | None:
        """Read-only windows: the lowest WAL position at which a chunk's rows are due (:attr:`Chunk.close_at`)."""
        due = [c.close_at for c in self.state.chunks.values() if c.close_at is not None]
        return min(due) if due else None

    @property
    def wal_needed(self) -> int | None:
        """Read-only windows: how far the WAL must reach for this round to emit every chunk it selected."""
        due = [c.close_at for c in self.state.chunks.values() if c.close_at is not None]
        return max(due) if due else None

    def on_position(self, lsn: int, sequence: str, topics: dict[str, int]) -> None:
        """Read-only windows: the stream reached ``lsn`` (a commit at or after it, or the end of what the batch
        reads): the chunks due there close, in the order they were selected, at ``sequence``."""
        for chunk in list(self.state.chunks.values()):
            if chunk.close_at is not None and chunk.close_at <= lsn and chunk.id in self.state.chunks:
                self._close(chunk, sequence, topics)

    def _close(self, chunk: Chunk, sequence: str, topics: dict[str, int]) -> None:
        """Emit a chunk's rows that no streamed change made stale, and stop watching it."""
        try:
            self._emit_chunk(chunk, sequence, topics)
        except RecordTooLargeError as exc:
            # one row Kafka cannot take fails its snapshot (recorded with the fix), never the stream
            assert self.state.progress is not None
            self.state.fail(self.state.progress, chunk.table.name, self._describe(exc))
            return
        del self.state.chunks[chunk.id]
        self.state.refresh_windows()

    def watches(self, table_name: str, xid: int | None) -> bool:
        """Whether a change of ``table_name`` by transaction ``xid`` can make a buffered row stale (before its rows
        are converted for :meth:`on_change`)."""
        return any(chunk.table.name == table_name and chunk.stale_by(xid) for chunk in self.state.chunks.values())

    def on_change(self, table_name: str, *rows: dict[str, Any] | None, xid: int | None = None) -> None:
        """A streamed change of transaction ``xid`` inside a window, or of a transaction the chunk's SELECT did not
        see (:attr:`Chunk.unseen`): buffered rows with the same key (old or new) are stale."""
        for chunk in self.state.chunks.values():
            if chunk.table.name == table_name and chunk.stale_by(xid):
                for row in rows:
                    if (
                        row is not None
                        and (identity := orjson.dumps([row.get(f.name) for f in chunk.dedupe])) in chunk.identities()
                    ):
                        chunk.stale.add(identity)

    def _emit_chunk(self, chunk: Chunk, sequence: str, topics: dict[str, int]) -> None:
        """The chunk's rows as Debezium emits them when its window closes: ``snapshot: incremental``, the
        position of the high watermark in ``sequence``, no ``txId`` or ``lsn``, the time of reading in ``ts_*``.
        Values are assembled around one serialisation of each row, as the initial snapshot's are."""
        progress = self.state.progress
        table = chunk.table.schema
        headers = self.fmt.context_headers or None
        source = self.fmt.source(
            self.config.topic_prefix, self._database, table.schema, table.table,
            ts_us=time.time_ns() // 1000, snapshot="incremental", sequence=sequence,
        )  # fmt: skip
        source_key, after_source = self.fmt.envelope_parts("r")
        encode = self._emitter.encoder(table, "incremental", middle=source_key + orjson.dumps(source) + after_source)
        self.producer.ensure_topic(table.topic)
        rows, dropped = chunk.current()
        self.state.rows_dropped += dropped
        records: list[tuple[bytes | None, bytes]] | None = None
        if self._emitter.failures.tolerant:
            # a row that cannot be built is left out (event.processing.failure.handling.mode warn or skip): the
            # records are built first, the rows kept beside them so that a refused record is still named by its row
            build = self._emitter.building(table, encode, f"the incremental snapshot's chunk closed at {sequence}")
            records, kept = [], []
            for values in rows:
                if (record := build(values)) is not None:
                    records.append(record)
                    kept.append(values)
            rows = kept
        sent_before = self.producer.sent
        try:
            if records is None:
                self.producer.send_all(table.topic, rows, encode, headers)
            else:
                self.producer.send_records(table.topic, records, headers)
        except RecordTooLargeError as exc:
            current = rows[self.producer.sent - sent_before]  # the rows before it were queued
            after = table.row(current)
            key_fields = table.key(after, current) if table.has_key else None
            raise too_large(
                exc,
                table=table.data_collection,
                key=key_fields,
                lsn=None,
                row=after,
                what=f"Its incremental snapshot failed at the chunk closed by the watermark at {sequence} "
                "(streaming goes on); send the signal again after the fix",
            ) from None
        count = len(rows)
        topics[table.topic] = topics.get(table.topic, 0) + count
        self.state.rows_emitted += count
        if progress is not None:
            progress.rows += count
            progress.rows_per_table[chunk.table.name] = progress.rows_per_table.get(chunk.table.name, 0) + count
            self.state.dirty = True

    def abandon(self) -> None:
        """Chunks whose high watermark this batch did not reach: move the cursor back to the first of them,
        so the next batch selects them again (their rows were not emitted)."""
        if self.state.chunks and self.state.progress is not None and not self.state.progress.ended:
            first = next(iter(self.state.chunks.values()))
            name, last_key, max_key, null_phase, last_ctid = first.cursor_before
            progress = self.state.progress
            if not progress.tables or progress.tables[0] != name:
                progress.tables.insert(0, name)  # its last chunk had moved the cursor to the next table
            progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid = (
                last_key,
                max_key,
                null_phase,
                last_ctid,
            )
            progress.chunks -= len(self.state.chunks)
            log.info("incremental snapshot: %d chunk(s) of %s left for the next batch", len(self.state.chunks), name)
        self.state.chunks.clear()
        self.state.window_tables.clear()
