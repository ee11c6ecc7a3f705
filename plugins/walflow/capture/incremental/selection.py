"""Chunk selection: the next ``incremental.snapshot.chunk.size`` rows of the current table, each chunk read between
a low and a high watermark.

Per chunk, the stream task writes a low watermark, selects the next rows by key (keyset: ``(key) > (last key) AND
(key) <= (max key)``), and writes a high watermark (:meth:`ChunkReader.read_chunk` says how and why). Watermarks are
``pg_logical_emit_message(..., 'walflow.watermark', ...)`` messages rather than signal-table rows: they need no
table writes, sit at their position in the stream, and carry the connector's name so several connectors on one
database ignore each other's. They need PostgreSQL 14 or newer (pgoutput's ``messages`` option).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import psycopg

from walflow.capture.incremental.chunks import ChunkReader
from walflow.capture.incremental.marks import WindowMarks
from walflow.capture.incremental.progress import Chunk, SnapshotProgress, dedupe_fields, rows_size
from walflow.capture.incremental.state import WATERMARK_PREFIX, SnapshotState
from walflow.capture.rereads import SIGNAL_PREFIX as REREAD_PREFIX
from walflow.capture.snapshot_tables import SnapshotTable
from walflow.errors import ConfigError, ConversionError, SourceError
from walflow.source.catalog import Catalog
from walflow.source.signals import SignalError, printable

log = logging.getLogger("walflow.capture.incremental")


class ChunkSelection:
    """Selects the chunks of a round (see the module's docstring).

    :param chunk_hook: the tests' seam between a chunk's SELECT and its high watermark.
    """

    def __init__(
        self,
        state: SnapshotState,
        reader: ChunkReader,
        catalog_conn: psycopg.Connection,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None,
        marks: WindowMarks,
    ) -> None:
        self.state = state
        #: how the chunks' windows are marked (watermarks, or read-only WAL positions)
        self.marks = marks
        self.reader = reader
        self.config = state.config
        self.conn = catalog_conn
        self._chunk_hook = chunk_hook

    def _table(self, name: str) -> SnapshotTable | None:
        """The current signal's plan of one table (cached for the signal: another signal may have another
        condition or surrogate key for it); under ``incremental.snapshot.allow.schema.changes`` planned again when
        the table's columns changed since (:meth:`_replanned`)."""
        cached = self.state.tables.get(name)
        if cached is not None:
            return self._replanned(cached) if self.config.incremental_snapshot_allow_schema_changes else cached
        progress = self.state.progress
        planned = self.reader.plan(
            name, progress.condition.get(name) if progress else None, progress.surrogate_key if progress else None
        )
        if planned is not None:
            self.state.tables[name] = planned
        return planned

    def _replanned(self, planned: SnapshotTable) -> SnapshotTable | None:
        """``planned``, or its table's new plan when its columns (names, types, NOT NULL, defaults) changed since it
        was made: Debezium's ``incremental.snapshot.allow.schema.changes``, which checks the table's definition at
        each chunk and reads the chunk with the definition it finds. A changed primary key fails the signal, naming
        it: the snapshot's position is a value of the old key."""
        current = Catalog(self.conn).table(planned.catalog.oid)
        if current is None:
            return None  # dropped: the chunk skips the table, as a table gone before its first chunk
        if current.columns == planned.catalog.columns:
            return planned
        name = planned.name
        progress = self.state.progress
        if (
            progress is not None
            and progress.surrogate_key is None
            and current.primary_key != planned.catalog.primary_key
        ):
            raise SignalError(
                f"the primary key of {printable(name)} changed during its incremental snapshot (from "
                f"{list(planned.catalog.primary_key)} to {list(current.primary_key)}): the snapshot's position is in "
                "the old key; send the signal again"
            )
        replanned = self.reader.plan(
            name, planned.condition, progress.surrogate_key if progress else None, oid=planned.catalog.oid
        )
        log.info(
            "incremental snapshot %s: %s was redefined during the snapshot (incremental.snapshot.allow.schema.changes):"
            " its next chunks are read with its columns as they are now",
            progress.signal_id if progress else "?",
            printable(name),
        )
        if replanned is not None:
            self.state.tables[name] = replanned
        return replanned

    def _watermark(self, chunk_id: str, kind: str) -> str:
        return orjson.dumps({"connector": self.config.name, "chunk": chunk_id, "kind": kind}).decode()

    def prepare(self, max_rows: int, max_bytes: int | None = None) -> int:
        """Select chunks (each between its low and high watermark) for up to ``max_rows`` rows, and while the rows
        held take less than about ``max_bytes`` in memory; return the count.

        Chunks of one signal only: a finished signal hands over to the next queued one in :meth:`save`. A table
        whose condition or key fails on the server fails its signal (recorded, its chunks dropped) and the
        stream goes on; only a lost connection propagates.
        """
        selected = held = 0
        try:
            while self.state.active and selected < max_rows and (max_bytes is None or held < max_bytes):
                progress = self.state.progress
                assert progress is not None
                name = progress.tables[0]
                try:
                    count, size = self._prepare_chunk(progress, name)
                    selected += count
                    held += size
                except (SignalError, SourceError, ConfigError, ConversionError, psycopg.Error) as exc:
                    if isinstance(exc, psycopg.Error) and (self.conn.closed or self.conn.broken):
                        raise
                    self.state.fail(progress, name, self.reader.describe(exc))
        finally:
            if self.state.chunks and not (self.conn.closed or self.conn.broken):
                self.marks.flush(self.conn, WATERMARK_PREFIX, self._watermark("", "flush"))
        return selected

    def _prepare_chunk(self, progress: SnapshotProgress, name: str) -> tuple[int, int]:
        """Select the next chunk of table ``name`` between a low and a high watermark; return its row count and about
        how many bytes its rows take (:func:`rows_size`)."""
        table = self._table(name)
        if table is None or not table.key:
            reason = "it no longer exists" if table is None else "it has no primary key (send a 'surrogate-key')"
            if progress.signal_id.startswith(REREAD_PREFIX):
                # walflow's own re-read ends failed, not completed: a completed one has the lake remove every row the
                # table held before it, and it read none
                raise SignalError(f"{printable(name)} cannot be re-read: {reason}")
            log.warning("incremental snapshot %s: skipping %s: %s", progress.signal_id, name, reason)
            self.state.table_done(progress, name, "UNKNOWN_SCHEMA" if table is None else "NO_PRIMARY_KEY")
            self.state.next_table()
            return 0, 0
        cursor = (name, progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid)
        if progress.max_key is None and not progress.null_phase:
            max_key = self.reader.max_key(table)
            if max_key is None:
                if not progress.surrogate_key:
                    log.info("incremental snapshot %s: %s is empty", progress.signal_id, name)
                    self.state.table_done(progress, name, "EMPTY")
                    self.state.next_table()
                    return 0, 0
                progress.null_phase = True
            progress.max_key = max_key
        chunk_id = uuid.uuid4().hex
        saved = (progress.last_key, progress.null_phase, progress.last_ctid)
        hook = self._chunk_hook
        inside: Callable[[list[Sequence[Any]]], None] | None = None
        if hook is not None:

            def inside(read: list[Sequence[Any]]) -> None:
                hook(name, [list(row) for row in read])  # the seam's rows are lists

        try:
            rows, table_done, ctids, unseen, wal_end = self.reader.read_chunk(
                table, progress, WATERMARK_PREFIX, self._watermark(chunk_id, "low"), self._watermark(chunk_id, "high"),
                self.marks, inside=inside,
            )  # fmt: skip
        except BaseException:
            # the cursor must not skip rows that were never buffered
            progress.last_key, progress.null_phase, progress.last_ctid = saved
            raise
        fields = dedupe_fields(table, progress.surrogate_key)
        primary = {table.schema.column_names.index(k) for k in table.catalog.primary_key}
        unique = not progress.surrogate_key and bool(primary) and {f.index for f in fields} == primary
        # rows without a key value (ctids): only their physical position tells them apart
        self.state.chunks[chunk_id] = Chunk(
            chunk_id, table, rows, fields, cursor, unique=unique, ctids=ctids, unseen=unseen, close_at=wal_end
        )
        self.state.window_tables.add(name)  # watched from now on (Chunk.unseen), not only once its window opens
        progress.chunks += 1
        self.state.dirty = True
        self.state.scanned += len(rows)
        if rows:
            self.state.notify(progress, "IN_PROGRESS", {
                "data_collections": ",".join(progress.tables), "current_collection_in_progress": name,
                "maximum_key": ",".join(str(k) for k in progress.max_key) if progress.max_key else '"<null>"',
                "last_processed_key": ",".join(str(k) for k in progress.last_key) if progress.last_key else "<null>",
            })  # fmt: skip
        if table_done:
            self.state.table_done(progress, name, "SUCCEEDED")
            self.state.next_table()
        return len(rows), rows_size(rows)
