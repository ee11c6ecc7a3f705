"""Initial snapshots read by worker processes: with ``snapshot.max.threads`` above 1, the tables are cut into key
ranges that reader processes read in parallel, each on a connection of its own that imports the snapshot the
coordinator exported, each converting its rows and producing them with a producer of its own.

Converting and serialising rows is Python work, and Python threads share one interpreter lock, so the readers are
processes: ``python -m walflow.capture.snapshot_workers``, which inherit nothing of the coordinator's connections,
threads or main module (``multiprocessing``'s spawn would import the caller's main script again), and talk with it
through their standard input and output in length-prefixed pickles (:func:`send`, :func:`receive`): the spec once, then
units on request; rows read, held rows, errors and the end in return. A table with
a key and enough rows is cut into up to ``PARTS_PER_READER`` ranges per reader at boundaries sampled from its keys
(``TABLESAMPLE SYSTEM``; any boundaries are correct, sampled ones even the work out); a table without a key, or
read through a ``snapshot.select.statement.overrides`` query, is one unit. Each unit is read in keyset chunks of
``snapshot.fetch.size`` rows (:func:`walflow.capture.snapshot_tables.read_chunks`), so a reader's memory is bounded
by one chunk and its producer's queue.

Debezium's snapshot markers stay as the single reader writes them: each reader holds back the first and the last
row of every range it reads and hands them to the coordinator, which, once every range of the snapshot is read,
writes them with ``first``/``first_in_data_collection`` for a table's first row, ``last_in_data_collection`` for
its last and ``last`` for the snapshot's last (:meth:`SnapshotReaders.run`); every other row is ``true``. Each key
is read once, so per-key order holds whatever the order of the ranges.

A reader that fails, or dies (a SIGKILL), fails the snapshot: the coordinator stops the other readers and raises,
and the next setup run takes the snapshot again from the start, as after any failed snapshot.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.context import CaptureHelpers
from walflow.capture.emitter import SnapshotEmitter
from walflow.capture.snapshot_tables import (
    PROGRESS_EVERY_S,
    SnapshotError,
    SnapshotTable,
    _begin_snapshot_transaction,
    plan_tables,
    read_chunks,
)
from walflow.config.connector import ConnectorConfig
from walflow.kafka import EventProducer
from walflow.records.events import TableSchema
from walflow.source.connection import connect, quote_table

log = logging.getLogger(__name__)

#: key ranges per reader for a large table: more than one, so that a reader that finishes early takes another
PARTS_PER_READER = 4
#: how many keys the boundaries are sampled from
SAMPLE_ROWS = 4_000
#: a reader reports its rows to the coordinator's progress lines every this many rows
REPORT_EVERY_ROWS = 20_000

#: a held row: its key bytes and its event row
HeldRow = tuple["bytes | None", dict[str, Any]]


@dataclass(frozen=True)
class ReadUnit:
    """One key range of one table: keys above ``after`` (exclusive) up to ``upto`` (inclusive), text values."""

    table: str
    part: int
    after: tuple[str, ...] | None = None
    upto: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ReaderSpec:
    """What each reader process needs (pickled to it when it starts; never on a command line)."""

    config: ConnectorConfig
    conninfo: str
    producer_settings: dict[str, Any]
    topic_partitions: int
    snapshot_name: str
    position_lsn: int | None
    xid: int | None
    database: str
    started_us: int
    tables: tuple[str, ...]
    flush_timeout_s: float


class RangeEmitter(SnapshotEmitter):
    """The snapshot emitter of a reader process: every row of a range as ``true``, but its first and last, which
    it returns for the coordinator to mark."""

    def range_rows(
        self, table: TableSchema, rows: Iterator[Sequence[Any]]
    ) -> tuple[int, HeldRow | None, HeldRow | None]:
        count, first, last = self.send_rows(table, rows, self.encoder(table, "true"), hold_first=True)
        return (
            count,
            (first[0], table.row(first[1])) if first is not None else None,
            (last[0], table.row(last[2])) if last is not None else None,
        )


def key_ranges(
    conninfo: str, table: SnapshotTable, parts: int, min_rows: int
) -> list[tuple[tuple[str, ...] | None, tuple[str, ...] | None]]:
    """Up to ``parts`` key ranges covering the whole table, of at least ``min_rows`` rows each by the planner's
    estimate, cut at keys sampled from it (on a connection of its own: an error here must not end the snapshot's
    transaction). One range when the table is small, has no key, or cannot be sampled."""
    whole: list[tuple[tuple[str, ...] | None, tuple[str, ...] | None]] = [(None, None)]
    if parts < 2 or not table.key or table.override:
        return whole
    ident = quote_table(table.catalog.schema, table.catalog.name)
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in table.key)
    # qualified: the select list casts the keys to text under their own names, and an unqualified ORDER BY would
    # sort by that text instead of by the key's type
    ordered = sql.SQL(", ").join(sql.Identifier("walflow_sample", k) for k in table.key)
    texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in table.key)
    try:
        with connect(conninfo, autocommit=True, application_name="walflow:snapshot-plan") as conn:
            # the planner's estimate: from the table's current size even when it was never analysed
            plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {}").format(ident)).fetchone()
            estimate = int(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0
            parts = min(parts, int(estimate or 0) // min_rows)
            if parts < 2:
                return whole
            percent = min(100.0, 100.0 * SAMPLE_ROWS / max(int(estimate), 1))
            sample = conn.execute(
                sql.SQL(
                    "SELECT {} FROM (SELECT {} FROM {} TABLESAMPLE SYSTEM ({})) AS walflow_sample ORDER BY {}"
                ).format(texts, keys, ident, sql.Literal(percent), ordered)
            ).fetchall()
    except psycopg.Error as exc:
        log.info("snapshot %s: read as one range (its keys could not be sampled: %s)", table.name, str(exc).strip())
        return whole
    bounds: list[tuple[str, ...]] = []
    for i in range(1, parts):
        bound = tuple(sample[i * len(sample) // parts]) if sample else ()
        if bound and None not in bound and (not bounds or bound != bounds[-1]):
            bounds.append(bound)
    if not bounds:
        return whole
    edges: list[tuple[str, ...] | None] = [None, *bounds, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def send(stream: Any, message: Any) -> None:
    """One message on a pipe: its pickle, after its length (both sides are walflow's own processes)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def receive(stream: Any) -> Any:
    """The next message from a pipe, or None at its end."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return pickle.loads(stream.read(size))  # only walflow's own processes write these pipes


def reader_main(inbox: Any, outbox: Any) -> int:
    """A reader process: the spec, then units until the coordinator's None; then flush and report."""
    spec: ReaderSpec = receive(inbox)
    index = int(os.environ.get("WALFLOW_SNAPSHOT_READER", "0"))
    try:
        config = spec.config
        conn = connect(
            spec.conninfo,
            autocommit=True,
            application_name=f"walflow:{config.name}:snapshot-{index}",
            initial_statements=config.database_initial_statements,
        )
        _begin_snapshot_transaction(conn, spec.snapshot_name, config.database_query_timeout_ms)
        only = [re.escape(name) for name in spec.tables]
        # this process's one context: its helpers plan the tables, then write with its own producer
        helpers = CaptureHelpers.for_config(config)
        tables = {t.name: t for t in plan_tables(conn, helpers, only=only)}
        context = helpers.writing_to(EventProducer(spec.producer_settings, spec.topic_partitions))
        producer = context.producer
        producer.check_reachable()  # also has the producer fetch its id now rather than stall its first flush
        emitter = RangeEmitter(context, spec.database, spec.position_lsn, spec.xid)
        emitter.started_us = spec.started_us
        while True:
            send(outbox, ("ready",))
            unit: ReadUnit | None = receive(inbox)
            if unit is None:
                break
            table = tables[unit.table]
            reported = 0

            def rows(unit: ReadUnit = unit, table: SnapshotTable = table) -> Iterator[Sequence[Any]]:
                nonlocal reported
                for count, row in enumerate(
                    read_chunks(
                        conn,
                        table,
                        config.snapshot_fetch_size,
                        after=list(unit.after) if unit.after else None,
                        upto=list(unit.upto) if unit.upto else None,
                    ),
                    start=1,
                ):
                    yield row
                    if count - reported >= REPORT_EVERY_ROWS:
                        send(outbox, ("progress", unit.table, count - reported))
                        reported = count

            count, first, last = emitter.range_rows(table.schema, rows())
            send(outbox, ("unit", unit, count - reported, first, last))
        producer.flush(spec.flush_timeout_s)
        conn.close()
        send(outbox, ("done", producer.sent, producer.bytes))
        return 0
    except BaseException as exc:
        if isinstance(exc, psycopg.errors.QueryCanceled):
            message = (
                "reading for the snapshot was cancelled after "
                f"database.query.timeout.ms={spec.config.database_query_timeout_ms} "
                "(statement timeout, per chunk of snapshot.fetch.size rows): raise the setting (0 turns it off) or "
                "lower snapshot.fetch.size, then run the setup again"
            )
        else:
            message = str(exc).strip() or type(exc).__name__
        send(outbox, ("error", type(exc).__name__, message, bool(getattr(exc, "retryable", False))))
        return 1


class _Reader:
    """One reader process, seen from the coordinator: its pipes, and a thread that passes its messages on."""

    def __init__(self, index: int, spec: ReaderSpec, messages: queue.Queue[tuple[int, Any]]) -> None:
        self.index = index
        env = {
            **os.environ,
            "WALFLOW_SNAPSHOT_READER": str(index),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "walflow.capture.snapshot_workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        send(self.process.stdin, spec)
        self.done = False
        self._thread = threading.Thread(
            target=self._pump, args=(messages,), name=f"walflow-snapshot-reader-{index}", daemon=True
        )
        self._thread.start()

    def _pump(self, messages: queue.Queue[tuple[int, Any]]) -> None:
        while True:
            try:
                message = receive(self.process.stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                message = None
            if message is None:
                messages.put((self.index, ("exit",)))
                return
            messages.put((self.index, message))

    def give(self, unit: ReadUnit | None) -> None:
        send(self.process.stdin, unit)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


class SnapshotReaders:
    """The coordinator of ``readers`` reader processes (see the module's docstring).

    :param progress: where progress lines go (the task log).
    """

    def __init__(self, spec: ReaderSpec, readers: int, progress: Callable[[str], None]) -> None:
        self.spec = spec
        self.readers = readers
        self._progress = progress
        #: records and bytes the readers' producers sent (all acknowledged: a reader reports them after its flush)
        self.records = 0
        self.bytes = 0

    def plan(self, tables: list[SnapshotTable]) -> list[ReadUnit]:
        units = []
        for table in tables:
            if self.spec.config.legacy_snapshot_max_threads:
                # Debezium's legacy parallel snapshot: one reader per table, each table read whole
                units.append(ReadUnit(table.name, 0, None, None))
                continue
            ranges = key_ranges(
                self.spec.conninfo, table, self.readers * PARTS_PER_READER, self.spec.config.walflow_snapshot_range_rows
            )
            for part, (after, upto) in enumerate(ranges):
                units.append(ReadUnit(table.name, part, after, upto))
            if len(ranges) > 1:
                self._progress(f"snapshot {table.name}: {len(ranges)} key ranges")
        return units

    def run(self, tables: list[SnapshotTable], emitter: SnapshotEmitter) -> dict[str, int]:
        """Read every table with the reader processes; then write the rows they held back, marked; return the rows
        per table. ``emitter`` is the coordinator's own (its producer writes the held rows)."""
        units = self.plan(tables)
        pending = list(reversed(units))
        messages: queue.Queue[tuple[int, Any]] = queue.Queue()
        readers: list[_Reader] = []
        held: dict[tuple[str, int], tuple[HeldRow | None, HeldRow | None]] = {}
        rows = {t.name: 0 for t in tables}
        started = time.monotonic()
        next_log = started + PROGRESS_EVERY_S
        try:
            # started inside the try, so that those already running are stopped if a later one cannot start
            for i in range(min(self.readers, len(units)) or 1):
                readers.append(_Reader(i, self.spec, messages))
            while not all(r.done for r in readers):
                index, message = messages.get()
                reader, kind = readers[index], message[0]
                if kind == "ready":
                    reader.give(pending.pop() if pending else None)
                elif kind == "progress":
                    rows[message[1]] += message[2]
                elif kind == "unit":
                    unit, more, first, last = message[1:]
                    rows[unit.table] += more
                    held[(unit.table, unit.part)] = (first, last)
                elif kind == "done":
                    reader.done = True
                    self.records += message[1]
                    self.bytes += message[2]
                elif kind == "error":
                    _kind, name, text, retryable = message
                    error = SnapshotError(f"snapshot reader {index} failed ({name}): {text}")
                    error.retryable = retryable
                    raise error
                elif kind == "exit" and not reader.done:
                    code = reader.process.wait(timeout=30)
                    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                    error = SnapshotError(
                        f"snapshot reader {index} (pid {reader.process.pid}) died ({how}) before it finished: "
                        "the snapshot is incomplete and nothing of it was confirmed; "
                        "the next setup run takes it again from the start"
                    )
                    error.retryable = True
                    raise error
                if time.monotonic() >= next_log:
                    next_log = time.monotonic() + PROGRESS_EVERY_S
                    elapsed = time.monotonic() - started
                    total = sum(rows.values())
                    self._progress(
                        f"snapshot: {total} row(s) with {len(readers)} readers, {total / elapsed:.0f} rows/s: "
                        + ", ".join(f"{name} {count}" for name, count in rows.items() if count)
                    )
        finally:
            for reader in readers:
                reader.stop()
        self._write_held(tables, held, emitter)
        for table in tables:
            self._progress(f"snapshot {table.name}: done, {rows[table.name]} row(s)")
        return rows

    def _write_held(
        self,
        tables: list[SnapshotTable],
        held: dict[tuple[str, int], tuple[HeldRow | None, HeldRow | None]],
        emitter: SnapshotEmitter,
    ) -> None:
        """The rows the readers held back, with Debezium's markers: per table (in the snapshot's order) the first
        row of its first non-empty range and the last row of its last, and ``last`` for the snapshot's last row."""
        ordered: list[tuple[SnapshotTable, HeldRow, str]] = []
        # Debezium's legacy parallel snapshot (a thread per table) marks no row "first"
        first_table = tables[0].name if tables and not self.spec.config.legacy_snapshot_max_threads else None
        for table in tables:
            rows: list[HeldRow] = []
            for part in sorted(p for name, p in held if name == table.name):
                first, last = held[(table.name, part)]
                rows += [r for r in (first, last) if r is not None]
            for i, row in enumerate(rows):
                if i == len(rows) - 1:
                    marker = "first" if len(rows) == 1 and table.name == first_table else "last_in_data_collection"
                elif i == 0:
                    marker = "first" if table.name == first_table else "first_in_data_collection"
                else:
                    marker = "true"
                ordered.append((table, row, marker))
        for i, (table, row, marker) in enumerate(ordered):
            emitter.send_marked(table.schema, *row, "last" if i == len(ordered) - 1 else marker)


def _main() -> int:
    # the protocol gets its own copy of standard output; anything else written there (a library's print) goes to
    # standard error instead, where the task log shows it, and cannot break a message
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return reader_main(sys.stdin.buffer, channel)


if __name__ == "__main__":
    sys.exit(_main())
