"""Incremental snapshots (DBLog watermark windows) and signals, executed by the stream task.

A signal is a row inserted into the signal table (``signal.data.collection``: columns ``id``, ``type``,
``data``); the stream reads it from the WAL like any change, so signals are ordered with the data.

Per chunk, the stream task writes a low watermark, selects the next ``incremental.snapshot.chunk.size`` rows
by key (keyset: ``(key) > (last key) AND (key) <= (max key)``), and writes a high watermark. While it then
streams the WAL, every change of that table between the two watermarks removes the buffered row with the same
key (both keys for a key change): the streamed event is newer, and so is every change of a transaction the
SELECT's snapshot did not see, wherever it is streamed before the high watermark (:attr:`Chunk.unseen`). At the
high watermark the rows left are emitted as ``op: r`` events with ``source.snapshot = incremental``.

Watermarks are ``pg_logical_emit_message(..., 'walflow.watermark', ...)`` messages rather than signal-table rows:
they need no table writes (nothing to clean up, no INSERT grant), sit at their position in the stream, and carry the
connector's name so several connectors on one database ignore each other's. The low one is written by the chunk's
read-only transaction itself, the high one in a transaction of its own after it (:meth:`ChunkReader.read_chunk` says
why). They need PostgreSQL 14 or newer (pgoutput's ``messages`` option).

Progress (tables left, current table, last key, maximum key) lives in walflow's state table and is saved
after the chunk's events were acknowledged and the slot advanced past them, so a killed stream task resumes
at the last finished chunk.

Each ``execute-snapshot`` signal is its own snapshot with its own tables, condition and surrogate key: one
arriving while another runs is queued behind it (it may name the same table with another condition, as the
runs of a backfill do), and every signal id ends ``completed``, ``stopped`` or ``failed`` in the state table,
which is what the snapshot DAG's sensor waits for. A condition or surrogate key that does not work fails its
signal, never the stream: it is tried when the signal arrives and again per table while the chunks are read.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import psycopg

from walflow.capture.chunks import Chunk, ChunkReader, SnapshotProgress, dedupe_fields, rows_size
from walflow.capture.emitter import SnapshotEmitter
from walflow.capture.notifications import INCREMENTAL, Notifier
from walflow.capture.rereads import SIGNAL_PREFIX as REREAD_PREFIX
from walflow.capture.snapshot_tables import SnapshotTable
from walflow.config.connector import ConnectorConfig
from walflow.config.expressions import check_condition
from walflow.config.filters import Filters
from walflow.config.patterns import SIGNAL_BUDGET_S, MatchBudget, Pattern, compile_patterns, matches_any
from walflow.errors import ConfigError, ConversionError, ExpressionError, PatternError, RecordTooLargeError, SourceError
from walflow.kafka import EventProducer, too_large
from walflow.records.envelope import EventFormat
from walflow.records.events import Serializer, now_ms
from walflow.records.transforms import ColumnRules
from walflow.source.publication import list_tables
from walflow.source.signals import MAX_SIGNAL_BYTES, MAX_SIGNAL_ID, SignalError, printable, signal_key
from walflow.source.state import StateStore

log = logging.getLogger(__name__)

WATERMARK_PREFIX = "walflow.watermark"
STATE_KEY = "incremental"
#: state-table key of the position up to which signals have been applied (see IncrementalSnapshots.on_signal)
SIGNALS_KEY = "incremental_signals"
#: the state table's key of the Kafka signal channel's offsets (walflow.capture.kafka_signals)
KAFKA_SIGNALS_KEY = "kafka_signals"
#: state-table key of how many execute-snapshot signals wait for room in the queue (IncrementalSnapshots._wait)
WAITING_KEY = "incremental_waiting"
#: what fails a signal rather than the stream (SignalError is a ValueError)
_SIGNAL_FAILURES = (ValueError, TypeError, ConfigError, ConversionError)
#: signal types whose second application would differ from the first (they act on whatever snapshot is current)
_REPEAT_SENSITIVE = frozenset({"stop-snapshot", "pause-snapshot", "resume-snapshot"})


class IncrementalSnapshots:
    """Signals and incremental-snapshot chunks of one connector, driven by :class:`~walflow.capture.stream.StreamBatch`."""

    def __init__(
        self,
        config: ConnectorConfig,
        store: StateStore,
        catalog_conn: psycopg.Connection,
        producer: EventProducer,
        serializer: Serializer,
        *,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None = None,
        reader: Callable[[], psycopg.Connection] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.conn = catalog_conn
        self.producer = producer
        self.serializer = serializer
        self.fmt = EventFormat(config)
        self.filters = Filters(config)
        self.rules = ColumnRules(config)
        #: selects the chunks; ``reader`` opens the connection of the role that evaluates signals' conditions
        self.reader = ChunkReader(config, catalog_conn, self.filters, serializer, self.rules, reader)
        raw = store.get(STATE_KEY)
        self.progress: SnapshotProgress | None = SnapshotProgress(**raw) if raw else None
        self.chunks: dict[str, Chunk] = {}
        self.window_tables: set[str] = set()
        self._tables: dict[str, SnapshotTable] = {}
        self.signals_seen = 0
        self.rows_emitted = 0
        #: buffered rows a streamed change inside their window made stale (so they were not emitted)
        self.rows_dropped = 0
        #: terminal statuses (stopped, failed) to write with the next save, by signal id
        self._outcomes: dict[str, dict[str, Any]] = {}
        self._chunk_hook = chunk_hook
        self._database = catalog_conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        # the chunks' records are assembled as the initial snapshot's are (SnapshotEmitter.encoder)
        self._emitter = SnapshotEmitter(config, producer, self._database, None, None, marker_kind="incremental")
        #: notification.enabled.channels: Debezium's notifications of the snapshots' progress
        self.notifier = Notifier(config, producer)
        #: rows read of the current table (Debezium's total_rows_scanned)
        self._scanned = 0
        #: blocking snapshots asked for and not run yet: (signal id, tables)
        self.blocking: list[tuple[str, list[str]]] = []
        self._dirty = False
        #: LSN of the last signal whose effect a save recorded: signals at or below it are read again only after
        #: a batch died between its save and its slot advance, and must not act twice (a stop or pause read
        #: again would hit a snapshot that started after it)
        self._signals_upto = int((store.get(SIGNALS_KEY) or {}).get("lsn") or 0)
        #: the Kafka signal channel: per partition, the offset of the last message taken (saved with the progress)
        self.kafka_offsets: dict[int, int] = {int(p): int(o) for p, o in (store.get(KAFKA_SIGNALS_KEY) or {}).items()}
        self._kafka_read = False
        self._signals_read = self._signals_upto
        #: signals waiting for room in the queue (:meth:`_wait`), and how many the state table says
        self._waiting = self._waiting_saved = int((store.get(WAITING_KEY) or {}).get("count") or 0)

    def close(self) -> None:
        """Close the reader role's connection, if the batch opened one."""
        self.reader.close()

    # -- state ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.progress is not None and not self.progress.paused and bool(self.progress.tables)

    def save(self) -> None:
        """Persist progress and each signal's outcome; called once the batch's records were acknowledged and
        before the slot advances past the signals and watermarks it read (a crash in between reads them again,
        which :meth:`_known` and the empty chunk table make harmless). A finished signal makes the next queued
        one current."""
        self._save_progress()
        # after the progress: a batch that dies in between reads the Kafka signals again (recognised by _known)
        if self._kafka_read:
            self.store.put(KAFKA_SIGNALS_KEY, {str(p): o for p, o in self.kafka_offsets.items()})
            self._kafka_read = False

    def _save_progress(self) -> None:
        if not self._dirty:
            return
        for signal_id, outcome in self._outcomes.items():
            self.store.put(signal_key(signal_id), outcome)
        self._outcomes.clear()
        progress = self.progress
        while progress is not None and not progress.tables:
            if not progress.ended:
                status = "stopped" if progress.stopped_by else "completed"
                outcome = {"status": status, "rows": progress.rows, "chunks": progress.chunks, "rows_per_table": progress.rows_per_table, "at_ms": now_ms()}
                if progress.stopped_by:
                    outcome["by"] = progress.stopped_by
                self.store.put(signal_key(progress.signal_id), outcome)
                log.info("incremental snapshot %s %s: %d row(s) in %d chunk(s)", progress.signal_id, status, progress.rows, progress.chunks)
            progress = self._next_signal(progress)
        self.progress = progress
        if self._waiting and (progress is None or len(progress.queued) < self.config.walflow_signal_queue_max):
            self._promote()
            progress = self.progress
        if progress is None:
            self.store.delete(STATE_KEY)
        else:
            self.store.put(STATE_KEY, progress.as_dict())
            self.store.put(
                signal_key(progress.signal_id),
                {"status": "paused" if progress.paused else "running", "tables_left": progress.tables, "rows": progress.rows, "chunks": progress.chunks, "at_ms": now_ms()},
            )
        if self._waiting != self._waiting_saved:
            self.store.put(WAITING_KEY, {"count": self._waiting})
            self._waiting_saved = self._waiting
        if self._signals_read > self._signals_upto:
            # after the progress: a crash between the two leaves signals to be read again, which _known covers
            self.store.put(SIGNALS_KEY, {"lsn": self._signals_read})
            self._signals_upto = self._signals_read
        self._dirty = False

    def _next_signal(self, finished: SnapshotProgress) -> SnapshotProgress | None:
        """The queued signal that runs after ``finished``; it inherits the pause state (a pause is the connector's)."""
        if not finished.queued:
            return None
        entry, rest = finished.queued[0], finished.queued[1:]
        following = SnapshotProgress(
            signal_id=entry["signal_id"],
            tables=list(entry["tables"]),
            condition=dict(entry.get("condition") or {}),
            surrogate_key=entry.get("surrogate_key"),
            paused=finished.paused,
            stopped_by=entry.get("stopped_by"),
            queued=rest,
        )
        # planned tables carry the previous signal's condition and key
        self._tables.clear()
        self._notify(following, "STARTED", {"data_collections": ",".join(following.tables)})
        log.info("incremental snapshot %s: starting %s (queued behind %s)", following.signal_id, following.tables, finished.signal_id)
        return following

    # -- signals ----------------------------------------------------------------------------------
    def is_signal_table(self, schema: str, table: str) -> bool:
        return self.config.signal_table == (schema, table)

    def on_signal(self, values: dict[str, Any], lsn: int | None = None) -> None:
        """Handle one signal row (id, type, data) read from the slot at ``lsn``. Malformed signals are logged and
        skipped; a signal a previous batch already applied (read again after that batch died) is ignored."""
        signal_id = values.get("id")
        if lsn is not None:
            if lsn <= self._signals_upto:
                log.info("signal %r at %X/%X was applied by an earlier batch (read again after a restart); ignored", signal_id, lsn >> 32, lsn & 0xFFFFFFFF)
                return
            if values.get("type") in _REPEAT_SENSITIVE:
                # only these act differently when applied twice (an execute-snapshot read again is recognised by
                # _known, a log line or a failure twice does no harm); recording just them keeps the state
                # table's writes, which the next batch decodes too, to the batches that need one
                self._signals_read = max(self._signals_read, lsn)
                self._dirty = True
        try:
            kind = values.get("type")
            raw = values.get("data") or "{}"
            if not signal_id or not kind:
                raise SignalError("a signal needs an id and a type")
            if not str(signal_id).isprintable() or len(str(signal_id)) > MAX_SIGNAL_ID:
                # ids are logged and are the state table's keys: no control characters, nothing that forges a line
                raise SignalError(f"its id must be printable text of at most {MAX_SIGNAL_ID} characters")
            if len(raw) > MAX_SIGNAL_BYTES:
                raise SignalError(f"its data is {len(raw)} bytes, more than {MAX_SIGNAL_BYTES}")
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise SignalError(f"its data is not JSON ({exc})") from None
            if not isinstance(data, dict):
                raise SignalError("its data must be a JSON object")
            self.signals_seen += 1
            if kind == "log":
                # the text is the signal writer's: escaped, so newlines and terminal codes cannot forge log lines
                log.info("signal %s (log): %s", signal_id, printable(data.get("message")))
            elif kind == "execute-snapshot":
                self._execute(str(signal_id), data, lsn)
            elif kind == "stop-snapshot":
                self._stop(str(signal_id), data)
            elif kind == "pause-snapshot":
                self._pause(True)
            elif kind == "resume-snapshot":
                self._pause(False)
            else:
                raise SignalError(f"unknown signal type {kind!r} (known: execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot, log)")
        except _SIGNAL_FAILURES as exc:
            # SignalError, data of unexpected shapes, or a table whose events cannot be built (a key column of a type
            # walflow cannot represent, message.key.columns naming a dropped column): the signal fails, read once
            self._fail_signal(signal_id, exc)

    def on_kafka_signal(self, partition: int, offset: int, values: dict[str, Any]) -> None:
        """A signal from the Kafka channel: handled as a signal-table row is, its offset saved with the progress (a
        batch that dies before saving reads it again, and :meth:`_known` recognises an execute-snapshot)."""
        if offset <= self.kafka_offsets.get(partition, -1):
            return
        self.kafka_offsets[partition] = offset
        self._kafka_read = True
        self.on_signal(values)

    def record_outcome(self, signal_id: str, outcome: dict[str, Any]) -> None:
        """A signal's final status, written by :meth:`save` (after the batch's records were acknowledged)."""
        self._outcomes[signal_id] = outcome
        self._dirty = True

    def kafka_read_up_to(self, read: dict[int, int]) -> None:
        """The last offsets read from the Kafka signal topic (messages passed over included), saved with the progress."""
        for partition, offset in read.items():
            if offset > self.kafka_offsets.get(partition, -1):
                self.kafka_offsets[partition] = offset
                self._kafka_read = True

    def reread(self, signal_id: str, table: str, reason: str) -> None:
        """Start (or queue) an incremental snapshot of one table that walflow asks for itself, as an
        execute-snapshot signal of that table's exact name would (read again after a restart, it is recognised).

        :raises SignalError: the snapshot cannot be taken (the table is gone, or its key cannot be read).
        """
        log.info("incremental snapshot %s: re-reading %s: %s", signal_id, printable(table), reason)
        try:
            self._execute(signal_id, {"type": "incremental", "data-collections": [re.escape(table)]})
        except _SIGNAL_FAILURES as exc:
            self._fail_signal(signal_id, exc)
            raise SignalError(str(exc)) from exc

    def _known(self, signal_id: str) -> bool:
        """Whether this execute-snapshot signal is already in the saved progress (running or queued) or finished.

        The saved progress is written before the slot advances, so a batch that dies in between reads the same
        signals again from the slot; they must not start a second snapshot. A signal whose batch died before the
        save is not in the progress and runs when it is read again.
        """
        progress = self.progress
        if progress is not None and (progress.signal_id == signal_id or any(q["signal_id"] == signal_id for q in progress.queued)):
            return True
        outcome = self.store.get(signal_key(signal_id)) or {}
        return outcome.get("status") in ("completed", "stopped")

    def _execute(self, signal_id: str, data: dict[str, Any], lsn: int | None = None, stops: list[dict[str, Any]] | None = None) -> None:
        """Start or queue the incremental snapshot an execute-snapshot signal asks for, after checking it; or keep it
        waiting when the queue is full.

        :param stops: stop-snapshot signals that arrived while it waited (:meth:`_stop_waiting`): their tables are
            left out, as they would have been taken out of the queue."""
        if self._known(signal_id):
            log.info("signal %s: already running, queued or finished (read again after a restart); ignored", signal_id)
            return
        if self.progress is not None and len(self.progress.queued) >= self.config.walflow_signal_queue_max:
            self._wait(signal_id, data, lsn)
            return
        kind = str(data.get("type", "incremental")).lower()
        if kind not in ("incremental", "blocking"):
            raise SignalError(f"snapshot type {kind!r} is not supported; walflow runs 'incremental' and 'blocking' snapshots")
        patterns = data.get("data-collections")
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise SignalError("'data-collections' must be a non-empty list of table names or regular expressions")
        oids = {f"{s}.{t}": oid for s, t, oid, *_ in list_tables(self.conn, self.filters)}
        # one bound for all of the signal's matches: a bound per match, times every pattern and table, is none
        budget = MatchBudget(SIGNAL_BUDGET_S, f"signal {signal_id!r}")
        try:
            compiled = compile_patterns(patterns, "'data-collections'")
            tables = [n for n in oids if matches_any(compiled, n, budget)]
        except PatternError as exc:
            raise SignalError(str(exc)) from None
        if not tables:
            raise SignalError(f"no captured table matches {patterns}")
        if kind == "blocking":
            for unsupported in ("additional-condition", "additional-conditions", "surrogate-key"):
                if data.get(unsupported):
                    raise SignalError(f"'{unsupported}' is not supported for blocking snapshots yet; send an incremental snapshot")
            # run by the stream batch once the signal's transaction is read (walflow.capture.stream): its status is
            # written when it completes, so a batch that dies before then reads the signal again and runs it again
            self.blocking.append((signal_id, tables))
            log.info("signal %s: blocking snapshot of %s; streaming pauses while it runs", signal_id, printable(tables))
            return
        stopped_by = None
        for stop in stops or []:
            try:
                dropped = compile_patterns(stop.get("data-collections") or [], "'data-collections' of stop-snapshot")
                left = [t for t in tables if not matches_any(dropped, t, budget)]
            except PatternError as exc:
                raise SignalError(str(exc)) from None
            if len(left) < len(tables):
                tables, stopped_by = left, str(stop.get("by"))
        if not tables:
            self.store.put(signal_key(signal_id), {"status": "stopped", "by": stopped_by, "rows": 0, "chunks": 0, "at_ms": now_ms()})
            log.info("signal %s: stopped while it waited, by %s", signal_id, stopped_by)
            return
        conditions: dict[str, str] = {}
        try:
            if isinstance(data.get("additional-condition"), str) and data["additional-condition"].strip():
                condition = check_condition(data["additional-condition"])
                conditions = {t: condition for t in tables}
            for item in data.get("additional-conditions") or []:
                if not isinstance(item, dict) or not isinstance(item.get("filter"), str):
                    raise SignalError("'additional-conditions' entries need 'data-collection' and 'filter'")
                pattern = Pattern(str(item.get("data-collection", ".*")), "'additional-conditions' 'data-collection'")
                condition = check_condition(item["filter"], "'additional-conditions' 'filter'")
                for t in tables:
                    if pattern.fullmatch(t, budget):
                        conditions[t] = condition
        except (PatternError, ExpressionError) as exc:
            raise SignalError(str(exc)) from None
        surrogate = data.get("surrogate-key")
        if surrogate is not None and not isinstance(surrogate, str):
            raise SignalError("'surrogate-key' must be a column name")
        surrogate = surrogate or None
        for name in tables:
            self.reader.check(name, oids[name], conditions.get(name), surrogate)
        if self.progress is not None:
            # Queued as a snapshot of its own: merging it into the running one would lose its condition (the
            # same table with another condition, as each backfill run sends) and leave its status unfinished.
            self.progress.queued.append(
                {"signal_id": signal_id, "tables": tables, "condition": conditions, "surrogate_key": surrogate, "stopped_by": stopped_by}
            )
            status = "queued"
            log.info("signal %s: incremental snapshot of %s queued behind %s", signal_id, printable(tables), self.progress.signal_id)
        else:
            self.progress = SnapshotProgress(signal_id, tables, conditions, surrogate, stopped_by=stopped_by)
            self._tables.clear()
            self._notify(self.progress, "STARTED", {"data_collections": ",".join(tables)})
            status = "running"
            log.info("signal %s: incremental snapshot of %s%s", signal_id, printable(tables), printable(f" where {conditions}") if conditions else "")
        self.store.put(signal_key(signal_id), {"status": status, "tables_left": tables, "rows": 0, "chunks": 0, "at_ms": now_ms()})
        self._dirty = True

    def _wait(self, signal_id: str, data: dict[str, Any], lsn: int | None) -> None:
        """Keep an execute-snapshot signal that finds the queue full in the state table, status ``waiting``, until a
        snapshot ends and makes room (:meth:`_promote`): one ``INSERT ... SELECT`` of thousands of signals then costs
        the batch a row each, never thousands of snapshots queued at once. It is checked when it is queued."""
        at = now_ms()
        # "order": arrival order (the signal's position in the WAL, then the time), which find() sorts by
        self.store.put(signal_key(signal_id), {"status": "waiting", "data": data, "order": f"{lsn or 0:020d}:{at:015d}", "at_ms": at})
        self._waiting += 1
        self._dirty = True
        log.info(
            "signal %s waits: %d incremental snapshot(s) are queued, as many as walflow.signal.queue.max allows; it is "
            "queued when one of them ends (%d signal(s) wait)",
            signal_id,
            self.config.walflow_signal_queue_max,
            self._waiting,
        )

    def _promote(self) -> None:
        """Queue waiting signals (:meth:`_wait`), oldest first, while the queue has room; each is checked now, and
        one that fails its checks fails as it would have on arrival."""
        limit = self.config.walflow_signal_queue_max
        while self._waiting > 0:
            room = limit - len(self.progress.queued) if self.progress is not None else limit + 1
            if room <= 0:
                break
            waiting = self.store.find("signal:", "waiting", room)
            if not waiting:
                self._waiting = 0
                break
            for key, value in waiting:
                signal_id = key.removeprefix("signal:")
                self._waiting -= 1
                try:
                    self._execute(signal_id, value.get("data") or {}, stops=value.get("stops") or [])
                except _SIGNAL_FAILURES as exc:
                    self._fail_signal(signal_id, exc)
        self._waiting = max(self._waiting, 0)

    def _fail_signal(self, signal_id: Any, exc: BaseException) -> None:
        """A signal that cannot be acted on: logged (escaped) and recorded as failed; the stream goes on."""
        log.warning("signal %r skipped: %s", signal_id, printable(exc))
        if signal_id:
            self.store.put(signal_key(str(signal_id)), {"status": "failed", "error": str(exc), "at_ms": now_ms()})

    def _stop(self, signal_id: str, data: dict[str, Any]) -> None:
        """Drop the named tables (every table without ``data-collections``) from the running and the queued
        snapshots; a snapshot that lost a table ends ``stopped``."""
        patterns = data.get("data-collections")
        if patterns is not None and (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)):
            raise SignalError("'data-collections' of stop-snapshot must be a list of table names or regular expressions")
        budget = MatchBudget(SIGNAL_BUDGET_S, f"signal {signal_id!r}")
        try:
            compiled = compile_patterns(patterns or [], "'data-collections' of stop-snapshot")
            # matched now, so a runaway pattern fails this signal rather than a later chunk
            names = set(self.progress.tables) if self.progress is not None else set()
            for entry in self.progress.queued if self.progress is not None else []:
                names.update(entry["tables"])
            names.update(c.table.name for c in self.chunks.values())
            hits = {t for t in names if not compiled or matches_any(compiled, t, budget)}
        except PatternError as exc:
            raise SignalError(str(exc)) from None
        if self._waiting:
            self._stop_waiting(signal_id, patterns)
        progress = self.progress
        if progress is None:
            log.info("signal %s: no incremental snapshot is running", signal_id)
            return

        def stopped(table: str) -> bool:
            return table in hits

        kept = []
        for entry in progress.queued:
            left = [t for t in entry["tables"] if not stopped(t)]
            if left and len(left) < len(entry["tables"]):
                entry["stopped_by"] = signal_id
            entry["tables"] = left
            if left:
                kept.append(entry)
            else:
                self._outcomes[entry["signal_id"]] = {"status": "stopped", "by": signal_id, "rows": 0, "chunks": 0, "at_ms": now_ms()}
                log.info("signal %s: stopped queued incremental snapshot %s", signal_id, entry["signal_id"])
        progress.queued = kept
        self._dirty = True
        if progress.ended:
            return
        current = progress.tables[0] if progress.tables else None
        left = [t for t in progress.tables if not stopped(t)]
        dropped = [c.id for c in self.chunks.values() if stopped(c.table.name)]
        if len(left) == len(progress.tables) and not dropped:
            return
        progress.tables = left
        for chunk_id in dropped:
            del self.chunks[chunk_id]
        self.window_tables = {c.table.name for c in self.chunks.values() if c.watched}
        progress.stopped_by = signal_id
        if current is not None and (not left or left[0] != current):
            # the cursor belonged to the table just dropped
            progress.last_key = progress.max_key = progress.last_ctid = None
            progress.null_phase = False
        self._notify(progress, "ABORTED", {"data_collections": ",".join(sorted(hits))} if patterns else {})
        if not left and not self.chunks:
            progress.ended = True
            self._outcomes[progress.signal_id] = {"status": "stopped", "by": signal_id, "rows": progress.rows, "chunks": progress.chunks, "at_ms": now_ms()}
        log.info("signal %s: stopped incremental snapshot %s for %s", signal_id, progress.signal_id, patterns or "every table")

    def _stop_waiting(self, signal_id: str, patterns: list[str] | None) -> None:
        """A stop-snapshot reaches the signals that wait too: without ``data-collections`` they end ``stopped``;
        with it, each waiting signal notes the stop, and its tables that match are left out when it is queued
        (:meth:`_execute`). Read a page at a time: waiting signals are never all held in memory."""
        after = ("", "")
        while page := self.store.find("signal:", "waiting", 200, after):
            for key, value in page:
                if patterns:
                    value["stops"] = [*(value.get("stops") or []), {"by": signal_id, "data-collections": patterns}]
                    self.store.put(key, value)
                else:
                    self.store.put(key, {"status": "stopped", "by": signal_id, "rows": 0, "chunks": 0, "at_ms": now_ms()})
                    self._waiting -= 1
            after = (str(page[-1][1].get("order") or ""), page[-1][0])
        self._waiting = max(self._waiting, 0)
        self._dirty = True

    def _pause(self, paused: bool) -> None:
        if self.progress is None:
            return
        self._notify(self.progress, "PAUSED" if paused else "RESUMED", {"data_collections": ",".join(self.progress.tables)})
        self.progress.paused = paused
        self._dirty = True
        log.info("incremental snapshot %s %s", self.progress.signal_id, "paused" if paused else "resumed")

    # -- chunks -----------------------------------------------------------------------------------
    def _table(self, name: str) -> SnapshotTable | None:
        """The current signal's plan of one table (cached for the signal: another signal may have another
        condition or surrogate key for it)."""
        if name in self._tables:
            return self._tables[name]
        progress = self.progress
        planned = self.reader.plan(name, progress.condition.get(name) if progress else None, progress.surrogate_key if progress else None)
        if planned is not None:
            self._tables[name] = planned
        return planned

    def _watermark(self, chunk_id: str, kind: str) -> str:
        return orjson.dumps({"connector": self.config.name, "chunk": chunk_id, "kind": kind}).decode()

    def _emit_watermark(self, chunk_id: str, kind: str) -> None:
        self.conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (WATERMARK_PREFIX, self._watermark(chunk_id, kind)))

    def prepare(self, max_rows: int, max_bytes: int | None = None) -> int:
        """Select chunks (each between its low and high watermark) for up to ``max_rows`` rows, and while the rows
        held take less than about ``max_bytes`` in memory; return the count.

        Chunks of one signal only: a finished signal hands over to the next queued one in :meth:`save`. A table
        whose condition or key fails on the server fails its signal (recorded, its chunks dropped) and the
        stream goes on; only a lost connection propagates.
        """
        selected = held = 0
        try:
            while self.active and selected < max_rows and (max_bytes is None or held < max_bytes):
                progress = self.progress
                assert progress is not None
                name = progress.tables[0]
                try:
                    count, size = self._prepare_chunk(progress, name)
                    selected += count
                    held += size
                except (SignalError, SourceError, ConfigError, ConversionError, psycopg.Error) as exc:
                    if isinstance(exc, psycopg.Error) and (self.conn.closed or self.conn.broken):
                        raise
                    self._fail(progress, name, exc)
        finally:
            if self.chunks and not self.config.read_only and not (self.conn.closed or self.conn.broken):
                # logical decoding reads only flushed WAL (and the batch streams up to the flushed end), and the
                # chunks' watermarks are written without waiting for it: one transactional message whose commit
                # waits for the local flush, whatever synchronous_commit the database sets, makes them readable (a
                # crash before it loses nothing: a chunk whose high watermark never shows is selected again by the
                # next batch). Also after a chunk that found no rows: its high watermark must be read for the table
                # to count as done.
                with self.conn.transaction():
                    self.conn.execute("SET LOCAL synchronous_commit TO local")
                    self._emit_watermark("", "flush")
        return selected

    def _fail(self, progress: SnapshotProgress, name: str, exc: BaseException) -> None:
        self._table_done(progress, name, "SQL_EXCEPTION")
        error = self.reader.describe(exc)
        log.warning(
            "incremental snapshot %s failed on %s: %s; its remaining tables %s are dropped and streaming continues",
            progress.signal_id,
            name,
            error,
            progress.tables,
        )
        self._outcomes[progress.signal_id] = {
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
        self._dirty = True

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
            self._table_done(progress, name, "UNKNOWN_SCHEMA" if table is None else "NO_PRIMARY_KEY")
            self._next_table()
            return 0, 0
        cursor = (name, progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid)
        if progress.max_key is None and not progress.null_phase:
            max_key = self.reader.max_key(table)
            if max_key is None:
                if not progress.surrogate_key:
                    log.info("incremental snapshot %s: %s is empty", progress.signal_id, name)
                    self._table_done(progress, name, "EMPTY")
                    self._next_table()
                    return 0, 0
                progress.null_phase = True
            progress.max_key = max_key
        chunk_id = uuid.uuid4().hex
        saved = (progress.last_key, progress.null_phase, progress.last_ctid)
        hook = self._chunk_hook
        try:
            rows, table_done, ctids, unseen, wal_end = self.reader.read_chunk(
                table, progress, WATERMARK_PREFIX, self._watermark(chunk_id, "low"), self._watermark(chunk_id, "high"),
                inside=None if hook is None else (lambda read: hook(name, read)), read_only=self.config.read_only,
            )  # fmt: skip
        except BaseException:
            # the cursor must not skip rows that were never buffered
            progress.last_key, progress.null_phase, progress.last_ctid = saved
            raise
        fields = dedupe_fields(table, progress.surrogate_key)
        primary = {table.schema.column_names.index(k) for k in table.catalog.primary_key}
        unique = not progress.surrogate_key and bool(primary) and {f.index for f in fields} == primary
        # rows without a key value (ctids): only their physical position tells them apart
        self.chunks[chunk_id] = Chunk(chunk_id, table, rows, fields, cursor, unique=unique, ctids=ctids, unseen=unseen, close_at=wal_end)
        self.window_tables.add(name)  # watched from now on (Chunk.unseen), not only once its window opens
        progress.chunks += 1
        self._dirty = True
        self._scanned += len(rows)
        if rows:
            self._notify(progress, "IN_PROGRESS", {
                "data_collections": ",".join(progress.tables), "current_collection_in_progress": name,
                "maximum_key": ",".join(str(k) for k in progress.max_key) if progress.max_key else '"<null>"',
                "last_processed_key": ",".join(str(k) for k in progress.last_key) if progress.last_key else "<null>",
            })  # fmt: skip
        if table_done:
            self._table_done(progress, name, "SUCCEEDED")
            self._next_table()
        return len(rows), rows_size(rows)

    def _notify(self, progress: SnapshotProgress, kind: str, data: dict[str, str]) -> None:
        self.notifier.notify(INCREMENTAL, kind, data, notification_id=progress.signal_id)

    def _table_done(self, progress: SnapshotProgress, name: str, status: str) -> None:
        """Debezium's TABLE_SCAN_COMPLETED of the current table; the rows read count again from the next table."""
        self._notify(progress, "TABLE_SCAN_COMPLETED", {
            "data_collections": ",".join(progress.tables), "scanned_collection": name, "total_rows_scanned": str(self._scanned),
            "status": status,
        })  # fmt: skip
        self._scanned = 0

    def _next_table(self) -> None:
        progress = self.progress
        assert progress is not None
        progress.tables.pop(0)
        progress.last_key = progress.max_key = progress.last_ctid = None
        progress.null_phase = False
        self._dirty = True
        if not progress.tables:
            self._notify(progress, "COMPLETED", {})

    # -- the stream side --------------------------------------------------------------------------
    def on_watermark(self, content: bytes, sequence: str, topics: dict[str, int]) -> None:
        """A watermark read at ``sequence`` (its ``source.sequence``): a low one opens its chunk's window, a high one
        emits the chunk's remaining rows."""
        try:
            mark = orjson.loads(content)
        except orjson.JSONDecodeError:
            mark = None
        if not isinstance(mark, dict):
            # not one walflow wrote (another client used the prefix): nothing to act on, but worth a line
            log.warning("a logical decoding message with walflow's watermark prefix at %s is not a watermark: %s", sequence, printable(content[:200]))
            return
        if mark.get("connector") != self.config.name:
            return
        chunk = self.chunks.get(mark.get("chunk"))
        if chunk is None:
            return  # a watermark of an earlier, abandoned batch
        if mark.get("kind") == "low":
            chunk.in_window = True
            self.window_tables.add(chunk.table.name)
            return
        self._close(chunk, sequence, topics)

    @property
    def next_close(self) -> int | None:
        """Read-only windows: the lowest WAL position at which a chunk's rows are due (:attr:`Chunk.close_at`)."""
        due = [c.close_at for c in self.chunks.values() if c.close_at is not None]
        return min(due) if due else None

    @property
    def wal_needed(self) -> int | None:
        """Read-only windows: how far the WAL must reach for this round to emit every chunk it selected."""
        due = [c.close_at for c in self.chunks.values() if c.close_at is not None]
        return max(due) if due else None

    def on_position(self, lsn: int, sequence: str, topics: dict[str, int]) -> None:
        """Read-only windows: the stream reached ``lsn`` (a commit at or after it, or the end of what the batch
        reads): the chunks due there close, in the order they were selected, at ``sequence``."""
        for chunk in list(self.chunks.values()):
            if chunk.close_at is not None and chunk.close_at <= lsn and chunk.id in self.chunks:
                self._close(chunk, sequence, topics)

    def _close(self, chunk: Chunk, sequence: str, topics: dict[str, int]) -> None:
        """Emit a chunk's rows that no streamed change made stale, and stop watching it."""
        try:
            self._emit_chunk(chunk, sequence, topics)
        except RecordTooLargeError as exc:
            # one row Kafka cannot take fails its snapshot (recorded with the fix), never the stream
            assert self.progress is not None
            self._fail(self.progress, chunk.table.name, exc)
            return
        del self.chunks[chunk.id]
        self.window_tables = {c.table.name for c in self.chunks.values() if c.watched}

    def watches(self, table_name: str, xid: int | None) -> bool:
        """Whether a change of ``table_name`` by transaction ``xid`` can make a buffered row stale (before its rows
        are converted for :meth:`on_change`)."""
        return any(chunk.table.name == table_name and chunk.stale_by(xid) for chunk in self.chunks.values())

    def on_change(self, table_name: str, *rows: dict[str, Any] | None, xid: int | None = None) -> None:
        """A streamed change of transaction ``xid`` inside a window, or of a transaction the chunk's SELECT did not
        see (:attr:`Chunk.unseen`): buffered rows with the same key (old or new) are stale."""
        for chunk in self.chunks.values():
            if chunk.table.name == table_name and chunk.stale_by(xid):
                for row in rows:
                    if row is not None and (identity := orjson.dumps([row.get(f.name) for f in chunk.dedupe])) in chunk.identities():
                        chunk.stale.add(identity)

    def _emit_chunk(self, chunk: Chunk, sequence: str, topics: dict[str, int]) -> None:
        """The chunk's rows as Debezium emits them when its window closes: ``snapshot: incremental``, the
        position of the high watermark in ``sequence``, no ``txId`` or ``lsn``, the time of reading in ``ts_*``.
        Values are assembled around one serialisation of each row, as the initial snapshot's are."""
        progress = self.progress
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
        self.rows_dropped += dropped
        sent_before = self.producer.sent
        try:
            self.producer.send_all(table.topic, rows, encode, headers)
        except RecordTooLargeError as exc:
            current = rows[self.producer.sent - sent_before]  # the rows before it were queued
            after = table.row(current)
            key_fields = table.key(after, current) if table.has_key else None
            raise too_large(
                exc, table=table.data_collection, key=key_fields, lsn=None, row=after,
                what=f"Its incremental snapshot failed at the chunk closed by the watermark at {sequence} "
                "(streaming goes on); send the signal again after the fix",
            ) from None
        count = len(rows)
        topics[table.topic] = topics.get(table.topic, 0) + count
        self.rows_emitted += count
        if progress is not None:
            progress.rows += count
            progress.rows_per_table[chunk.table.name] = progress.rows_per_table.get(chunk.table.name, 0) + count
            self._dirty = True

    def abandon(self) -> None:
        """Chunks whose high watermark this batch did not reach: move the cursor back to the first of them,
        so the next batch selects them again (their rows were not emitted)."""
        if self.chunks and self.progress is not None and not self.progress.ended:
            first = next(iter(self.chunks.values()))
            name, last_key, max_key, null_phase, last_ctid = first.cursor_before
            progress = self.progress
            if not progress.tables or progress.tables[0] != name:
                progress.tables.insert(0, name)  # its last chunk had moved the cursor to the next table
            progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid = last_key, max_key, null_phase, last_ctid
            progress.chunks -= len(self.chunks)
            log.info("incremental snapshot: %d chunk(s) of %s left for the next batch", len(self.chunks), name)
        self.chunks.clear()
        self.window_tables.clear()


