"""Each decoded pgoutput message of a stream batch, routed: the one place where a change meets the transaction it
belongs to, the signals, the incremental snapshots' windows and watermarks, the re-reads and the record builder.

Debezium's ``EventDispatcher`` plays this part in its connector. Following one change: the peek
(:mod:`~walflow.capture.stream.peek`) hands its bytes to the decoder and the message to :meth:`Dispatcher.dispatch`;
the dispatcher finds the table's schema (:mod:`~walflow.capture.stream.relations`), hands a signal row to the
incremental snapshots, tells a snapshot window that holds the row's table that the row changed, and has
:class:`~walflow.capture.stream.changes.ChangeEvents` build and send the records. At each commit it says whether the
batch's limits stop it there.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from walflow.capture.incremental import WATERMARK_PREFIX, IncrementalSnapshots
from walflow.capture.stream.changes import ChangeEvents
from walflow.capture.stream.transactions import Transaction
from walflow.config.connector import ConnectorConfig
from walflow.errors import ConversionError
from walflow.records.events import TableSchema
from walflow.source.ddl_facts import PREFIX as DDL_PREFIX
from walflow.source.ddl_facts import DdlFacts
from walflow.source.lsn import Lsn
from walflow.source.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Relation,
    Truncate,
    Update,
)

if TYPE_CHECKING:
    from walflow.capture.batches import BatchSummary
    from walflow.capture.rereads import Rereads


class Dispatcher:
    """Routes one batch's decoded messages (see the module's docstring); one per batch, :meth:`begin_round` per round.

    :param schema_of: the captured table's schema for a Relation, ``None`` when the table is not captured.
    :param on_relation: told of each Relation message and its LSN (a table's definition may have changed).
    :param on_blocking: runs the blocking snapshots a signal asked for, once the signal's transaction is read.
    :param skip_before: transactions that commit before it were produced by an earlier batch and are read past
        (:mod:`~walflow.capture.stream.resume`); their Relation messages still refresh the schemas.
    :param start_lsn: where the slot was when the batch began: the end of the last commit read before it, for the
        re-reads of a connector's first batch (whose events carry no previous commit).
    :param fault: the fault-injection tests' seam ("before_produce"); does nothing in production.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        events: ChangeEvents,
        summary: BatchSummary,
        *,
        schema_of: Callable[[Relation], TableSchema | None],
        on_relation: Callable[[Relation, int], None],
        on_blocking: Callable[[IncrementalSnapshots], None],
        ddl: DdlFacts,
        rereads: Rereads | None,
        skip_before: int | None,
        start_lsn: int,
        deadline: float,
        fault: Callable[[str], None],
    ) -> None:
        self.events = events
        self.summary = summary
        #: the batch's events per topic (the summary's events_per_topic, and the incremental snapshots' counts)
        self.per_topic: Counter[str] = Counter()
        #: the incremental snapshots a signal or a window change reaches (set once the batch starts them)
        self.snapshots: IncrementalSnapshots | None = None
        self.ddl = ddl
        self._schema_of = schema_of
        self._on_relation = on_relation
        self._on_blocking = on_blocking
        self._rereads = rereads
        self._skip_before = skip_before
        self._start_lsn = start_lsn
        self._deadline = deadline
        self._max_events = config.walflow_batch_max_events
        self._fault = fault
        self._signal_table = config.signal_table
        self._state_table = config.state_table
        #: the snapshots whose windows this round opened: their watermarks and positions close them
        self._round_snapshots: IncrementalSnapshots | None = None
        #: read-only windows close at a WAL position (IncrementalSnapshots.on_position), checked at each BEGIN; the
        #: other windows close at their high watermark, and their BEGINs need no check
        self._closes_at_positions: IncrementalSnapshots | None = None
        self._tx: Transaction | None = None
        self._skipping = False
        #: transactions this round read past (an earlier batch produced them)
        self.skipped = 0
        #: the end of the last commit read (or of a non-transactional message): where the slot may move to
        self.last_commit_end: int | None = None
        #: the record builder's method for each kind of change
        self._emitters: dict[type[Any], Callable[..., None]] = {
            Insert: events.insert,
            Update: events.update,
            Delete: events.delete,
        }
        self._handlers: dict[type[Any], Callable[[Any, int], bool | None]] = {
            Insert: self._change,
            Update: self._change,
            Delete: self._change,
            Begin: self._begin,
            Commit: self._commit,
            Relation: self._relation,
            Truncate: self._truncate,
            Message: self._message,
            Origin: self._origin,
        }

    def begin_round(self, snapshots: IncrementalSnapshots | None) -> None:
        """A round starts reading: ``snapshots`` are the incremental snapshots whose windows it opened."""
        self._round_snapshots = snapshots
        self._closes_at_positions = snapshots if snapshots is not None and snapshots.marks.closes_at_positions else None
        self._tx = None
        self._skipping = False
        self.skipped = 0
        self.last_commit_end = None

    def dispatch(self, lsn: int, msg: PgOutputMessage) -> bool | None:
        """Route one message read at ``lsn``; true when the batch stops at this commit (its limits)."""
        cls = type(msg)
        if self._skipping and cls is not Commit and cls is not Relation:
            return False
        handler = self._handlers.get(cls)
        return handler(msg, lsn) if handler is not None else False

    def end_of_round(self, upto: int) -> int:
        """Every transaction committed before ``upto`` was read: close what is due there, and return where the slot
        may move (there even if nothing was captured, which keeps an idle or filtered-out database from retaining
        WAL)."""
        closes = self._closes_at_positions
        if closes is not None and closes.next_close is not None:
            # read-only windows due by the end
            closes.on_position(upto, self.events.sequence(upto), self.per_topic)
        rereads = self._rereads
        if rereads is not None and (due := rereads.next_due) is not None and upto >= due:
            # every transaction that commits before upto was read: the next one commits after the decisions
            rereads.reached(upto, self.events.previous_commit_lsn or self._start_lsn)
        return max(upto, self.last_commit_end or 0)

    # -- the messages ---------------------------------------------------------------------------------------------
    def _begin(self, msg: Begin, lsn: int) -> None:
        final_lsn = msg.final_lsn
        if self._skip_before is not None and final_lsn < self._skip_before:
            self._skipping = True
            return
        rereads = self._rereads
        if rereads is not None and (due := rereads.next_due) is not None and final_lsn >= due:
            rereads.reached(final_lsn, self.events.previous_commit_lsn or self._start_lsn)
        closes = self._closes_at_positions
        if closes is not None and (due := closes.next_close) is not None and final_lsn >= due:
            # every transaction the chunks' snapshots saw is streamed
            closes.on_position(final_lsn, self.events.sequence(lsn), self.per_topic)
        self._tx = Transaction(msg, lsn)
        self._fault("before_produce")

    def _commit(self, msg: Commit, lsn: int) -> bool:
        if self._skipping:
            self._skipping = False
            self.skipped += 1
            self.last_commit_end = msg.end_lsn
            return False
        tx = self._tx
        assert tx is not None, f"a commit at {Lsn(lsn)} without its BEGIN"
        events, summary = self.events, self.summary
        events.transactions.end(tx, msg.end_lsn, summary)
        snapshots = self.snapshots
        if snapshots is not None and snapshots.blocking:
            self._on_blocking(snapshots)
        summary.transactions += 1
        self.last_commit_end = msg.end_lsn
        # Debezium's "last commit LSN": the position it reports for the commit, its end
        events.previous_commit_lsn = msg.end_lsn
        events.last_commit_us = tx.commit_us
        if tx.total:
            if summary.first_lsn is None:
                summary.first_lsn = str(Lsn(tx.final_lsn))
            summary.last_lsn = str(Lsn(tx.final_lsn))
            summary.last_event_commit_ms = tx.commit_ms
        self._tx = None
        if summary.events >= self._max_events:
            summary.stopped_by = "walflow.batch.max.events"
            return True
        if time.monotonic() >= self._deadline:
            summary.stopped_by = "walflow.batch.max.seconds"
            return True
        return False

    def _relation(self, msg: Relation, lsn: int) -> None:
        self._on_relation(msg, lsn)

    def _change(self, msg: Insert | Update | Delete, lsn: int) -> None:
        tx = self._tx
        assert tx is not None, f"a change at {Lsn(lsn)} outside a transaction"
        snapshots = self.snapshots
        try:
            # building the table's schema converts too (a key column of a type walflow cannot represent)
            table = self._schema_of(msg.relation)
            if table is None:
                relation = msg.relation
                name = (relation.namespace, relation.name)
                if name == self._state_table:
                    tx.state_writes = True
                else:
                    tx.other_changes = True
                if snapshots is not None and type(msg) is Insert and name == self._signal_table:
                    snapshots.on_signal({c.name: v for c, v in zip(relation.columns, msg.new)}, lsn)
                self.summary.filtered += 1
                return
            if (
                snapshots is not None
                and snapshots.window_tables
                and table.data_collection in snapshots.window_tables
                and snapshots.watches(table.data_collection, tx.xid)
            ):
                window_change(snapshots, table, msg, tx.xid)
            self._emitters[type(msg)](msg, table, tx, lsn, self.summary, self.per_topic)
        except ConversionError as exc:
            failures = self.events.failures
            if not failures.tolerant:
                raise stopped_at(exc, lsn, tx.xid) from None
            # Debezium's warn and skip: the event is left out, said where it was; the stream goes on
            relation = msg.relation
            failures.left_out(exc, relation.namespace, relation.name, f"LSN {Lsn(lsn)} (transaction {tx.xid})")

    def _truncate(self, msg: Truncate, lsn: int) -> None:
        tx = self._tx
        assert tx is not None, f"a truncate at {Lsn(lsn)} outside a transaction"
        # one table's schema at a time, between its events, as each relation comes
        tables = (self._schema_of(relation) for relation in msg.relations)
        self.events.truncate(tables, tx, lsn, self.summary, self.per_topic)

    def _message(self, msg: Message, lsn: int) -> None:
        tx = self._tx
        if tx is None and self._skip_before is not None and lsn < self._skip_before:
            return  # a non-transactional message an earlier batch read
        if msg.prefix == WATERMARK_PREFIX:
            if self._round_snapshots is not None:
                self._round_snapshots.on_watermark(msg.content, self.events.sequence(lsn), self.per_topic)
        else:
            if msg.prefix == DDL_PREFIX and msg.transactional:
                # emitted as well below, as Debezium emits every logical decoding message
                self.ddl.observe(msg.content, lsn)
            self.events.message(msg, tx, lsn, self.summary, self.per_topic)
        if tx is None:
            # outside a transaction a message is a commit of its own (Debezium's view too): the slot may move to its
            # LSN, which for a message is the end of its record (decoding then skips it and reads the next), or a
            # batch cut among such messages by upto_nchanges would confirm nothing and read them again, forever
            self.last_commit_end = max(self.last_commit_end or 0, lsn)

    def _origin(self, msg: Origin, lsn: int) -> None:
        tx = self._tx
        if tx is None:
            return
        tx.origin, tx.origin_lsn = msg.name, msg.lsn
        # pgoutput sends the Begin of a replayed transaction together with its Origin, and the streaming protocol
        # then reports no LSN for the Begin: Debezium's BEGIN id has LSN 0
        tx.begin_lsn = 0


def window_change(snapshots: IncrementalSnapshots, table: TableSchema, msg: Insert | Update | Delete, xid: int) -> None:
    """A change of a table with a chunk buffered drops the chunk's rows it makes stale (``on_change``)."""
    name = table.data_collection
    if isinstance(msg, Delete):
        snapshots.on_change(name, identity_row(table, msg.old), xid=xid)
    elif isinstance(msg, Update):
        new = identity_row(table, msg.new)
        snapshots.on_change(name, new, identity_row(table, msg.old) if msg.old is not None else None, xid=xid)
    else:
        snapshots.on_change(name, identity_row(table, msg.new), xid=xid)


def identity_row(table: TableSchema, values: Any) -> dict[str, Any]:
    """A streamed row with its key fields, as a buffered chunk row's identity is read: a key column the column
    filters leave out of the value is still part of the key (and of the identity)."""
    row = table.row(values)
    return {**row, **table.key(row, values)} if table.has_key else row


def stopped_at(exc: ConversionError, lsn: int, xid: int) -> ConversionError:
    """A value the stream cannot convert, with where it is and the way past it."""
    if exc.unrepresentable:
        way = (
            "until the configuration lets it through (as the cause says) or the event is left out as Debezium does "
            "(event.processing.failure.handling.mode: warn or skip; the lake table is then marked incomplete)."
        )
    else:
        way = (
            "until the column is left out of the events with column.exclude.list (the table's other columns and every "
            "other table then stream on; an incremental snapshot brings the column back once it is included again), "
            "or the event is left out with event.processing.failure.handling.mode: warn. PostgreSQL printed this "
            "value, so walflow should convert it: please report it as a walflow bug with the value."
        )
    return ConversionError(
        f"{exc}, in the change at LSN {Lsn(lsn)} of transaction {xid}. The stream stops before that transaction "
        f"(the slot stays at the end of the one before it) and every later run stops there too, {way}",
        unrepresentable=exc.unrepresentable,
    )
