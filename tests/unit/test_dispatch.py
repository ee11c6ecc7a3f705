"""The stream's message dispatcher, driven with decoded pgoutput messages and in-memory stand-ins for Kafka and the
incremental snapshots: no PostgreSQL, no broker. It is the one place where a change meets its transaction, the
signals, the snapshot windows and watermarks and the record builder, so each of those routes is checked here."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from walflow.capture.batches import BatchSummary
from walflow.capture.context import CaptureContext
from walflow.capture.incremental import WATERMARK_PREFIX
from walflow.capture.incremental.marks import WalPositions, Watermarks, WindowMarks
from walflow.capture.stream.changes import ChangeEvents
from walflow.capture.stream.dispatch import Dispatcher
from walflow.config.connector import parse_config
from walflow.kafka import EventProducer
from walflow.records.events import TableSchema
from walflow.source.ddl_facts import DdlFacts
from walflow.source.pgoutput import Begin, Column, Commit, Insert, Message, Relation, Update

INT4, TEXT = 23, 25
TABLE = Relation(1, "public", "t", "d", (Column("id", INT4, -1, True), Column("v", TEXT, -1, False)))
SIGNALS = Relation(
    2, "public", "walflow_signal", "d", tuple(Column(name, TEXT, -1, name == "id") for name in ("id", "type", "data"))
)


class MemoryProducer(EventProducer):
    """Kafka in memory: what was sent, in order (only what the record builder calls)."""

    def __init__(self) -> None:  # no broker: EventProducer's own set-up is left out on purpose
        self.records: list[tuple[str, Any, Any]] = []
        self.topics: set[str] = set()

    def ensure_topic(self, topic: str) -> None:
        self.topics.add(topic)

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None) -> None:
        self.records.append((topic, orjson.loads(key) if key else None, orjson.loads(value) if value else None))


class MemorySnapshots:
    """The incremental snapshots as the dispatcher sees them, recording what reaches them."""

    def __init__(self, window_tables: set[str], marks: WindowMarks | None = None) -> None:
        self.window_tables = window_tables
        self.marks = marks or Watermarks()
        self.blocking: list[tuple[str, list[str]]] = []
        self.next_close: int | None = None
        self.positions: list[tuple[int, str]] = []
        self.signals: list[tuple[dict[str, Any], int | None]] = []
        self.changes: list[tuple[str, tuple[Any, ...]]] = []
        self.watermarks: list[tuple[bytes, str]] = []

    def watches(self, table: str, xid: int | None) -> bool:
        return table in self.window_tables

    def on_signal(self, values: dict[str, Any], lsn: int | None = None) -> None:
        self.signals.append((values, lsn))

    def on_change(self, table: str, *rows: dict[str, Any] | None, xid: int | None = None) -> None:
        self.changes.append((table, rows))

    def on_watermark(self, content: bytes, sequence: str, topics: Any) -> None:
        self.watermarks.append((content, sequence))

    def on_position(self, lsn: int, sequence: str, topics: Any) -> None:
        self.positions.append((lsn, sequence))
        self.next_close = None


def make_dispatcher(
    skip_before: int | None = None, **settings: Any
) -> tuple[Dispatcher, MemoryProducer, BatchSummary, list[tuple[Relation, int]]]:
    config = parse_config(
        {
            "name": "d",
            "topic.prefix": "p",
            "table.include.list": "public.t",
            "signal.data.collection": "public.walflow_signal",
            **settings,
        }
    )
    producer = MemoryProducer()
    context = CaptureContext.for_task(config, producer)
    events = ChangeEvents(context)
    events.database = "db"
    summary = BatchSummary(connector="d", slot="d")
    schemas: dict[int, TableSchema | None] = {}
    relations: list[tuple[Relation, int]] = []

    def schema_of(relation: Relation) -> TableSchema | None:
        if relation.relation_id not in schemas:
            included = context.filters.table_included(relation.namespace, relation.name)
            schemas[relation.relation_id] = (
                TableSchema.from_relation(config, context.filters, context.serializer, relation, None, context.rules)
                if included
                else None
            )
        return schemas[relation.relation_id]

    def on_relation(relation: Relation, lsn: int) -> None:
        relations.append((relation, lsn))
        schemas.pop(relation.relation_id, None)

    dispatcher = Dispatcher(
        config,
        events,
        summary,
        schema_of=schema_of,
        on_relation=on_relation,
        on_blocking=lambda snapshots: None,
        ddl=DdlFacts(None, 0),
        rereads=None,
        skip_before=skip_before,
        start_lsn=0,
        deadline=float("inf"),
        fault=lambda stage: None,
    )
    return dispatcher, producer, summary, relations


def transaction(xid: int, at: int, *changes: Any) -> list[tuple[int, Any]]:
    """A transaction's messages, at LSNs from ``at`` on: its BEGIN, the changes, its COMMIT."""
    end = at + len(changes) + 1
    return [
        (at, Begin(final_lsn=end, commit_ts=0, xid=xid)),
        *((at + 1 + i, change) for i, change in enumerate(changes)),
        (end, Commit(flags=0, commit_lsn=end, end_lsn=end + 8, commit_ts=0)),
    ]


def test_a_change_reaches_its_window_the_record_builder_and_its_transaction() -> None:
    dispatcher, producer, summary, relations = make_dispatcher()
    snapshots = MemorySnapshots({"public.t"})
    dispatcher.snapshots = snapshots  # type: ignore[assignment]  # the snapshots' interface, in memory
    dispatcher.begin_round(snapshots)  # type: ignore[arg-type]  # as above
    messages = [(90, TABLE), *transaction(7, 100, Insert(TABLE, ["1", "a"]), Update(TABLE, None, False, ["1", "b"]))]
    for lsn, msg in messages:
        assert not dispatcher.dispatch(lsn, msg)
    assert relations == [(TABLE, 90)]
    assert [(topic, value["payload"]["op"], value["payload"]["after"]) for topic, _k, value in producer.records] == [
        ("p.public.t", "c", {"id": 1, "v": "a"}),
        ("p.public.t", "u", {"id": 1, "v": "b"}),
    ]
    assert producer.records[0][1]["payload"] == {"id": 1}
    # each change of a table with a chunk buffered tells the window which row changed
    assert snapshots.changes == [("public.t", ({"id": 1, "v": "a"},)), ("public.t", ({"id": 1, "v": "b"}, None))]
    assert (summary.events, summary.transactions, summary.filtered) == (2, 1, 0)
    assert dispatcher.last_commit_end == 103 + 8
    assert dispatcher.end_of_round(500) == 500  # all read up to 500: the slot may move there


def test_a_signal_row_goes_to_the_snapshots_and_is_not_an_event() -> None:
    dispatcher, producer, summary, _relations = make_dispatcher()
    snapshots = MemorySnapshots(set())
    dispatcher.snapshots = snapshots  # type: ignore[assignment]  # the snapshots' interface, in memory
    dispatcher.begin_round(snapshots)  # type: ignore[arg-type]  # as above
    signal = Insert(SIGNALS, ["s1", "execute-snapshot", '{"data-collections": ["public.t"]}'])
    for lsn, msg in transaction(8, 200, signal):
        dispatcher.dispatch(lsn, msg)
    assert snapshots.signals == [
        ({"id": "s1", "type": "execute-snapshot", "data": '{"data-collections": ["public.t"]}'}, 201)
    ]
    assert producer.records == [] and snapshots.changes == []
    assert (summary.events, summary.filtered, summary.transactions) == (0, 1, 1)


def test_watermarks_reach_the_rounds_snapshots_and_other_messages_become_events() -> None:
    dispatcher, producer, summary, _relations = make_dispatcher()
    snapshots = MemorySnapshots(set())
    dispatcher.begin_round(snapshots)  # type: ignore[arg-type]  # the snapshots' interface, in memory
    dispatcher.dispatch(300, Message(False, 300, WATERMARK_PREFIX, b'{"chunk": "c1", "kind": "high"}'))
    dispatcher.dispatch(310, Message(False, 310, "app", b"hello"))
    assert snapshots.watermarks == [(b'{"chunk": "c1", "kind": "high"}', '[null,"300"]')]
    # a message outside a transaction is a commit of its own: Debezium's last commit LSN, and where the slot may move
    assert [(topic, value["payload"]["op"], value["payload"]["message"]["prefix"]) for topic, _k, value in
            producer.records] == [("p.message", "m", "app")]  # fmt: skip
    assert dispatcher.last_commit_end == 310 and summary.events == 1


def test_the_batch_stops_at_the_commit_that_reaches_its_limit() -> None:
    dispatcher, _producer, summary, _relations = make_dispatcher(**{"walflow.batch.max.events": 2})
    dispatcher.begin_round(None)
    first = transaction(1, 100, Insert(TABLE, ["1", "a"]))
    second = transaction(2, 200, Insert(TABLE, ["2", "b"]), Insert(TABLE, ["3", "c"]))
    assert [dispatcher.dispatch(lsn, msg) for lsn, msg in [(90, TABLE), *first]][-1] is False
    assert [dispatcher.dispatch(lsn, msg) for lsn, msg in second][-1] is True
    assert summary.stopped_by == "walflow.batch.max.events" and summary.events == 3


def test_transactions_an_earlier_batch_produced_are_read_past() -> None:
    dispatcher, producer, summary, relations = make_dispatcher(skip_before=150)
    dispatcher.begin_round(None)
    for lsn, msg in [
        *transaction(1, 100, TABLE, Insert(TABLE, ["1", "a"])),
        *transaction(2, 200, Insert(TABLE, ["2", "b"])),
    ]:
        dispatcher.dispatch(lsn, msg)
    # the skipped transaction's Relation message still reaches the schemas; its change does not reach Kafka
    assert relations == [(TABLE, 101)]
    assert [value["payload"]["after"]["id"] for _t, _k, value in producer.records] == [2]
    assert dispatcher.skipped == 1 and summary.transactions == 1


@pytest.mark.parametrize("kind", ["window", "record"])
def test_a_value_that_cannot_be_converted_names_where_it_is(kind: str) -> None:
    from walflow.errors import ConversionError

    dispatcher, _producer, _summary, _relations = make_dispatcher()
    snapshots = MemorySnapshots({"public.t"} if kind == "window" else set())
    dispatcher.snapshots = snapshots  # type: ignore[assignment]  # the snapshots' interface, in memory
    dispatcher.begin_round(None)
    begin, change, _commit = transaction(9, 400, Insert(TABLE, ["not a number", "a"]))
    dispatcher.dispatch(90, TABLE)
    dispatcher.dispatch(*begin)
    with pytest.raises(ConversionError, match=r"in the change at LSN 0/191 of transaction 9"):
        dispatcher.dispatch(*change)


@pytest.mark.parametrize("marks", [Watermarks(), WalPositions()], ids=["watermarks", "read-only"])
def test_read_only_windows_close_at_the_first_commit_past_their_position(marks: WindowMarks) -> None:
    """Read-only windows (no watermark) close at the BEGIN of the first transaction that commits at or after the
    position their snapshot saw, or at the end of the round; watermark windows never close at a position."""
    dispatcher, _producer, _summary, _relations = make_dispatcher()
    snapshots = MemorySnapshots(set(), marks)
    snapshots.next_close = 150
    dispatcher.begin_round(snapshots)  # type: ignore[arg-type]  # the snapshots' interface, in memory
    for lsn, msg in [*transaction(1, 100, TABLE), *transaction(2, 200, Insert(TABLE, ["2", "b"]))]:
        dispatcher.dispatch(lsn, msg)
    if marks.closes_at_positions:
        assert snapshots.positions == [(202, '["110","200"]')]  # the second transaction's commit is at 202, past 150
    else:
        assert snapshots.positions == []
        dispatcher.end_of_round(300)
        assert snapshots.positions == []


def test_a_table_whose_schema_cannot_be_built_names_the_change_it_stopped_at() -> None:
    """A key column of a type walflow cannot represent fails while the table's schema is built, at its first change:
    the error says where the stream stopped, as for a value."""
    from walflow.errors import ConversionError

    dispatcher, _producer, _summary, _relations = make_dispatcher()

    def unbuildable(relation: Relation) -> TableSchema | None:
        raise ConversionError("key column id of table public.t has type 'x' that walflow cannot represent")

    dispatcher._schema_of = unbuildable
    dispatcher.begin_round(None)
    begin, change, _commit = transaction(5, 600, Insert(TABLE, ["1", "a"]))
    dispatcher.dispatch(*begin)
    with pytest.raises(ConversionError, match=r"cannot represent, in the change at LSN 0/259 of transaction 5"):
        dispatcher.dispatch(*change)
