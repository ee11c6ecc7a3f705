"""Debezium's records for one streaming batch: change events, tombstones, transaction metadata, logical
decoding messages and heartbeats, from the messages :mod:`walflow.source.pgoutput` decodes.

:class:`~walflow.capture.stream.batch.StreamBatch` reads the slot and decides how far it may move,
:class:`~walflow.capture.stream.dispatch.Dispatcher` routes each message; :class:`ChangeEvents` only builds and sends
records, so what a record looks like is decided here, in one place, for every path of the stream.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from walflow.capture.context import CaptureContext
from walflow.capture.stream.transactions import Transaction, TransactionRecords
from walflow.config.patterns import compile_patterns
from walflow.errors import RecordTooLargeError
from walflow.kafka import too_large
from walflow.names import topic_name
from walflow.records.convert import BYTEA, ConverterSettings, build_converter
from walflow.records.events import TableSchema, now_ms
from walflow.records.facts import UNAVAILABLE_HEADER
from walflow.source.catalog import ColumnType
from walflow.source.lsn import Lsn
from walflow.source.pgoutput import (
    UNCHANGED_TOAST,
    Delete,
    Insert,
    Message,
    Update,
)
from walflow.source.signals import printable

if TYPE_CHECKING:
    from walflow.capture.batches import BatchSummary

log = logging.getLogger(__name__)


#: the class Debezium names each logical decoding message's data collection after (with an identity hash)
_MESSAGE_MONITOR = "io.debezium.connector.postgresql.LogicalDecodingMessageMonitor$LogicalDecodingMessageId"

#: what a change too large for Kafka did to the batch, quoted in the error (walflow.kafka.too_large)
_STOPPED = (
    "The batch stopped before producing it; the slot moves only up to the end of the transaction before it, so this "
    "change and every later one wait until the fix"
)


class ChangeEvents:
    """Builds and sends the records of one batch's changes, keeping what Debezium's records carry from one change
    to the next: the end of the last commit read (``source.sequence``), its time, the transaction counters.
    """

    def __init__(self, context: CaptureContext) -> None:
        self.config = config = context.config
        self.producer = producer = context.producer
        self.serializer = serializer = context.serializer
        self.fmt = fmt = context.fmt
        #: what an event that cannot be built does (event.processing.failure.handling.mode)
        self.failures = context.failures
        #: Debezium's transaction metadata (BEGIN/END records, each event's transaction block)
        self.transactions = TransactionRecords(context)
        self._msg_key_json = serializer.prefix(fmt.message_key_schema)
        self._msg_value_json = serializer.prefix(fmt.message_value_schema)
        #: the context headers every data change event carries (none in the pre-2.6 form)
        self._headers = fmt.context_headers or None
        # a message's content is represented as a bytea column's value is (binary.handling.mode)
        content = build_converter(ColumnType(oid=BYTEA), ConverterSettings.from_config(config))
        assert content is not None
        convert = content.convert

        def message_content(data: bytes) -> Any:
            return convert("\\x" + data.hex())

        self._content: Callable[[bytes], Any] = message_content
        # <prefix>.message: Debezium names it with a dot whatever topic.delimiter says
        self._message_topic = topic_name(config.topic_prefix, "message")
        self._message_include = compile_patterns(config.message_prefix_include_list, "'message.prefix.include.list'")
        self._message_exclude = compile_patterns(config.message_prefix_exclude_list, "'message.prefix.exclude.list'")
        skipped = set(config.skipped_operations)
        self._skip_c, self._skip_u, self._skip_d, self._skip_t = (
            "c" in skipped,
            "u" in skipped,
            "d" in skipped,
            "t" in skipped,
        )
        self._skip_unchanged = config.skip_messages_without_change
        #: name unchanged TOASTed values written as null in a header, for the lake (records.facts.UNAVAILABLE_HEADER)
        self._unavailable = config.walflow_lake_enabled
        #: a producer behind a transform chain takes the events unserialised (walflow.transforms.producer)
        self._send_event: Callable[..., None] | None = getattr(producer, "send_event", None)
        self._send_row: Callable[..., None] | None = getattr(producer, "send_row", None)
        self._send_row_json: Callable[..., None] | None = getattr(producer, "send_row_json", None)
        #: the database name in ``source.db`` (known once the batch has connected)
        self.database = ""
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
            self.transactions.block(tx, table.data_collection, lsn)
            payload = None
        else:
            payload = self.fmt.envelope(
                before, after, self._source(table, tx, lsn), op, self.transactions.block(tx, table.data_collection, lsn)
            )
        if headers is None:
            headers = self._headers
        elif self._headers:
            headers = headers + self._headers
        try:
            if payload is None:
                assert self._send_row is not None  # no envelope is built only for a producer that takes rows
                self._send_row(table.topic, table.key_schema_json, key, table.value_schema_json, after, headers)
            elif self._send_event is not None:
                self._send_event(table.topic, table.key_schema_json, key, table.value_schema_json, payload, headers)
            else:
                ser = self.serializer
                key_bytes = ser.key(table.key_schema_json, key) if key is not None else None
                self.producer.send(table.topic, key_bytes, ser.value(table.value_schema_json, payload), headers)
        except RecordTooLargeError as exc:
            raise too_large(
                exc,
                table=table.data_collection,
                key=key,
                lsn=lsn,
                row=after if after is not None else before,
                what=_STOPPED,
            ) from None
        self._counted(table, op, tx, lsn, summary, per_topic)

    def _counted(
        self, table: TableSchema, op: str, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """One change event produced: the batch's counts and its last event."""
        summary.events += 1
        summary.ops[op] = summary.ops.get(op, 0) + 1
        per_topic[table.topic] += 1
        self.last_emit = (op, table, lsn, tx.commit_ms)

    def _emit_json(
        self,
        table: TableSchema,
        op: str,
        values: Sequence[Any],
        tx: Transaction,
        lsn: int,
        summary: BatchSummary,
        per_topic: Counter[str],
    ) -> None:
        """:meth:`_emit` of a created row under a plain ExtractNewRecordState, serialised from the tuple at once."""
        try:
            json_row = table.json_row
            assert json_row is not None and self._send_row_json is not None  # insert() chose this path for them
            row_json, key_json = json_row(values)
        except (ValueError, ArithmeticError):
            table.row(values)  # raises the ConversionError that names the column and its value
            raise
        # counted in its transaction once built: an event left out (walflow.capture.failures) is not counted
        if tx.begun and not self.config.provide_transaction_metadata:
            # what TransactionRecords.block does then, inline: this is the stream's hottest path under the transform
            tx.total += 1
        else:
            self.transactions.block(tx, table.data_collection, lsn)
        try:
            self._send_row_json(
                table.topic,
                table.key_schema_json,
                key_json if table.has_key else None,
                table.value_schema_json,
                row_json,
                self._headers,
            )
        except RecordTooLargeError as exc:
            after = table.row(values)
            key = table.key(after, values) if table.has_key else None
            raise too_large(exc, table=table.data_collection, key=key, lsn=lsn, row=after, what=_STOPPED) from None
        self._counted(table, op, tx, lsn, summary, per_topic)

    def _tombstone(
        self, table: TableSchema, key: dict[str, Any] | None, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        """The tombstone after a delete: the delete's key (null for a keyless table) and no value."""
        key_bytes = self.serializer.key(table.key_schema_json, key) if key is not None else None
        if headers is None:
            headers = self._headers
        elif self._headers:
            headers = headers + self._headers
        self.producer.send(table.topic, key_bytes, None, headers)

    def message(
        self, msg: Message, tx: Transaction | None, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """A logical decoding message (``pg_logical_emit_message``) as Debezium's ``op: m`` event on
        ``<prefix>.message``."""
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
            collection = f"{_MESSAGE_MONITOR}@{random.getrandbits(31):x}"
            transaction = self.transactions.block(tx, collection, lsn)
        else:
            # not part of a transaction: Debezium treats it as a commit of its own (it becomes the last commit
            # LSN) and describes it with the last commit time it read, without a txId
            self.previous_commit_lsn = lsn
            ts_us = self.last_commit_us if self.last_commit_us is not None else time.time_ns() // 1000
            source = fmt.source(
                self.config.topic_prefix, self.database, "", "", ts_us=ts_us, sequence=self.sequence(lsn), lsn=lsn
            )
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
            self.producer.send(
                self._message_topic,
                ser.key(self._msg_key_json, {"prefix": prefix}),
                ser.value(self._msg_value_json, payload),
            )
        except RecordTooLargeError as exc:
            if self.config.walflow_message_oversized_handling_mode == "skip":
                # a message is never table data: with the operator's consent it is left out, said where it was
                warning = (
                    f"left out the logical decoding message with prefix {printable(prefix)!r} at LSN {Lsn(lsn)}: "
                    f"{exc.size} bytes as a record, more than message.max.bytes={exc.limit} "
                    "(walflow.message.oversized.handling.mode=skip)"
                )
                log.warning("connector %s: %s", self.config.name, warning)
                summary.warnings.append(warning)
                return
            raise RecordTooLargeError(
                f"the logical decoding message with prefix {printable(prefix)!r} at LSN {Lsn(lsn)} is {exc.size} "
                f"bytes as a record: more than the producer's message.max.bytes={exc.limit} (topic {exc.topic!r}). "
                "Nothing from its "
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

    def insert(
        self, msg: Insert, table: TableSchema, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """The ``c`` event of a captured table's insert."""
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
        key = table.key(after, msg.new) if table.has_key else None
        self._emit(table, "c", None, after, key, tx, lsn, summary, per_topic)

    def update(
        self, msg: Update, table: TableSchema, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """The ``u`` event of a captured table's update, or a key change's delete and create."""
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
        old_key = table.key(before, msg.old) if (table.has_key and before is not None and msg.old is not None) else None
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

    def delete(
        self, msg: Delete, table: TableSchema, tx: Transaction, lsn: int, summary: BatchSummary, per_topic: Counter[str]
    ) -> None:
        """The ``d`` event of a captured table's delete, and its tombstone."""
        if self._skip_d:
            summary.filtered += 1
            return
        before = table.before_row(msg.old) if msg.old_is_key else table.row(msg.old)
        key = table.key(before, msg.old) if table.has_key else None
        self._emit(table, "d", before, None, key, tx, lsn, summary, per_topic)
        if self.config.tombstones_on_delete:
            self._tombstone(table, key)

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

    def truncate(
        self,
        tables: Iterable[TableSchema | None],
        tx: Transaction,
        lsn: int,
        summary: BatchSummary,
        per_topic: Counter[str],
    ) -> None:
        """A TRUNCATE's ``t`` events, one per captured table it names (``None``: a table not captured)."""
        tx.other_changes = True
        for table in tables:
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
