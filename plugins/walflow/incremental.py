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
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql

from walflow.catalog import Catalog
from walflow.config import ConnectorConfig
from walflow.errors import SourceError
from walflow.events import DEBEZIUM_VERSION, Filters, Serializer, TableSchema, now_ms
from walflow.kafka import EventProducer
from walflow.snapshot import SnapshotTable, _columns_sql, key_types
from walflow.source import list_tables, quote_table
from walflow.state import StateStore
from walflow.transforms import ColumnRules

log = logging.getLogger(__name__)

WATERMARK_PREFIX = "walflow.watermark"
STATE_KEY = "incremental"
MAX_SIGNAL_BYTES = 64 * 1024


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
    """The persisted state of the running incremental snapshot."""

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SignalError(ValueError):
    """A malformed signal: logged with its id and skipped, never stopping the stream."""


class IncrementalSnapshots:
    """Signals and incremental-snapshot chunks of one connector, driven by :class:`~walflow.stream.StreamBatch`."""

    def __init__(self, config: ConnectorConfig, store: StateStore, catalog_conn: psycopg.Connection, producer: EventProducer, serializer: Serializer) -> None:
        self.config = config
        self.store = store
        self.conn = catalog_conn
        self.producer = producer
        self.serializer = serializer
        self.filters = Filters(config)
        self.rules = ColumnRules(config)
        raw = store.get(STATE_KEY)
        self.progress: SnapshotProgress | None = SnapshotProgress(**raw) if raw else None
        self.chunks: dict[str, Chunk] = {}
        self.window_tables: set[str] = set()
        self._tables: dict[str, SnapshotTable] = {}
        self.signals_seen = 0
        self.rows_emitted = 0
        self._database = catalog_conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        self._dirty = False

    # -- state ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.progress is not None and not self.progress.paused and bool(self.progress.tables)

    def save(self) -> None:
        """Persist progress; called only after the batch's records were acknowledged and the slot advanced."""
        if not self._dirty:
            return
        if self.progress is None or not self.progress.tables:
            if self.progress is not None:
                self.store.put(
                    signal_key(self.progress.signal_id),
                    {"status": "completed", "rows": self.progress.rows, "chunks": self.progress.chunks, "rows_per_table": self.progress.rows_per_table, "at_ms": now_ms()},
                )
                log.info("incremental snapshot %s completed: %d row(s) in %d chunk(s)", self.progress.signal_id, self.progress.rows, self.progress.chunks)
            self.store.delete(STATE_KEY)
            self.progress = None
        else:
            self.store.put(STATE_KEY, self.progress.as_dict())
            self.store.put(
                signal_key(self.progress.signal_id),
                {"status": "paused" if self.progress.paused else "running", "tables_left": self.progress.tables, "rows": self.progress.rows, "chunks": self.progress.chunks, "at_ms": now_ms()},
            )
        self._dirty = False

    # -- signals ----------------------------------------------------------------------------------
    def is_signal_table(self, schema: str, table: str) -> bool:
        return self.config.signal_table == (schema, table)

    def on_signal(self, values: dict[str, Any]) -> None:
        """Handle one signal row (id, type, data). Malformed signals are logged and skipped."""
        signal_id = values.get("id")
        try:
            kind = values.get("type")
            raw = values.get("data") or "{}"
            if not signal_id or not kind:
                raise SignalError("a signal needs an id and a type")
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
                log.info("signal %s (log): %s", signal_id, data.get("message"))
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
        except SignalError as exc:
            log.warning("signal %r skipped: %s", signal_id, exc)
            if signal_id:
                self.store.put(signal_key(str(signal_id)), {"status": "failed", "error": str(exc), "at_ms": now_ms()})

    def _execute(self, signal_id: str, data: dict[str, Any]) -> None:
        kind = data.get("type", "incremental")
        if str(kind).lower() != "incremental":
            raise SignalError(f"snapshot type {kind!r} is not supported; walflow runs 'incremental' snapshots")
        patterns = data.get("data-collections")
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise SignalError("'data-collections' must be a non-empty list of table names or regular expressions")
        try:
            compiled = [re.compile(p, re.IGNORECASE) for p in patterns]
        except re.error as exc:
            raise SignalError(f"'data-collections' holds an invalid regular expression ({exc})") from None
        names = [f"{s}.{t}" for s, t, *_ in list_tables(self.conn, self.filters)]
        tables = [n for n in names if any(p.fullmatch(n) for p in compiled)]
        if not tables:
            raise SignalError(f"no captured table matches {patterns}")
        conditions: dict[str, str] = {}
        if isinstance(data.get("additional-condition"), str) and data["additional-condition"].strip():
            conditions = {t: data["additional-condition"] for t in tables}
        for item in data.get("additional-conditions") or []:
            if not isinstance(item, dict) or not isinstance(item.get("filter"), str):
                raise SignalError("'additional-conditions' entries need 'data-collection' and 'filter'")
            pattern = re.compile(str(item.get("data-collection", ".*")), re.IGNORECASE)
            for t in tables:
                if pattern.fullmatch(t):
                    conditions[t] = item["filter"]
        surrogate = data.get("surrogate-key")
        if surrogate is not None and not isinstance(surrogate, str):
            raise SignalError("'surrogate-key' must be a column name")
        if self.progress is not None and self.progress.tables:
            # Debezium queues further tables into the running snapshot.
            added = [t for t in tables if t not in self.progress.tables]
            self.progress.tables.extend(added)
            self.progress.condition.update({t: c for t, c in conditions.items() if t in added})
            log.info("signal %s: added %s to the running incremental snapshot", signal_id, added)
        else:
            self.progress = SnapshotProgress(signal_id, tables, conditions, surrogate)
            log.info("signal %s: incremental snapshot of %s%s", signal_id, tables, f" where {conditions}" if conditions else "")
        self.store.put(signal_key(signal_id), {"status": "running", "tables_left": self.progress.tables, "rows": 0, "chunks": 0, "at_ms": now_ms()})
        self._dirty = True

    def _stop(self, signal_id: str, data: dict[str, Any]) -> None:
        if self.progress is None:
            log.info("signal %s: no incremental snapshot is running", signal_id)
            return
        patterns = data.get("data-collections")
        running = self.progress.signal_id
        if patterns:
            compiled = [re.compile(p, re.IGNORECASE) for p in patterns]
            self.progress.tables = [t for t in self.progress.tables if not any(p.fullmatch(t) for p in compiled)]
            for chunk in list(self.chunks.values()):
                if any(p.fullmatch(chunk.table.name) for p in compiled):
                    del self.chunks[chunk.id]
        else:
            self.progress.tables = []
            self.chunks.clear()
        if not self.progress.tables:
            self.store.put(signal_key(running), {"status": "stopped", "by": signal_id, "rows": self.progress.rows, "at_ms": now_ms()})
            self.store.delete(STATE_KEY)
            self.progress = None
        self._dirty = True
        log.info("signal %s: stopped incremental snapshot %s for %s", signal_id, running, patterns or "every table")

    def _pause(self, paused: bool) -> None:
        if self.progress is None:
            return
        self.progress.paused = paused
        self._dirty = True
        log.info("incremental snapshot %s %s", self.progress.signal_id, "paused" if paused else "resumed")

    # -- chunks -----------------------------------------------------------------------------------
    def _table(self, name: str) -> SnapshotTable | None:
        if name in self._tables:
            return self._tables[name]
        # names like "My.Schema.Odd Table" are ambiguous to split; find the table among the captured ones
        oid = next((o for sch, tab, o, *_ in list_tables(self.conn, self.filters) if f"{sch}.{tab}" == name), None)
        if oid is None:
            return None
        info = Catalog(self.conn).table(oid)
        if info is None:
            return None
        surrogate = self.progress.surrogate_key if self.progress else None
        key = [surrogate] if surrogate else list(info.primary_key)
        if surrogate and surrogate not in info.columns:
            raise SourceError(f"surrogate key {surrogate!r} is not a column of {name}")
        events = TableSchema.from_catalog(self.config, self.filters, self.serializer, info, self.rules)
        planned = SnapshotTable(events, info, key, key_types(info, key), condition=(self.progress.condition.get(name) if self.progress else None))
        self._tables[name] = planned
        return planned

    def _emit_watermark(self, chunk_id: str, kind: str) -> None:
        content = orjson.dumps({"connector": self.config.name, "chunk": chunk_id, "kind": kind}).decode()
        self.conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (WATERMARK_PREFIX, content))

    def prepare(self, max_rows: int) -> int:
        """Select chunks (each between its low and high watermark) for up to ``max_rows`` rows; return the count."""
        selected = 0
        while self.active and selected < max_rows:
            progress = self.progress
            assert progress is not None
            name = progress.tables[0]
            table = self._table(name)
            if table is None or not table.key:
                reason = "it no longer exists" if table is None else "it has no primary key (send a 'surrogate-key')"
                log.warning("incremental snapshot %s: skipping %s: %s", progress.signal_id, name, reason)
                self._next_table()
                continue
            cursor = (name, progress.last_key, progress.max_key, progress.null_phase, progress.last_ctid)
            if progress.max_key is None and not progress.null_phase:
                progress.max_key = self._max_key(table)
                if progress.max_key is None:
                    if not progress.surrogate_key:
                        log.info("incremental snapshot %s: %s is empty", progress.signal_id, name)
                        self._next_table()
                        continue
                    progress.null_phase = True
            chunk_id = uuid.uuid4().hex
            self._emit_watermark(chunk_id, "low")
            rows, table_done, ctids = self._select(table, progress)
            self._emit_watermark(chunk_id, "high")
            fields = _dedupe_fields(table, progress.surrogate_key)
            if ctids is not None:
                # rows without a key value: only their physical position tells them apart
                buffered = {ctid.encode(): row for ctid, row in zip(ctids, rows)}
            else:
                buffered = {_row_key(row, fields): row for row in rows}
            self.chunks[chunk_id] = Chunk(chunk_id, table, buffered, fields, cursor)
            selected += len(rows)
            progress.chunks += 1
            self._dirty = True
            if table_done:
                self._next_table()
        return selected

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
            where.append(sql.SQL("({})").format(sql.SQL(table.condition)))  # type: ignore[arg-type]
        row = self.conn.execute(
            sql.SQL("SELECT {} FROM {} AS walflow_t WHERE {} ORDER BY {} LIMIT 1").format(
                keys, quote_table(table.catalog.schema, table.catalog.name), sql.SQL(" AND ").join(where), order
            )
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
            where.append(sql.SQL("({})").format(sql.SQL(table.condition)))  # type: ignore[arg-type]
        if progress.null_phase:
            # rows whose surrogate key is NULL cannot be paged by key: page them by physical position
            where.append(sql.SQL("{} IS NULL").format(sql.Identifier("walflow_t", table.key[0])))
            if progress.last_ctid:
                where.append(sql.SQL("walflow_t.ctid > %s::tid"))
                params.append(progress.last_ctid)
            query = sql.SQL("SELECT {}, walflow_t.ctid::text FROM {} AS walflow_t WHERE {} ORDER BY walflow_t.ctid LIMIT {}").format(
                cols, ident, sql.SQL(" AND ").join(where), sql.Literal(size)
            )
            rows = [list(r) for r in self.conn.execute(query, params).fetchall()]
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
        rows = [list(r) for r in self.conn.execute(query, params).fetchall()]
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
    def on_watermark(self, content: bytes, lsn: int, tx_xid: int, commit_ms: int, topics: dict[str, int]) -> None:
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
        self._emit_chunk(chunk, lsn, tx_xid, commit_ms, topics)
        del self.chunks[chunk.id]
        self.window_tables = {c.table.name for c in self.chunks.values() if c.in_window}

    def on_change(self, table_name: str, *rows: dict[str, Any] | None) -> None:
        """A streamed change inside a window: buffered rows with the same key (old or new) are stale."""
        for chunk in self.chunks.values():
            if chunk.in_window and chunk.table.name == table_name:
                for row in rows:
                    if row is not None:
                        chunk.rows.pop(orjson.dumps([row.get(f.name) for f in chunk.dedupe]), None)

    def _emit_chunk(self, chunk: Chunk, lsn: int, xid: int, commit_ms: int, topics: dict[str, int]) -> None:
        progress = self.progress
        table = chunk.table.schema
        ser = self.serializer
        source = {
            "version": DEBEZIUM_VERSION,
            "connector": "postgresql",
            "name": self.config.topic_prefix,
            "ts_ms": commit_ms,
            "snapshot": "incremental",
            "db": self._database,
            "sequence": None,
            "schema": table.schema,
            "table": table.table,
            "txId": xid,
            "lsn": lsn,
            "xmin": None,
        }
        self.producer.ensure_topic(table.topic)
        for values in chunk.rows.values():
            after = table.row(values)
            key = ser.key(table.key_schema_json, table.key(after)) if table.has_key else None
            payload = {"before": None, "after": after, "source": source, "op": "r", "ts_ms": now_ms(), "transaction": None}
            self.producer.send(table.topic, key, ser.value(table.value_schema_json, payload))
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
        if self.chunks and self.progress is not None:
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
