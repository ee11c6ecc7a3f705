"""Debezium's records for one streaming batch: change events, tombstones, transaction metadata, logical
decoding messages and heartbeats, from the messages :mod:`walflow.source.pgoutput` decodes.

:class:`walflow.capture.stream.StreamBatch` reads the slot and decides how far it may move; :class:`ChangeEvents` only
builds and sends records, so what a record looks like is decided here, in one place, for every path of the stream.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from walflow.capture.batches import BOOKKEEPING_IDS
from walflow.capture.incremental import IncrementalSnapshots
from walflow.config.connector import ConnectorConfig
from walflow.config.patterns import compile_patterns
from walflow.errors import RecordTooLargeError
from walflow.kafka import EventProducer, too_large
from walflow.names import topic_name
from walflow.records.convert import BYTEA, ConverterSettings, build_converter
from walflow.records.envelope import EventFormat, java_hash_map_order
from walflow.records.events import Serializer, TableSchema, now_ms
from walflow.records.facts import UNAVAILABLE_HEADER
from walflow.source.catalog import ColumnType
from walflow.source.pgoutput import (
    PG_EPOCH_MICROS_FROM_UNIX,
    UNCHANGED_TOAST,
    Begin,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
    lsn_to_str,
)
from walflow.source.signals import printable

if TYPE_CHECKING:
    from walflow.capture.batches import BatchSummary

log = logging.getLogger(__name__)


#: what a change too large for Kafka did to the batch, quoted in the error (walflow.kafka.too_large)
_STOPPED = (
    "The batch stopped before producing it; the slot moves only up to the end of the transaction before it, so this "
    "change and every later one wait until the fix"
)


class Transaction:
    """The transaction being streamed: its identity and counters for the metadata records.

    Debezium 3.6 names every transaction record and event ``<txId>:<LSN>`` with the LSN of the record itself:
    BEGIN the LSN the slot reports for the BEGIN (on PostgreSQL 15+ that of the transaction's first change),
    each data event its own change's LSN, END the end of the commit record.
    """

    __slots__ = (
        "xid", "commit_us", "commit_ms", "final_lsn", "begin_lsn", "total", "per_collection", "sources", "origin",
        "origin_lsn", "begun", "state_writes", "other_changes",
    )  # fmt: skip

    def __init__(self, begin: Begin, begin_lsn: int) -> None:
        self.xid = begin.xid
        self.commit_us = begin.commit_ts + PG_EPOCH_MICROS_FROM_UNIX
        self.commit_ms = self.commit_us // 1000
        self.final_lsn = begin.final_lsn
        self.begin_lsn = begin_lsn
        self.total = 0
        self.per_collection: dict[str, int] = {}
        # The part of each table's source block that is the same for every event of this transaction.
        self.sources: dict[tuple[str, str], dict[str, Any]] = {}
        # the replication origin the transaction was replayed from (pgoutput's Origin message), if any
        self.origin: str | None = None
        self.origin_lsn: int | None = None
        #: whether the transaction wrote walflow's state table, and whether it changed anything else: one that only
        #: wrote the state table is walflow's bookkeeping, which Debezium (keeping offsets outside) never shows
        self.state_writes = False
        self.other_changes = False
        #: whether its BEGIN record was sent: it waits for the message after the Begin, which may be an Origin
        self.begun = False


class ChangeEvents:
    """Builds and sends the records of one batch's changes, keeping what Debezium's records carry from one change
    to the next: the end of the last commit read (``source.sequence``), its time, the transaction counters.

    :param schema_of: the captured table's schema for a Relation, ``None`` when the table is not captured.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        producer: EventProducer,
        serializer: Serializer,
        schema_of: Callable[[Relation], TableSchema | None],
    ) -> None:
        self.config = config
        self.producer = producer
        self.serializer = serializer
        self.fmt = fmt = EventFormat(config)
        self._schema_of = schema_of
        self._tx_key_json = serializer.prefix(fmt.tx_key_schema)
        self._tx_value_json = serializer.prefix(fmt.tx_value_schema)
        self._msg_key_json = serializer.prefix(fmt.message_key_schema)
        self._msg_value_json = serializer.prefix(fmt.message_value_schema)
        #: the context headers every data change event carries (none in the pre-2.6 form)
        self._headers = fmt.context_headers or None
        # a message's content is represented as a bytea column's value is (binary.handling.mode)
        content = build_converter(ColumnType(oid=BYTEA), ConverterSettings.from_config(config))
        assert content is not None
        self._content: Callable[[bytes], Any] = lambda data, _convert=content.convert: _convert("\\x" + data.hex())
        # <prefix>.message: Debezium names it with a dot whatever topic.delimiter says
        self._message_topic = topic_name(config.topic_prefix, "message")
        self._message_include = compile_patterns(config.message_prefix_include_list, "'message.prefix.include.list'")
        self._message_exclude = compile_patterns(config.message_prefix_exclude_list, "'message.prefix.exclude.list'")
        skipped = set(config.skipped_operations)
        self._skip_c, self._skip_u, self._skip_d, self._skip_t = ("c" in skipped, "u" in skipped, "d" in skipped, "t" in skipped)
        self._skip_unchanged = config.skip_messages_without_change
        #: name unchanged TOASTed values written as null in a header, for the lake (records.facts.UNAVAILABLE_HEADER)
        self._unavailable = config.walflow_lake_enabled
        self._state_table = config.state_table
        #: a producer behind a transform chain takes the events unserialised (walflow.transforms.producer)
        self._send_event: Callable[..., None] | None = getattr(producer, "send_event", None)
        self._send_row: Callable[..., None] | None = getattr(producer, "send_row", None)
        #: the database name in ``source.db`` (known once the batch has connected)
        self.database = ""
        #: the incremental snapshots whose watermark windows a change may fall into
        self.inc: IncrementalSnapshots | None = None
        #: the post processors (walflow.capture.reselect): (table, tuple values, after row) -> after row
        self.reselect: Callable[[TableSchema, Sequence[Any], dict[str, Any]], dict[str, Any]] | None = None
        #: Debezium's "last commit LSN", the end of the last commit read: the first half of ``source.sequence``
        self.previous_commit_lsn: int | None = None
        #: commit time of the last transaction read, for the source block of a non-transactional message
        self.last_commit_us: int | None = None
        #: (op, table, LSN, commit ms) of the last change event, for the batch's summary
        self.last_emit: tuple[str, TableSchema, int, int] | None = None

    def sequence(self, lsn: int) -> str:
        """Debezium's ``source.sequence``: [end of the last commit read, this event's LSN], as strings."""
        prev = self.previous_commit_lsn
        return f'["{prev}","{lsn}"]' if prev is not None else f'[null,"{lsn}"]'

    def _source(self, table: TableSchema, tx: Transaction, lsn: int) -> dict[str, Any]:
        base = tx.sources.get(table.source_key)
        if base is None:
            base = tx.sources[table.source_key] = self.fmt.source(
                self.config.topic_prefix, self.database, table.schema, table.table,
                ts_us=tx.commit_us, tx_id=tx.xid, origin=tx.origin, origin_lsn=tx.origin_lsn,
            )  # fmt: skip
        prev = self.previous_commit_lsn
        # in place: the event is serialised before the next one changes it (one dict per table and transaction)
        base["sequence"] = f'["{prev}","{lsn}"]' if prev is not None else f'[null,"{lsn}"]'
        base["lsn"] = lsn
        return base

    def _tx_record(self, payload: dict[str, Any]) -> None:
        ser = self.serializer
        self.producer.send(
            self.config.transaction_topic, ser.key(self._tx_key_json, {"id": payload["id"]}), ser.value(self._tx_value_json, payload)
        )

    def _tx_begin(self, tx: Transaction) -> None:
        """BEGIN, as Debezium sends it for every transaction it reads, even one whose changes are all filtered."""
        tx.begun = True
        if not self.config.provide_transaction_metadata:
            return
        self.producer.ensure_topic(self.config.transaction_topic)
        begin_id = f"{tx.xid}:{tx.begin_lsn}"
        self._tx_record({"status": "BEGIN", "id": begin_id, "event_count": None, "data_collections": None, "ts_ms": tx.commit_ms})

    def tx_end(self, tx: Transaction, end_lsn: int, summary: BatchSummary | None = None) -> None:
        if not tx.begun and tx.state_writes and not tx.other_changes:
            # walflow's own bookkeeping (a batch's state, a claim): not a transaction of the captured database
            if summary is not None:
                summary.bookkeeping_transactions += 1
                if len(summary.bookkeeping_xids) < BOOKKEEPING_IDS:
                    summary.bookkeeping_xids.append(tx.xid)
            return
        if not tx.begun:
            self._tx_begin(tx)
        if not self.config.provide_transaction_metadata:
            return
        counts = tx.per_collection
        # Debezium keeps the counts in a java.util.HashMap and lists them in its iteration order
        collections = [{"data_collection": name, "event_count": counts[name]} for name in java_hash_map_order(list(counts))]
        end_id = f"{tx.xid}:{end_lsn}"
        self._tx_record({"status": "END", "id": end_id, "event_count": tx.total, "data_collections": collections, "ts_ms": tx.commit_ms})

    def _tx_block(self, tx: Transaction, collection: str, lsn: int) -> dict[str, Any] | None:
        if not tx.begun:
            self._tx_begin(tx)
        tx.total += 1
        if not self.config.provide_transaction_metadata:
            # counted per collection only for the END record: without it, a transaction of a million logical
            # messages (each a collection of its own) would hold a million counters for nothing
            return None
        order = tx.per_collection[collection] = tx.per_collection.get(collection, 0) + 1
        return {"id": f"{tx.xid}:{lsn}", "total_order": tx.total, "data_collection_order": order}

    def _emit(
        self,
        table: TableSchema,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        key: dict[str, Any] | None,
        tx: Transaction,
        lsn: int,
        summary: BatchSummary,
        per_topic: Counter[str],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        if self._send_row is not None and after is not None:
            # a plain ExtractNewRecordState keeps only the row: no envelope to build (walflow.transforms.producer)
            self._tx_block(tx, table.data_collection, lsn)
            payload = None
        else:
            payload = self.fmt.envelope(before, after, self._source(table, tx, lsn), op, self._tx_block(tx, table.data_collection, lsn))
        if headers is None:
            headers = self._headers
        elif self._headers:
            headers = headers + self._headers
        try:
            if payload is None:
                self._send_row(table.topic, table.key_schema_json, key, table.value_schema_json, after, headers)  # type: ignore[misc]
            elif self._send_event is not None:
                self._send_event(table.topic, table.key_schema_json, key, table.value_schema_json, payload, headers)
            else:
                ser = self.serializer
                key_bytes = ser.key(table.key_schema_json, key) if key is not None else None
                self.producer.send(table.topic, key_bytes, ser.value(table.value_schema_json, payload), headers)
        except RecordTooLargeError as exc:
            raise too_large(exc, table=table.data_collection, key=key, lsn=lsn, row=after if after is not None else before, what=_STOPPED) from None
        self._counted(table, op, tx, lsn, summary, per_topic)

    def _counted(self, table: TableSchema, op: str, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]) -> None:
        """One change event produced: the batch's counts and its last event."""
        summary.events += 1
        summary.ops[op] = summary.ops.get(op, 0) + 1
        per_topic[table.topic] += 1
        self.last_emit = (op, table, lsn, tx.commit_ms)

    def _emit_json(
        self, table: TableSchema, op: str, values: Sequence[Any], tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """:meth:`_emit` of a created row under a plain ExtractNewRecordState, serialised from the tuple at once."""
        if tx.begun and not self.config.provide_transaction_metadata:
            tx.total += 1  # what _tx_block does then, inline: this is the stream's hottest path under the transform
        else:
            self._tx_block(tx, table.data_collection, lsn)
        try:
            row_json, key_json = table.json_row(values)  # type: ignore[misc]
        except (ValueError, ArithmeticError):
            table.row(values)  # raises the ConversionError that names the column and its value
            raise
        try:
            self.producer.send_row_json(  # type: ignore[attr-defined]
                table.topic, table.key_schema_json, key_json if table.has_key else None, table.value_schema_json, row_json, self._headers
            )
        except RecordTooLargeError as exc:
            after = table.row(values)
            key = table.key(after, values) if table.has_key else None
            raise too_large(exc, table=table.data_collection, key=key, lsn=lsn, row=after, what=_STOPPED) from None
        self._counted(table, op, tx, lsn, summary, per_topic)

    def _tombstone(self, table: TableSchema, key: dict[str, Any] | None, headers: list[tuple[str, bytes]] | None = None) -> None:
        """The tombstone after a delete: the delete's key (null for a keyless table) and no value."""
        key_bytes = self.serializer.key(table.key_schema_json, key) if key is not None else None
        if headers is None:
            headers = self._headers
        elif self._headers:
            headers = headers + self._headers
        self.producer.send(table.topic, key_bytes, None, headers)

    def message(self, msg: Message, tx: Transaction | None, lsn: int, summary: BatchSummary, per_topic: Counter[str]) -> None:
        """A logical decoding message (``pg_logical_emit_message``) as Debezium's ``op: m`` event on ``<prefix>.message``."""
        prefix = msg.prefix
        if tx is not None:
            tx.other_changes = True
        if self._message_include and not any(p.fullmatch(prefix) for p in self._message_include):
            return
        if self._message_exclude and any(p.fullmatch(prefix) for p in self._message_exclude):
            return
        fmt = self.fmt
        if msg.transactional and tx is not None:
            source = fmt.source(
                self.config.topic_prefix, self.database, "", "", ts_us=tx.commit_us, sequence=self.sequence(lsn),
                tx_id=tx.xid, lsn=lsn, origin=tx.origin, origin_lsn=tx.origin_lsn,
            )  # fmt: skip
            # Debezium counts each message as a data collection of its own, named after a Java object (its
            # identity hash differs from run to run, in Debezium too)
            collection = f"io.debezium.connector.postgresql.LogicalDecodingMessageMonitor$LogicalDecodingMessageId@{random.getrandbits(31):x}"
            transaction = self._tx_block(tx, collection, lsn)
        else:
            # not part of a transaction: Debezium treats it as a commit of its own (it becomes the last commit
            # LSN) and describes it with the last commit time it read, without a txId
            self.previous_commit_lsn = lsn
            ts_us = self.last_commit_us if self.last_commit_us is not None else time.time_ns() // 1000
            source = fmt.source(self.config.topic_prefix, self.database, "", "", ts_us=ts_us, sequence=self.sequence(lsn), lsn=lsn)
            transaction = None
        payload = {
            "op": "m",
            "ts_ms": time.time_ns() // 1_000_000,
            "source": source,
            "transaction": transaction,
            "message": {"prefix": prefix, "content": self._content(msg.content)},
        }
        self.producer.ensure_topic(self._message_topic)
        ser = self.serializer
        try:
            self.producer.send(self._message_topic, ser.key(self._msg_key_json, {"prefix": prefix}), ser.value(self._msg_value_json, payload))
        except RecordTooLargeError as exc:
            if self.config.walflow_message_oversized_handling_mode == "skip":
                # a message is never table data: with the operator's consent it is left out, said where it was
                warning = (
                    f"left out the logical decoding message with prefix {printable(prefix)!r} at LSN {lsn_to_str(lsn)}: "
                    f"{exc.size} bytes as a record, more than message.max.bytes={exc.limit} "
                    "(walflow.message.oversized.handling.mode=skip)"
                )
                log.warning("connector %s: %s", self.config.name, warning)
                summary.warnings.append(warning)
                return
            raise RecordTooLargeError(
                f"the logical decoding message with prefix {printable(prefix)!r} at LSN {lsn_to_str(lsn)} is {exc.size} bytes as a "
                f"record: more than the producer's message.max.bytes={exc.limit} (topic {exc.topic!r}). Nothing from its "
                "transaction on was confirmed. Raise the limits (the producer's message.max.bytes in the Kafka "
                "Connection's extras, the topic's max.message.bytes), leave such messages out with "
                "message.prefix.exclude.list, or skip oversized messages with a warning "
                "(walflow.message.oversized.handling.mode: skip)",
                topic=exc.topic,
                size=exc.size,
                limit=exc.limit,
            ) from None
        summary.events += 1
        per_topic[self._message_topic] += 1

    def change(self, msg: Insert | Update | Delete, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]) -> None:
        table = self._schema_of(msg.relation)
        if table is None:
            relation = msg.relation
            if (relation.namespace, relation.name) == self._state_table:
                tx.state_writes = True
            else:
                tx.other_changes = True
            if self.inc is not None and type(msg) is Insert and self.config.signal_table == (relation.namespace, relation.name):
                self.inc.on_signal({c.name: v for c, v in zip(relation.columns, msg.new)}, lsn)
            summary.filtered += 1
            return
        inc = self.inc
        if inc is not None and inc.window_tables and table.data_collection in inc.window_tables and inc.watches(table.data_collection, tx.xid):
            self._window_change(inc, table, msg, tx.xid)
        if type(msg) is Insert:
            if self._skip_c:
                summary.filtered += 1
                return
            # a plain ExtractNewRecordState's rows go straight from the tuple to JSON where the table allows it
            if self._send_row is not None and table.json_row is not None and self.reselect is None:
                self._emit_json(table, "c", msg.new, tx, lsn, summary, per_topic)
                return
            after = table.row(msg.new)
            if self.reselect is not None:
                after = self.reselect(table, msg.new, after)
            self._emit(table, "c", None, after, table.key(after, msg.new) if table.has_key else None, tx, lsn, summary, per_topic)
        elif type(msg) is Update:
            if self._skip_u:
                summary.filtered += 1
                return
            new = msg.new
            if msg.old is not None and not msg.old_is_key and UNCHANGED_TOAST in new:
                # REPLICA IDENTITY FULL: the old row carries the TOASTed value the new row left out unchanged.
                new = [o if n is UNCHANGED_TOAST else n for n, o in zip(new, msg.old)]
            after = table.row(new)
            if self.reselect is not None:
                after = self.reselect(table, new, after)
            before = None if msg.old is None else (table.before_row(msg.old) if msg.old_is_key else table.row(msg.old))
            if self._skip_unchanged and before is not None and before == after:
                # skip.messages.without.change: only the columns the events leave out changed. Without the old row
                # (REPLICA IDENTITY DEFAULT) nothing can be compared, and Debezium emits the update too.
                summary.filtered += 1
                return
            new_key = table.key(after, new) if table.has_key else None
            old_key = table.key(before, msg.old) if (table.has_key and before is not None) else None
            unavailable = None
            if self._unavailable and table.null_toast:
                # values the update left unchanged and pgoutput did not send, which Debezium writes as null: named for
                # the lake, which would otherwise take them for real nulls (none a post processor read again)
                gone = [name for i, name in table.null_toast if new[i] is UNCHANGED_TOAST and after.get(name) is None]
                if gone:
                    unavailable = [(UNAVAILABLE_HEADER, orjson.dumps(gone))]
            if old_key is not None and new_key is not None and old_key != new_key:
                self._key_change(table, before, after, old_key, new_key, tx, lsn, summary, per_topic, unavailable)
            else:
                self._emit(table, "u", before, after, new_key, tx, lsn, summary, per_topic, unavailable)
        else:
            if self._skip_d:
                summary.filtered += 1
                return
            before = table.before_row(msg.old) if msg.old_is_key else table.row(msg.old)
            key = table.key(before, msg.old) if table.has_key else None
            self._emit(table, "d", before, None, key, tx, lsn, summary, per_topic)
            if self.config.tombstones_on_delete:
                self._tombstone(table, key)

    def _window_change(self, inc: IncrementalSnapshots, table: TableSchema, msg: Insert | Update | Delete, xid: int) -> None:
        """A change of a table with a chunk buffered drops the chunk's rows it makes stale (see ``on_change``)."""
        if type(msg) is Delete:
            inc.on_change(table.data_collection, _identity_row(table, msg.old), xid=xid)
        elif type(msg) is Update:
            inc.on_change(table.data_collection, _identity_row(table, msg.new), _identity_row(table, msg.old) if msg.old is not None else None, xid=xid)
        else:
            inc.on_change(table.data_collection, _identity_row(table, msg.new), xid=xid)

    def _key_change(
        self,
        table: TableSchema,
        before: dict[str, Any] | None,
        after: dict[str, Any],
        old_key: dict[str, Any],
        new_key: dict[str, Any],
        tx: Transaction,
        lsn: int,
        summary: BatchSummary,
        per_topic: Counter[str],
        unavailable: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """A primary key update is a delete of the old key (plus tombstone) and a create of the new one (which carries
        ``unavailable``, the header naming its unsent TOASTed values written as null)."""
        ser = self.serializer
        new_key_header = [("__debezium.newkey", ser.key(table.key_schema_json, new_key))]
        old_key_header = [("__debezium.oldkey", ser.key(table.key_schema_json, old_key))]
        self._emit(table, "d", before, None, old_key, tx, lsn, summary, per_topic, new_key_header)
        if self.config.tombstones_on_delete:
            self._tombstone(table, old_key, new_key_header)
        if self._skip_c:
            # skipped.operations holds c: Debezium drops the create half of the key change too (tests/compat's
            # filters/key_columns_create_skipped changes a message.key.columns key)
            summary.filtered += 1
            return
        self._emit(table, "c", None, after, new_key, tx, lsn, summary, per_topic, old_key_header + (unavailable or []))

    def truncate(self, msg: Truncate, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]) -> None:
        tx.other_changes = True
        for relation in msg.relations:
            table = self._schema_of(relation)
            if table is None or self._skip_t:
                summary.filtered += 1
                continue
            self._emit(table, "t", None, None, None, tx, lsn, summary, per_topic)

    def send_heartbeat(self) -> None:
        """Emit one heartbeat record, as Debezium does every ``heartbeat.interval.ms``."""
        topic = self.config.heartbeat_topic
        self.producer.ensure_topic(topic)
        ser = self.serializer
        fmt = self.fmt
        self.producer.send(
            topic,
            ser.key(ser.prefix(fmt.heartbeat_key_schema), {"serverName": self.config.topic_prefix}),
            ser.value(ser.prefix(fmt.heartbeat_value_schema), {"ts_ms": now_ms()}),
        )


def _identity_row(table: TableSchema, values: Any) -> dict[str, Any]:
    """A streamed row with its key fields, as a buffered chunk row's identity is read: a key column the column
    filters leave out of the value is still part of the key (and of the identity)."""
    row = table.row(values)
    return {**row, **table.key(row, values)} if table.has_key else row
