"""Signals: what each signal type does to the incremental snapshots, from the signal table or the Kafka channel.

A signal is a row inserted into the signal table (``signal.data.collection``: columns ``id``, ``type``, ``data``);
the stream reads it from the WAL like any change, so signals are ordered with the data. ``execute-snapshot`` starts
or queues a snapshot (a ``blocking`` one is run by the stream batch), ``stop-snapshot``, ``pause-snapshot`` and
``resume-snapshot`` act on the running and queued ones, ``log`` writes a line. A condition or surrogate key that does
not work fails its signal, never the stream: it is tried when the signal arrives and again per table while the
chunks are read.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
import psycopg

from walflow.capture.incremental.chunks import ChunkReader
from walflow.capture.incremental.progress import QueuedSignal, SnapshotProgress
from walflow.capture.incremental.queue import SnapshotQueue
from walflow.capture.incremental.state import KAFKA_SIGNALS_KEY, SnapshotState
from walflow.config.expressions import check_condition
from walflow.config.filters import Filters
from walflow.config.patterns import SIGNAL_BUDGET_S, MatchBudget, Pattern, compile_patterns, matches_any
from walflow.errors import ConfigError, ConversionError, ExpressionError, PatternError
from walflow.records.events import now_ms
from walflow.source.lsn import Lsn
from walflow.source.publication import list_tables
from walflow.source.signals import MAX_SIGNAL_BYTES, MAX_SIGNAL_ID, SignalError, printable, signal_key

log = logging.getLogger("walflow.capture.incremental")

#: what fails a signal rather than the stream (SignalError is a ValueError)
SIGNAL_FAILURES = (ValueError, TypeError, ConfigError, ConversionError)
#: signal types whose second application would differ from the first (they act on whatever snapshot is current)
_REPEAT_SENSITIVE = frozenset({"stop-snapshot", "pause-snapshot", "resume-snapshot"})


class SignalActions:
    """Acts on signals (see the module's docstring)."""

    def __init__(
        self,
        state: SnapshotState,
        queue: SnapshotQueue,
        reader: ChunkReader,
        filters: Filters,
        catalog_conn: psycopg.Connection,
    ) -> None:
        self.state = state
        self.queue = queue
        self.reader = reader
        self.filters = filters
        self.config = state.config
        self.conn = catalog_conn
        #: the Kafka signal channel: per partition, the offset of the last message taken (saved with the progress)
        self.kafka_offsets: dict[int, int] = {
            int(p): int(o) for p, o in (state.store.get(KAFKA_SIGNALS_KEY) or {}).items()
        }
        self._kafka_read = False

    def save_kafka_offsets(self) -> None:
        """The Kafka channel's offsets, saved after the progress (a batch that dies in between reads the Kafka
        signals again, and :meth:`SnapshotQueue.known` recognises them)."""
        if self._kafka_read:
            self.state.store.put(KAFKA_SIGNALS_KEY, {str(p): o for p, o in self.kafka_offsets.items()})
            self._kafka_read = False

    def start_waiting(self, signal_id: str, data: dict[str, Any], stops: list[Any]) -> None:
        """A waiting signal, queued now that there is room: checked now, and failed as it would have on arrival."""
        try:
            self.execute(signal_id, data, stops=stops)
        except SIGNAL_FAILURES as exc:
            self.fail_signal(signal_id, exc)

    def on_signal(self, values: dict[str, Any], lsn: int | None = None) -> None:
        """Handle one signal row (id, type, data) read from the slot at ``lsn``. Malformed signals are logged and
        skipped; a signal a previous batch already applied (read again after that batch died) is ignored."""
        signal_id = values.get("id")
        if lsn is not None:
            if lsn <= self.state.signals_upto:
                log.info(
                    "signal %r at %s was applied by an earlier batch (read again after a restart); ignored",
                    signal_id,
                    Lsn(lsn),
                )
                return
            if values.get("type") in _REPEAT_SENSITIVE:
                # only these act differently when applied twice (an execute-snapshot read again is recognised by
                # SnapshotQueue.known, a log line or a failure twice does no harm); recording just them keeps the state
                # table's writes, which the next batch decodes too, to the batches that need one
                self.state.signals_read = max(self.state.signals_read, lsn)
                self.state.dirty = True
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
            self.state.signals_seen += 1
            if kind == "log":
                # the text is the signal writer's: escaped, so newlines and terminal codes cannot forge log lines
                log.info("signal %s (log): %s", signal_id, printable(data.get("message")))
            elif kind == "execute-snapshot":
                self.execute(str(signal_id), data, lsn)
            elif kind == "stop-snapshot":
                self.stop(str(signal_id), data)
            elif kind == "pause-snapshot":
                self.pause(True)
            elif kind == "resume-snapshot":
                self.pause(False)
            else:
                raise SignalError(
                    f"unknown signal type {kind!r} "
                    "(known: execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot, log)"
                )
        except SIGNAL_FAILURES as exc:
            # SignalError, data of unexpected shapes, or a table whose events cannot be built (a key column of a type
            # walflow cannot represent, message.key.columns naming a dropped column): the signal fails, read once
            self.fail_signal(signal_id, exc)

    def on_kafka_signal(self, partition: int, offset: int, values: dict[str, Any]) -> None:
        """A signal from the Kafka channel: handled as a signal-table row is, its offset saved with the progress (a
        batch that dies before saving reads it again, and :meth:`SnapshotQueue.known` recognises an
        execute-snapshot)."""
        if offset <= self.kafka_offsets.get(partition, -1):
            return
        self.kafka_offsets[partition] = offset
        self._kafka_read = True
        self.on_signal(values)

    def kafka_read_up_to(self, read: dict[int, int]) -> None:
        """The last offsets read from the Kafka signal topic (messages passed over included), saved with the
        progress."""
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
            self.execute(signal_id, {"type": "incremental", "data-collections": [re.escape(table)]})
        except SIGNAL_FAILURES as exc:
            self.fail_signal(signal_id, exc)
            raise SignalError(str(exc)) from exc

    def execute(
        self, signal_id: str, data: dict[str, Any], lsn: int | None = None, stops: list[dict[str, Any]] | None = None
    ) -> None:
        """Start or queue the incremental snapshot an execute-snapshot signal asks for, after checking it; or keep it
        waiting when the queue is full.

        :param stops: stop-snapshot signals that arrived while it waited (:meth:`SnapshotQueue.stop_waiting`): their
            tables are left out, as they would have been taken out of the queue."""
        if self.queue.known(signal_id):
            log.info("signal %s: already running, queued or finished (read again after a restart); ignored", signal_id)
            return
        if self.state.progress is not None and len(self.state.progress.queued) >= self.config.walflow_signal_queue_max:
            self.queue.wait(signal_id, data, lsn)
            return
        kind = str(data.get("type", "incremental")).lower()
        if kind not in ("incremental", "blocking"):
            raise SignalError(
                f"snapshot type {kind!r} is not supported; walflow runs 'incremental' and 'blocking' snapshots"
            )
        # one bound for all of the signal's matches: a bound per match, times every pattern and table, is none
        budget = MatchBudget(SIGNAL_BUDGET_S, f"signal {signal_id!r}")
        oids = self._matched_tables(data, budget)
        tables = list(oids)
        if kind == "blocking":
            self._blocking(signal_id, data, tables)
            return
        tables, stopped_by = self._after_stops(tables, stops or [], budget)
        if not tables:
            self.state.store.put(
                signal_key(signal_id),
                {"status": "stopped", "by": stopped_by, "rows": 0, "chunks": 0, "at_ms": now_ms()},
            )
            log.info("signal %s: stopped while it waited, by %s", signal_id, stopped_by)
            return
        conditions = self._conditions(data, tables, budget)
        surrogate = data.get("surrogate-key")
        if surrogate is not None and not isinstance(surrogate, str):
            raise SignalError("'surrogate-key' must be a column name")
        surrogate = surrogate or None
        for name in tables:
            self.reader.check(name, oids[name], conditions.get(name), surrogate)
        self._start_or_queue(QueuedSignal(signal_id, tables, conditions, surrogate, stopped_by))

    def _matched_tables(self, data: dict[str, Any], budget: MatchBudget) -> dict[str, int]:
        """The captured tables the signal's ``data-collections`` match, with their OIDs, in the catalog's order."""
        patterns = data.get("data-collections")
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise SignalError("'data-collections' must be a non-empty list of table names or regular expressions")
        oids = {f"{s}.{t}": oid for s, t, oid, *_ in list_tables(self.conn, self.filters)}
        try:
            compiled = compile_patterns(patterns, "'data-collections'")
            tables = {n: oid for n, oid in oids.items() if matches_any(compiled, n, budget)}
        except PatternError as exc:
            raise SignalError(str(exc)) from None
        if not tables:
            raise SignalError(f"no captured table matches {patterns}")
        return tables

    def _blocking(self, signal_id: str, data: dict[str, Any], tables: list[str]) -> None:
        """A blocking snapshot of ``tables``, run by the stream batch once the signal's transaction is read
        (:mod:`walflow.capture.stream.snapshots`): its status is written when it completes, so a batch that dies
        before then reads the signal again and runs it again."""
        for unsupported in ("additional-condition", "additional-conditions", "surrogate-key"):
            if data.get(unsupported):
                raise SignalError(
                    f"'{unsupported}' is not supported for blocking snapshots yet; send an incremental snapshot"
                )
        self.state.blocking.append((signal_id, tables))
        log.info("signal %s: blocking snapshot of %s; streaming pauses while it runs", signal_id, printable(tables))

    @staticmethod
    def _after_stops(
        tables: list[str], stops: list[dict[str, Any]], budget: MatchBudget
    ) -> tuple[list[str], str | None]:
        """The tables left once the stop-snapshot signals that reached the signal while it waited took theirs out,
        and the last stop that took one."""
        stopped_by = None
        for stop in stops:
            try:
                dropped = compile_patterns(stop.get("data-collections") or [], "'data-collections' of stop-snapshot")
                left = [t for t in tables if not matches_any(dropped, t, budget)]
            except PatternError as exc:
                raise SignalError(str(exc)) from None
            if len(left) < len(tables):
                tables, stopped_by = left, str(stop.get("by"))
        return tables, stopped_by

    @staticmethod
    def _conditions(data: dict[str, Any], tables: list[str], budget: MatchBudget) -> dict[str, str]:
        """Each table's ``additional-condition`` (one for all, or per ``additional-conditions`` entry), checked."""
        conditions: dict[str, str] = {}
        try:
            if isinstance(data.get("additional-condition"), str) and data["additional-condition"].strip():
                condition = check_condition(data["additional-condition"])
                conditions = dict.fromkeys(tables, condition)
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
        return conditions

    def _start_or_queue(self, signal: QueuedSignal) -> None:
        """The checked signal's snapshot: started when none runs, else queued behind the running one."""
        signal_id, tables, conditions = signal.signal_id, signal.tables, signal.condition
        if self.state.progress is not None:
            # Queued as a snapshot of its own: merging it into the running one would lose its condition (the
            # same table with another condition, as each backfill run sends) and leave its status unfinished.
            self.state.progress.queued.append(signal)
            status = "queued"
            log.info(
                "signal %s: incremental snapshot of %s queued behind %s",
                signal_id,
                printable(tables),
                self.state.progress.signal_id,
            )
        else:
            self.state.progress = SnapshotProgress(
                signal_id, tables, conditions, signal.surrogate_key, stopped_by=signal.stopped_by
            )
            self.state.tables.clear()
            self.state.notify(self.state.progress, "STARTED", {"data_collections": ",".join(tables)})
            status = "running"
            log.info(
                "signal %s: incremental snapshot of %s%s",
                signal_id,
                printable(tables),
                printable(f" where {conditions}") if conditions else "",
            )
        self.state.store.put(
            signal_key(signal_id), {"status": status, "tables_left": tables, "rows": 0, "chunks": 0, "at_ms": now_ms()}
        )
        self.state.dirty = True

    def fail_signal(self, signal_id: Any, exc: BaseException) -> None:
        """A signal that cannot be acted on: logged (escaped) and recorded as failed; the stream goes on."""
        log.warning("signal %r skipped: %s", signal_id, printable(exc))
        if signal_id:
            self.state.store.put(signal_key(str(signal_id)), {"status": "failed", "error": str(exc), "at_ms": now_ms()})

    def stop(self, signal_id: str, data: dict[str, Any]) -> None:
        """Drop the named tables (every table without ``data-collections``) from the running and the queued
        snapshots; a snapshot that lost a table ends ``stopped``."""
        patterns = data.get("data-collections")
        if patterns is not None and (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)):
            raise SignalError(
                "'data-collections' of stop-snapshot must be a list of table names or regular expressions"
            )
        budget = MatchBudget(SIGNAL_BUDGET_S, f"signal {signal_id!r}")
        try:
            compiled = compile_patterns(patterns or [], "'data-collections' of stop-snapshot")
            # matched now, so a runaway pattern fails this signal rather than a later chunk
            names = set(self.state.progress.tables) if self.state.progress is not None else set()
            for entry in self.state.progress.queued if self.state.progress is not None else []:
                names.update(entry.tables)
            names.update(c.table.name for c in self.state.chunks.values())
            hits = {t for t in names if not compiled or matches_any(compiled, t, budget)}
        except PatternError as exc:
            raise SignalError(str(exc)) from None
        if self.queue.waiting:
            self.queue.stop_waiting(signal_id, patterns)
        progress = self.state.progress
        if progress is None:
            log.info("signal %s: no incremental snapshot is running", signal_id)
            return

        def stopped(table: str) -> bool:
            return table in hits

        kept = []
        for entry in progress.queued:
            left = [t for t in entry.tables if not stopped(t)]
            if left and len(left) < len(entry.tables):
                entry.stopped_by = signal_id
            entry.tables = left
            if left:
                kept.append(entry)
            else:
                self.state.outcomes[entry.signal_id] = {
                    "status": "stopped",
                    "by": signal_id,
                    "rows": 0,
                    "chunks": 0,
                    "at_ms": now_ms(),
                }
                log.info("signal %s: stopped queued incremental snapshot %s", signal_id, entry.signal_id)
        progress.queued = kept
        self.state.dirty = True
        if progress.ended:
            return
        current = progress.tables[0] if progress.tables else None
        left = [t for t in progress.tables if not stopped(t)]
        dropped = [c.id for c in self.state.chunks.values() if stopped(c.table.name)]
        if len(left) == len(progress.tables) and not dropped:
            return
        progress.tables = left
        for chunk_id in dropped:
            del self.state.chunks[chunk_id]
        self.state.refresh_windows()
        progress.stopped_by = signal_id
        if current is not None and (not left or left[0] != current):
            # the cursor belonged to the table just dropped
            progress.last_key = progress.max_key = progress.last_ctid = None
            progress.null_phase = False
        self.state.notify(progress, "ABORTED", {"data_collections": ",".join(sorted(hits))} if patterns else {})
        if not left and not self.state.chunks:
            progress.ended = True
            self.state.outcomes[progress.signal_id] = {
                "status": "stopped",
                "by": signal_id,
                "rows": progress.rows,
                "chunks": progress.chunks,
                "at_ms": now_ms(),
            }
        log.info(
            "signal %s: stopped incremental snapshot %s for %s",
            signal_id,
            progress.signal_id,
            patterns or "every table",
        )

    def pause(self, paused: bool) -> None:
        if self.state.progress is None:
            return
        self.state.notify(
            self.state.progress,
            "PAUSED" if paused else "RESUMED",
            {"data_collections": ",".join(self.state.progress.tables)},
        )
        self.state.progress.paused = paused
        self.state.dirty = True
        log.info("incremental snapshot %s %s", self.state.progress.signal_id, "paused" if paused else "resumed")
