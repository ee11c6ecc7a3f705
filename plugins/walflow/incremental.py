"""Incremental snapshots (DBLog watermark windows) and signals, executed by the stream task.

A signal is a row inserted into the signal table (``signal.data.collection``: columns ``id``, ``type``,
``data``); the stream reads it from the WAL like any change, so signals are ordered with the data.

Per chunk, the stream task writes a low watermark, selects the next ``incremental.snapshot.chunk.size`` rows
by key (keyset: ``(key) > (last key) AND (key) <= (max key)``), and writes a high watermark. While it then
streams the WAL, every change of that table between the two watermarks removes the buffered row with the same
key (both keys for a key change): the streamed event is newer. At the high watermark the rows left are
emitted as ``op: r`` events with ``source.snapshot = incremental``.

Watermarks are ``pg_logical_emit_message(true, 'walflow.watermark', ...)`` messages rather than signal-table
rows: they need no table writes (nothing to clean up, no INSERT grant), are transactional so they sit at
their commit position in the stream, and carry the connector's name so several connectors on one database
ignore each other's. They need PostgreSQL 14 or newer (pgoutput's ``messages`` option).

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
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql

from walflow.catalog import Catalog
from walflow.config import ConnectorConfig
from walflow.envelope import EventFormat
from walflow.errors import ExpressionError, PatternError, RecordTooLargeError, SourceError
from walflow.events import Filters, Serializer, TableSchema, now_ms
from walflow.expressions import check_condition
from walflow.kafka import EventProducer, too_large
from walflow.patterns import Pattern, compile_patterns, matches_any
from walflow.snapshot import SnapshotTable, _columns_sql, condition_sql, key_types
from walflow.source import list_tables, quote_table
from walflow.state import StateStore
from walflow.transforms import ColumnRules

log = logging.getLogger(__name__)

WATERMARK_PREFIX = "walflow.watermark"
STATE_KEY = "incremental"
#: state-table key of the position up to which signals have been applied (see IncrementalSnapshots.on_signal)
SIGNALS_KEY = "incremental_signals"
#: signal types whose second application would differ from the first (they act on whatever snapshot is current)
_REPEAT_SENSITIVE = frozenset({"stop-snapshot", "pause-snapshot", "resume-snapshot"})
MAX_SIGNAL_BYTES = 64 * 1024
MAX_SIGNAL_ID = 128


def signal_key(signal_id: str) -> str:
    return f"signal:{signal_id}"


@dataclass
class Chunk:
    """One selected chunk waiting for its high watermark."""

    id: str
    table: SnapshotTable
    rows: dict[bytes, list[Any]]  # dedupe key -> row values (text)
    dedupe: list[Any]  # FieldSpecs whose values identify a row (the event key, or the surrogate key)
    #: the selection cursor before this chunk: (table, last_key, max_key, null_phase, last_ctid)
    cursor_before: tuple[str, list[str] | None, list[str] | None, bool, str | None]
    in_window: bool = False


@dataclass
class SnapshotProgress:
    """The persisted state of the running incremental snapshot, and the signals queued behind it."""

    signal_id: str
    tables: list[str]  # still to do, the current one first
    condition: dict[str, str] = field(default_factory=dict)  # data collection -> additional condition
    surrogate_key: str | None = None
    last_key: list[str] | None = None
    max_key: list[str] | None = None
    null_phase: bool = False  # reading rows whose surrogate key is NULL, by ctid
    last_ctid: str | None = None
    paused: bool = False
    rows: int = 0
    chunks: int = 0
    rows_per_table: dict[str, int] = field(default_factory=dict)
    #: later execute-snapshot signals, in arrival order: {"signal_id", "tables", "condition", "surrogate_key"}
    queued: list[dict[str, Any]] = field(default_factory=list)
    #: set when the signal was stopped or failed: its outcome is recorded, it must not be resumed or completed
    ended: bool = False
    #: the stop-snapshot signal that dropped some of its tables: it ends "stopped", not "completed"
    stopped_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SignalError(ValueError):
    """A malformed signal: logged with its id and skipped, never stopping the stream."""


class IncrementalSnapshots:
    """Signals and incremental-snapshot chunks of one connector, driven by :class:`~walflow.stream.StreamBatch`."""

    def __init__(
        self,
        config: ConnectorConfig,
        store: StateStore,
        catalog_conn: psycopg.Connection,
        producer: EventProducer,
        serializer: Serializer,
        *,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.conn = catalog_conn
        self.producer = producer
        self.serializer = serializer
        self.fmt = EventFormat(config)
        self.filters = Filters(config)
        self.rules = ColumnRules(config)
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
        self._dirty = False
        #: LSN of the last signal whose effect a save recorded: signals at or below it are read again only after
        #: a batch died between its save and its slot advance, and must not act twice (a stop or pause read
        #: again would hit a snapshot that started after it)
        self._signals_upto = int((store.get(SIGNALS_KEY) or {}).get("lsn") or 0)
        self._signals_read = self._signals_upto

    # -- state ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.progress is not None and not self.progress.paused and bool(self.progress.tables)

    def save(self) -> None:
        """Persist progress and each signal's outcome; called once the batch's records were acknowledged and
        before the slot advances past the signals and watermarks it read (a crash in between reads them again,
        which :meth:`_known` and the empty chunk table make harmless). A finished signal makes the next queued
        one current."""
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
        if progress is None:
            self.store.delete(STATE_KEY)
        else:
            self.store.put(STATE_KEY, progress.as_dict())
            self.store.put(
                signal_key(progress.signal_id),
                {"status": "paused" if progress.paused else "running", "tables_left": progress.tables, "rows": progress.rows, "chunks": progress.chunks, "at_ms": now_ms()},
            )
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
                self._execute(str(signal_id), data)
            elif kind == "stop-snapshot":
                self._stop(str(signal_id), data)
            elif kind == "pause-snapshot":
                self._pause(True)
            elif kind == "resume-snapshot":
                self._pause(False)
            else:
                raise SignalError(f"unknown signal type {kind!r} (known: execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot, log)")
        except (ValueError, TypeError) as exc:  # SignalError, or data of unexpected shapes
            log.warning("signal %r skipped: %s", signal_id, printable(exc))
            if signal_id:
                self.store.put(signal_key(str(signal_id)), {"status": "failed", "error": str(exc), "at_ms": now_ms()})

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

    def _execute(self, signal_id: str, data: dict[str, Any]) -> None:
        if self._known(signal_id):
            log.info("signal %s: already running, queued or finished (read again after a restart); ignored", signal_id)
            return
        kind = data.get("type", "incremental")
        if str(kind).lower() != "incremental":
            raise SignalError(f"snapshot type {kind!r} is not supported; walflow runs 'incremental' snapshots")
        patterns = data.get("data-collections")
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise SignalError("'data-collections' must be a non-empty list of table names or regular expressions")
        oids = {f"{s}.{t}": oid for s, t, oid, *_ in list_tables(self.conn, self.filters)}
        try:
            compiled = compile_patterns(patterns, "'data-collections'")
            tables = [n for n in oids if matches_any(compiled, n)]
        except PatternError as exc:
            raise SignalError(str(exc)) from None
        if not tables:
            raise SignalError(f"no captured table matches {patterns}")
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
                    if pattern.fullmatch(t):
                        conditions[t] = condition
        except (PatternError, ExpressionError) as exc:
            raise SignalError(str(exc)) from None
        surrogate = data.get("surrogate-key")
        if surrogate is not None and not isinstance(surrogate, str):
            raise SignalError("'surrogate-key' must be a column name")
        surrogate = surrogate or None
        for name in tables:
            self._check(name, oids[name], conditions.get(name), surrogate)
        if self.progress is not None:
            # Queued as a snapshot of its own: merging it into the running one would lose its condition (the
            # same table with another condition, as each backfill run sends) and leave its status unfinished.
            self.progress.queued.append({"signal_id": signal_id, "tables": tables, "condition": conditions, "surrogate_key": surrogate})
            status = "queued"
            log.info("signal %s: incremental snapshot of %s queued behind %s", signal_id, tables, self.progress.signal_id)
        else:
            self.progress = SnapshotProgress(signal_id, tables, conditions, surrogate)
            self._tables.clear()
            status = "running"
            log.info("signal %s: incremental snapshot of %s%s", signal_id, tables, f" where {conditions}" if conditions else "")
        self.store.put(signal_key(signal_id), {"status": status, "tables_left": tables, "rows": 0, "chunks": 0, "at_ms": now_ms()})
        self._dirty = True

    def _check(self, name: str, oid: int, condition: str | None, surrogate: str | None) -> None:
        """Try a signal's condition and surrogate key on one table before accepting the signal.

        ``LIMIT 0`` makes the server parse and plan the same WHERE and ORDER BY the chunks use (unknown columns,
        syntax and type errors, unorderable keys) without reading a row. Errors that depend on the data can only
        show while reading; :meth:`prepare` fails the signal then. A table without a primary key and no
        ``surrogate-key`` has no order to read it in: Debezium skips it with a warning, but a snapshot run that
        then reports success without having read the table misleads whoever asked for it, so the signal fails.
        """
        if not surrogate:
            info = Catalog(self.conn).table(oid)
            if info is not None and not info.primary_key:
                raise SignalError(
                    f"table {name} has no primary key, so its rows have no order to read them in chunks by: send a "
                    "'surrogate-key' naming a column to order by, or leave the table out of 'data-collections'"
                )
        if not (condition or surrogate):
            return
        table = self._plan(name, condition, surrogate, oid)
        if table is None:
            return
        source = quote_table(table.catalog.schema, table.catalog.name)
        # the condition alone first, then with the key's ORDER BY, so an error is blamed on what caused it
        checks: list[tuple[str, sql.Composable, sql.Composable]] = []
        if condition:
            checks.append((f"'additional-condition' {condition!r}", sql.SQL(" WHERE {}").format(condition_sql(condition)), sql.SQL("")))
        if surrogate and table.key:
            order = sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key))
            checks.append((f"'surrogate-key' {surrogate!r}", sql.SQL(""), order))
        for what, where, order in checks:
            try:
                with self._reading():
                    self._query(sql.SQL("SELECT 1 FROM {} AS walflow_t{}{} LIMIT 0").format(source, where, order), [])
            except psycopg.Error as exc:
                if self.conn.closed or self.conn.broken:
                    raise
                raise SignalError(f"{what} does not work on {name}: {self._describe(exc)}; send the signal again with a valid one") from None

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A READ ONLY transaction under ``database.query.timeout.ms``: every query that carries a signal's condition
        runs in one, so no expression it calls can change data, and none can run forever while the slot waits."""
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION READ ONLY")
            timeout = self.config.database_query_timeout_ms
            if timeout:
                self.conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(f"{timeout}ms")))
            yield

    def _query(self, query: sql.Composable, params: list[Any]) -> psycopg.Cursor[Any]:
        """Run a query that carries a user's condition with the extended protocol (prepared), which refuses more than
        one statement whatever the text holds; the simple protocol, which psycopg uses for a query without
        parameters, would run them all."""
        return self.conn.execute(query, params, prepare=True)

    def _describe(self, exc: BaseException) -> str:
        """A server error for the state table and the log; a statement timeout says which setting it hit."""
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return (
                f"the query was cancelled after database.query.timeout.ms={self.config.database_query_timeout_ms} "
                "(statement timeout): narrow or index the condition, or raise the setting"
            )
        return _first_line(exc)

    def _stop(self, signal_id: str, data: dict[str, Any]) -> None:
        """Drop the named tables (every table without ``data-collections``) from the running and the queued
        snapshots; a snapshot that lost a table ends ``stopped``."""
        patterns = data.get("data-collections")
        if patterns is not None and (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)):
            raise SignalError("'data-collections' of stop-snapshot must be a list of table names or regular expressions")
        try:
            compiled = compile_patterns(patterns or [], "'data-collections' of stop-snapshot")
            # matched now, so a runaway pattern fails this signal rather than a later chunk
            names = set(self.progress.tables) if self.progress is not None else set()
            for entry in self.progress.queued if self.progress is not None else []:
                names.update(entry["tables"])
            names.update(c.table.name for c in self.chunks.values())
            hits = {t for t in names if not compiled or matches_any(compiled, t)}
        except PatternError as exc:
            raise SignalError(str(exc)) from None
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
        self.window_tables = {c.table.name for c in self.chunks.values() if c.in_window}
        progress.stopped_by = signal_id
        if current is not None and (not left or left[0] != current):
            # the cursor belonged to the table just dropped
            progress.last_key = progress.max_key = progress.last_ctid = None
            progress.null_phase = False
        if not left and not self.chunks:
            progress.ended = True
            self._outcomes[progress.signal_id] = {"status": "stopped", "by": signal_id, "rows": progress.rows, "chunks": progress.chunks, "at_ms": now_ms()}
        log.info("signal %s: stopped incremental snapshot %s for %s", signal_id, progress.signal_id, patterns or "every table")

    def _pause(self, paused: bool) -> None:
        if self.progress is None:
            return
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
        planned = self._plan(name, progress.condition.get(name) if progress else None, progress.surrogate_key if progress else None)
        if planned is not None:
            self._tables[name] = planned
        return planned

    def _plan(self, name: str, condition: str | None, surrogate: str | None, oid: int | None = None) -> SnapshotTable | None:
        if oid is None:
            # names like "My.Schema.Odd Table" are ambiguous to split; find the table among the captured ones
            oid = next((o for sch, tab, o, *_ in list_tables(self.conn, self.filters) if f"{sch}.{tab}" == name), None)
        if oid is None:
            return None
        info = Catalog(self.conn).table(oid)
        if info is None:
            return None
        if surrogate and surrogate not in info.columns:
            raise SignalError(f"'surrogate-key' {surrogate!r} is not a column of {name} (its columns: {', '.join(info.columns)})")
        key = [surrogate] if surrogate else list(info.primary_key)
        events = TableSchema.from_catalog(self.config, self.filters, self.serializer, info, self.rules)
        return SnapshotTable(events, info, key, key_types(info, key), condition=condition)

    def _emit_watermark(self, chunk_id: str, kind: str) -> None:
        content = orjson.dumps({"connector": self.config.name, "chunk": chunk_id, "kind": kind}).decode()
        self.conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (WATERMARK_PREFIX, content))

    def prepare(self, max_rows: int) -> int:
        """Select chunks (each between its low and high watermark) for up to ``max_rows`` rows; return the count.

        Chunks of one signal only: a finished signal hands over to the next queued one in :meth:`save`. A table
        whose condition or key fails on the server fails its signal (recorded, its chunks dropped) and the
        stream goes on; only a lost connection propagates.
        """
        selected = 0
        while self.active and selected < max_rows:
            progress = self.progress
            assert progress is not None
            name = progress.tables[0]
            try:
                selected += self._prepare_chunk(progress, name)
            except (SignalError, SourceError, psycopg.Error) as exc:
                if isinstance(exc, psycopg.Error) and (self.conn.closed or self.conn.broken):
                    raise
                self._fail(progress, name, exc)
        return selected

    def _fail(self, progress: SnapshotProgress, name: str, exc: BaseException) -> None:
        error = self._describe(exc)
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

    def _prepare_chunk(self, progress: SnapshotProgress, name: str) -> int:
        """Select the next chunk of table ``name`` between a low and a high watermark; return its row count."""
        table = self._table(name)
        if table is None or not table.key:
            reason = "it no longer exists" if table is None else "it has no primary key (send a 'surrogate-key')"
            log.warning("incremental snapshot %s: skipping %s: %s", progress.signal_id, name, reason)
            self._next_table()
            return 0
        cursor = (name, progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid)
        if progress.max_key is None and not progress.null_phase:
            max_key = self._max_key(table)
            if max_key is None:
                if not progress.surrogate_key:
                    log.info("incremental snapshot %s: %s is empty", progress.signal_id, name)
                    self._next_table()
                    return 0
                progress.null_phase = True
            progress.max_key = max_key
        chunk_id = uuid.uuid4().hex
        self._emit_watermark(chunk_id, "low")
        saved = (progress.last_key, progress.null_phase, progress.last_ctid)
        try:
            rows, table_done, ctids = self._select(table, progress)
            if self._chunk_hook is not None:
                self._chunk_hook(name, rows)
            self._emit_watermark(chunk_id, "high")
        except BaseException:
            # the cursor must not skip rows that were never buffered
            progress.last_key, progress.null_phase, progress.last_ctid = saved
            raise
        fields = _dedupe_fields(table, progress.surrogate_key)
        if ctids is not None:
            # rows without a key value: only their physical position tells them apart
            buffered = {ctid.encode(): row for ctid, row in zip(ctids, rows)}
        else:
            buffered = {_row_key(row, fields): row for row in rows}
        self.chunks[chunk_id] = Chunk(chunk_id, table, buffered, fields, cursor)
        progress.chunks += 1
        self._dirty = True
        if table_done:
            self._next_table()
        return len(rows)

    def _next_table(self) -> None:
        progress = self.progress
        assert progress is not None
        progress.tables.pop(0)
        progress.last_key = progress.max_key = progress.last_ctid = None
        progress.null_phase = False
        self._dirty = True

    def _max_key(self, table: SnapshotTable) -> list[str] | None:
        keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier("walflow_t", k)) for k in table.key)
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier("walflow_t", k)) for k in table.key)
        not_null = sql.SQL(" AND ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier("walflow_t", k)) for k in table.key)
        where = [not_null]
        if table.condition:
            where.append(condition_sql(table.condition))
        with self._reading():
            row = self._query(
                sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT 1").format(
                    keys, quote_table(table.catalog.schema, table.catalog.name), sql.SQL(" AND ").join(where), order
                ),
                [],
            ).fetchone()
        return list(row) if row else None

    def _select(self, table: SnapshotTable, progress: SnapshotProgress) -> tuple[list[list[Any]], bool, list[str] | None]:
        """Select the next chunk's rows (text), advance the cursor, and say whether the table is done.

        The third element lists the rows' ctids in the NULL-key phase, else ``None``.
        """
        size = self.config.incremental_snapshot_chunk_size
        cols = _columns_sql(table)
        ident = quote_table(table.catalog.schema, table.catalog.name)
        where: list[sql.Composable] = []
        params: list[Any] = []
        if table.condition:
            where.append(condition_sql(table.condition))
        if progress.null_phase:
            # rows whose surrogate key is NULL cannot be paged by key: page them by physical position
            where.append(sql.SQL("{} IS NULL").format(sql.Identifier("walflow_t", table.key[0])))
            if progress.last_ctid:
                where.append(sql.SQL("walflow_t.ctid > %s::tid"))
                params.append(progress.last_ctid)
            query = sql.SQL("SELECT {}, walflow_t.ctid::text FROM {} AS walflow_t WHERE {} ORDER BY walflow_t.ctid LIMIT {}").format(
                cols, ident, sql.SQL(" AND ").join(where), sql.Literal(size)
            )
            with self._reading():
                rows = [list(r) for r in self._query(query, params).fetchall()]
            if rows:
                progress.last_ctid = rows[-1][-1]
            return [r[:-1] for r in rows], len(rows) < size, [r[-1] for r in rows]
        keys = sql.SQL(", ").join(sql.Identifier("walflow_t", k) for k in table.key)
        holders = sql.SQL(", ").join(sql.SQL("%s::" + t) for t in table.key_types)  # type: ignore[arg-type]
        if progress.last_key is not None:
            where.append(sql.SQL("({}) > ({})").format(keys, holders))
            params.extend(progress.last_key)
        where.append(sql.SQL("({}) <= ({})").format(keys, holders))
        params.extend(progress.max_key or [])
        query = sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT {}").format(
            cols, ident, sql.SQL(" AND ").join(where), keys, sql.Literal(size)
        )
        with self._reading():
            rows = [list(r) for r in self._query(query, params).fetchall()]
        if rows:
            index = [table.schema.column_names.index(k) for k in table.key]
            progress.last_key = [rows[-1][i] for i in index]
        if len(rows) < size:
            if progress.surrogate_key:
                progress.null_phase, progress.last_ctid = True, None
                return rows, False, None
            return rows, True, None
        return rows, False, None

    # -- the stream side --------------------------------------------------------------------------
    def on_watermark(self, content: bytes, sequence: str, topics: dict[str, int]) -> None:
        """A watermark read at ``sequence`` (its ``source.sequence``): a low one opens its chunk's window, a high one
        emits the chunk's remaining rows."""
        try:
            mark = orjson.loads(content)
        except orjson.JSONDecodeError:
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
        try:
            self._emit_chunk(chunk, sequence, topics)
        except RecordTooLargeError as exc:
            # one row Kafka cannot take fails its snapshot (recorded with the fix), never the stream
            assert self.progress is not None
            self._fail(self.progress, chunk.table.name, exc)
            return
        del self.chunks[chunk.id]
        self.window_tables = {c.table.name for c in self.chunks.values() if c.in_window}

    def on_change(self, table_name: str, *rows: dict[str, Any] | None) -> None:
        """A streamed change inside a window: buffered rows with the same key (old or new) are stale."""
        for chunk in self.chunks.values():
            if chunk.in_window and chunk.table.name == table_name:
                for row in rows:
                    if row is not None and chunk.rows.pop(orjson.dumps([row.get(f.name) for f in chunk.dedupe]), None) is not None:
                        self.rows_dropped += 1

    def _emit_chunk(self, chunk: Chunk, sequence: str, topics: dict[str, int]) -> None:
        """The chunk's rows as Debezium emits them when its window closes: ``snapshot: incremental``, the
        position of the high watermark in ``sequence``, no ``txId`` or ``lsn``, the time of reading in ``ts_*``."""
        progress = self.progress
        table = chunk.table.schema
        ser = self.serializer
        fmt = self.fmt
        headers = fmt.context_headers or None
        source = fmt.source(
            self.config.topic_prefix, self._database, table.schema, table.table,
            ts_us=time.time_ns() // 1000, snapshot="incremental", sequence=sequence,
        )  # fmt: skip
        self.producer.ensure_topic(table.topic)
        for values in chunk.rows.values():
            after = table.row(values)
            key_fields = table.key(after, values) if table.has_key else None
            key = ser.key(table.key_schema_json, key_fields) if key_fields is not None else None
            payload = fmt.envelope(None, after, source, "r", None)
            try:
                self.producer.send(table.topic, key, ser.value(table.value_schema_json, payload), headers)
            except RecordTooLargeError as exc:
                raise too_large(
                    exc, table=table.data_collection, key=key_fields, lsn=None, row=after,
                    what=f"Its incremental snapshot failed at the chunk closed by the watermark at {sequence} "
                    "(streaming goes on); send the signal again after the fix",
                ) from None
        count = len(chunk.rows)
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


def _first_line(exc: BaseException) -> str:
    """A server error's message without its LINE/HINT lines, for logs and the state table (escaped: it may quote
    a signal's text)."""
    text = str(exc).strip()
    return printable(text.splitlines()[0]) if text else type(exc).__name__


def printable(value: Any, limit: int = 2000) -> str:
    """Text a signal writer chose, safe for one log line: control and other non-printable characters escaped
    (``\\n``, ``\\x1b``), cut to ``limit`` characters."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _dedupe_fields(table: SnapshotTable, surrogate: str | None) -> list[Any]:
    if surrogate:
        return [f for f in table.schema.fields if f.index == table.schema.column_names.index(surrogate)]
    return list(table.schema.key_fields)


def _row_key(row: list[Any], fields: list[Any]) -> bytes:
    """The identity of a snapshot row, in the converted form streamed events are compared in."""
    return orjson.dumps([None if row[f.index] is None else f.converter.convert(row[f.index]) for f in fields])


def send_signal(conn: psycopg.Connection, config: ConnectorConfig, kind: str, data: dict[str, Any], signal_id: str | None = None) -> str:
    """Insert a signal row into the connector's signal table; the stream task acts on it. Returns its id."""
    if not config.signal_table:
        raise SourceError(
            f"connector {config.name!r} has no 'signal.data.collection'; set it (for example public.walflow_signal) "
            "and re-run the setup DAG, which creates the table and adds it to the publication"
        )
    signal_id = signal_id or uuid.uuid4().hex
    payload = orjson.dumps(data).decode()
    if len(payload) > MAX_SIGNAL_BYTES:
        raise SourceError(f"the signal's data is {len(payload)} bytes; signals are limited to {MAX_SIGNAL_BYTES}")
    conn.execute(
        sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(quote_table(*config.signal_table)),
        (signal_id, kind, payload),
    )
    return signal_id


SIGNAL_STATUS_SQL = "SELECT value FROM {} WHERE connector = %s AND key = %s"


def signal_status(conn: psycopg.Connection, config: ConnectorConfig, signal_id: str) -> dict[str, Any] | None:
    """What the stream task recorded about a signal: running, paused, completed, stopped or failed."""
    return StateStore(conn, config.name, config.state_table).get(signal_key(signal_id))
