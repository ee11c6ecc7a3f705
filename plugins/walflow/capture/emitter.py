"""Snapshot rows as Debezium's ``r`` records: the serialised parts assembled around each row's JSON, the
``source.snapshot`` markers of each table's first and last rows, and the records queued a run at a time.

Initial snapshots (:mod:`walflow.capture.snapshot`, and the reader processes of
:mod:`walflow.capture.snapshot_workers`) and incremental snapshots' chunks (:mod:`walflow.capture.incremental`) emit
through one :class:`SnapshotEmitter`: snapshots are the hottest path walflow has, and the records of both must be the
same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import orjson

from walflow.capture.context import CaptureContext
from walflow.errors import ConversionError, RecordTooLargeError
from walflow.kafka import ENCODE_RUN, too_large
from walflow.records.events import TableSchema
from walflow.source.lsn import Lsn

#: what :meth:`SnapshotEmitter.encoder` gives: a row's key and record value, from its values (and a source block)
Encode = Callable[..., tuple[bytes | None, bytes]]


class SnapshotEmitter:
    """Turns snapshot rows into ``r`` events and sends them; holds each table's last event back.

    ``source.snapshot`` follows Debezium: ``last`` for the snapshot's very last row, ``first`` for the first row of
    the first table, then ``last_in_data_collection`` and
    ``first_in_data_collection`` for each table's last and first rows, ``true`` otherwise. Holding one event per
    table back until the end lets the very last one become ``last`` whichever table it is from.

    :param context: the task's context: its configuration, its producer, its event format and serializer.
    :param table_order: the data collections in the order of the snapshot (Debezium's order).
    """

    def __init__(
        self,
        context: CaptureContext,
        database: str,
        position_lsn: int | None,
        xid: int | None,
        marker_kind: str = "initial",
        table_order: list[str] | None = None,
    ) -> None:
        self.config = context.config
        self.producer = context.producer
        self.database = database
        self.position_lsn = position_lsn
        self.xid = xid
        self.fmt = context.fmt
        self.started_us = time.time_ns() // 1000
        self.kind = marker_kind  # "initial" or "incremental"
        self.table_order = table_order or []
        self.first_table = self.table_order[0] if self.table_order else None
        self._ser = context.serializer
        #: what a row that cannot be built does (event.processing.failure.handling.mode)
        self.failures = context.failures
        #: rows left out here under that key's warn or skip
        self.left_out = 0
        #: held last rows: (key, table, after, whether it is also the first row of the first table)
        self._held: list[tuple[bytes | None, TableSchema, dict[str, Any], bool]] = []
        self.rows = 0

    def source(self, table: TableSchema, marker: str) -> dict[str, Any]:
        lsn = self.position_lsn
        return self.fmt.source(
            self.config.topic_prefix, self.database, table.schema, table.table, ts_us=self.started_us, snapshot=marker,
            sequence=f'[null,"{lsn}"]' if lsn is not None else None, tx_id=self.xid, lsn=lsn,
        )  # fmt: skip

    def encoder(
        self, table: TableSchema, marker: str, middle: bytes | None = None
    ) -> Callable[..., tuple[bytes | None, bytes]]:
        """``encode(values, middle=None)``: a row's key and record value, the value assembled from pre-serialised
        parts (schema, source block with ``marker`` or the given ``middle``, or the one passed to ``encode``) around
        the row's JSON: snapshots are the hottest path walflow has. The row goes straight to JSON where the table
        allows it (:attr:`TableSchema.json_row`), else through its dict; the event row itself, which a caller needs
        only for a row it holds back or reports, is ``table.row(values)``.

        :raises ConversionError: for a value its column's converter refuses (naming the column and the value).
        """
        ser = self._ser
        fmt = self.fmt
        key_prefix = table.key_schema_json
        key_schemas = ser.key_schemas
        has_key = table.has_key
        key_names = [f.name for f in table.key_fields]
        key_only = bool(table.key_only)
        json_row = table.json_row
        row = table.row
        dumps = orjson.dumps
        join = b"".join
        head = b'{"before":null,"after":'
        tail = fmt.processing_tail()
        if ser.value_schemas:
            head, tail = table.value_schema_json + head, tail + b"}"
        regular = middle if middle is not None else self.middle(table, marker)
        ts = fmt.processing_time()
        count = 0

        def encode(values: Sequence[Any], middle: bytes | None = None) -> tuple[bytes | None, bytes]:
            nonlocal count, ts
            after = row(values)
            if has_key:
                key = ser.key(
                    key_prefix, {k: after[k] for k in key_names} if not key_only else table.key(after, values)
                )
            else:
                key = None
            count += 1
            if count & 0x1FFF == 0:
                ts = fmt.processing_time()
            return key, join((head, dumps(after), regular if middle is None else middle, ts, tail))

        if json_row is None:
            return encode

        def encode_json(values: Sequence[Any], middle: bytes | None = None) -> tuple[bytes | None, bytes]:
            nonlocal count, ts
            try:
                row_json, key_json = json_row(values)
            except (ValueError, ArithmeticError):
                row(values)  # raises the ConversionError that names the column and its value
                raise
            count += 1
            if count & 0x1FFF == 0:
                ts = fmt.processing_time()
            key = (join((key_prefix, key_json, b"}")) if key_schemas else key_json) if has_key else None
            return key, join((head, row_json, regular if middle is None else middle, ts, tail))

        return encode_json

    def building(
        self, table: TableSchema, encode: Encode, position: str
    ) -> Callable[..., tuple[bytes | None, bytes] | None]:
        """``encode`` giving None for a row that cannot be built, which is left out as
        ``event.processing.failure.handling.mode`` says (its key columns' values and ``position`` name it); only
        for a mode that leaves events out (:attr:`EventFailures.tolerant`)."""
        failures = self.failures

        def build(values: Sequence[Any], middle: bytes | None = None) -> tuple[bytes | None, bytes] | None:
            try:
                return encode(values, middle)
            except ConversionError as exc:
                key = {f.name: values[f.index] for f in table.key_fields}
                failures.left_out(exc, table.schema, table.table, f"{position}, row with key {key}")
                self.left_out += 1
                return None

        return build

    def position(self) -> str:
        """Where this snapshot reads, as a left-out row's position says it."""
        if self.kind == "incremental":
            return "an incremental snapshot's chunk"
        return f"the snapshot at LSN {Lsn(self.position_lsn)}" if self.position_lsn is not None else "the snapshot"

    def middle(self, table: TableSchema, marker: str) -> bytes:
        """The serialised part of a value from its source block (with ``marker``) to its processing time."""
        source_key, after_source = self.fmt.envelope_parts("r")
        return source_key + orjson.dumps(self.source(table, marker)) + after_source

    def table_rows(self, table: TableSchema, rows: Iterator[Sequence[Any]]) -> int:
        """Emit every row of one table; return how many.

        The table's last row is held back for its ``last``/``last_in_data_collection`` marker (an incremental
        snapshot's is sent as it is).
        """
        incremental = self.kind == "incremental"
        is_first_table = not incremental and table.data_collection == self.first_table
        first = None if incremental else self.middle(table, "first" if is_first_table else "first_in_data_collection")
        encode = self.encoder(table, "incremental" if incremental else "true")
        count, _, last = self.send_rows(table, rows, encode, first_middle=first)
        if last is not None:
            key, value, values = last
            if incremental:
                try:
                    self.producer.send(table.topic, key, value, self.fmt.context_headers or None)
                except RecordTooLargeError as exc:
                    raise self._too_large(exc, table, table.row(values)) from None
            else:
                self._held.append((key, table, table.row(values), is_first_table and count == 1))
        self.rows += count
        return count

    def send_rows(
        self,
        table: TableSchema,
        rows: Iterable[Sequence[Any]],
        encode: Callable[..., tuple[bytes | None, bytes]],
        first_middle: bytes | None = None,
        hold_first: bool = False,
    ) -> tuple[int, tuple[bytes | None, Sequence[Any]] | None, tuple[bytes | None, bytes, Sequence[Any]] | None]:
        """Encode and queue ``rows`` but the last (and the first, with ``hold_first``), :data:`ENCODE_RUN` rows at
        a time as :meth:`EventProducer.send_all` does; return the count, the first row's key and values when held,
        and the last row's key, record value and values, which the caller holds back for its marker or sends.

        ``first_middle``: the source block of the first row's record, when its marker differs from the rest's.
        :raises RecordTooLargeError: naming the row Kafka refused (the rows before it are queued).
        """
        send_records = self.producer.send_records
        headers = self.fmt.context_headers or None
        topic = table.topic
        count = 0
        first: tuple[bytes | None, Sequence[Any]] | None = None
        last: tuple[bytes | None, bytes, Sequence[Any]] | None = None
        rows = iter(rows)
        build = self.building(table, encode, self.position()) if self.failures.tolerant else None
        read_before = False
        while block := list(islice(rows, ENCODE_RUN)):
            starting, read_before = not read_before, True
            records: list[tuple[bytes | None, bytes]]
            if build is not None:
                # rows that cannot be built are left out where they are: the first row's marker stays with it
                # (Debezium marks rows by their place in the table, whether or not their event is built)
                built = [build(block[0], first_middle) if starting and first_middle is not None else build(block[0])]
                built += [build(values) for values in islice(block, 1, None)]
                records, kept = [], []
                for record, values in zip(built, block):
                    if record is not None:
                        records.append(record)
                        kept.append(values)
                block = kept
                if not block:
                    continue
                starting = count == 0  # a reader process holds back its first row that was built
            elif starting and first_middle is not None:
                records = [encode(block[0], first_middle), *[encode(values) for values in islice(block, 1, None)]]
            else:
                records = [encode(values) for values in block]
            count += len(block)
            if starting and hold_first:
                first = (records[0][0], block[0])
                del records[0], block[0]
            if last is not None:  # the previous run's last row: not the table's last after all
                records.insert(0, last[:2])
                block.insert(0, last[2])
            if not records:
                continue
            key, value = records.pop()
            last = (key, value, block.pop())
            queued = self.producer.sent
            try:
                send_records(topic, records, headers)
            except RecordTooLargeError as exc:
                raise self._too_large(exc, table, table.row(block[self.producer.sent - queued])) from None
        return count, first, last

    def finish(self) -> None:
        """Send the held last events (the tables were read in order): the final one is the snapshot's ``last``."""
        for i, (key, table, after, only_row_of_first_table) in enumerate(self._held):
            if i == len(self._held) - 1:
                marker = "last"
            else:
                marker = "first" if only_row_of_first_table else "last_in_data_collection"
            self.send_marked(table, key, after, marker)
        self._held.clear()

    def send_marked(self, table: TableSchema, key: bytes | None, after: dict[str, Any], marker: str) -> None:
        """Send one row held back for its ``source.snapshot`` marker."""
        payload = self.fmt.envelope(None, after, self.source(table, marker), "r", None)
        try:
            self.producer.send(
                table.topic, key, self._ser.value(table.value_schema_json, payload), self.fmt.context_headers or None
            )
        except RecordTooLargeError as exc:
            raise self._too_large(exc, table, after) from None

    def _too_large(
        self, exc: RecordTooLargeError, table: TableSchema, row: dict[str, Any] | None
    ) -> RecordTooLargeError:
        key = {f.name: row.get(f.name) for f in table.key_fields} if (row is not None and table.has_key) else None
        return too_large(
            exc,
            table=table.data_collection,
            key=key,
            lsn=self.position_lsn,
            row=row,
            what="The snapshot stopped before producing it and is taken again from the start by the next setup run",
        )
