"""The one decoder: Kafka records of one offset slice to Arrow batches of converted events (runs on the executors).

Each record is parsed once. The JSON converter writes ``{"schema": …, "payload": …}`` and every record repeats
the same few kB of schema, so the schema part is recognised by its bytes (the previous record's envelope head
is compared first, a memcmp), hashed once per slice, and only the payload is parsed. The payload's row is
converted with its own schema's converters and mapped by name onto the *target* columns (a column the record
lacks takes the target's default: PostgreSQL filled it for existing rows without a change event).

The target is the driver's guess, taken before reading (the newest schema among the slices' last records, or
for schemaless records the lake table's columns plus what the sample suggests). The batches carry what the
driver needs to check that guess (:data:`walflow.lake.columns.STATS`): the schemas read and where, the JSON
kinds of schemaless columns being typed, and any record that could not be converted. Only when the guess was
wrong does the driver decode again, with the right target.

A value the lake type cannot hold is fitted by :func:`walflow.lake.values.column_array` (its exact text goes to
``_walflow_overflow``). A record that cannot be decoded at all, or a value whose converter fails, becomes a
problem row naming topic, partition, offset, column and value: the driver stops with it, unless the record is
listed in ``walflow.lake.accept.records`` (then the value is null with its text in ``_walflow_overflow``, or an
undecodable record is skipped and listed in the commit's summary).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from walflow.lake import columns as C
from walflow.lake.loose import LOOSE, json_kind
from walflow.lake.naming import sql_quote
from walflow.lake.positions import source_position
from walflow.lake.reader import Record, read_slice
from walflow.lake.types import RowShape, arrow_type
from walflow.lake.values import INVALID, column_array, has_temporal

SCHEMA_PREFIX = b'{"schema":'
PAYLOAD_SEPARATOR = b',"payload":'
_NULL_KEY_END = b',"payload":null}'
EVENT_OPS = ("c", "r", "u", "d", "t")


@dataclass(frozen=True)
class DecodePlan:
    """What the executors need to decode one topic's slices (pickled to them with the decoding function)."""

    topic: str
    kafka: dict[str, Any]
    #: the target: a Debezium value schema whose ``after`` fields are the lake columns
    value_schema: dict[str, Any]
    #: lake values of the target's column defaults
    defaults: dict[str, Any] = field(default_factory=dict)
    placeholders: tuple[Any, ...] = ()
    #: schemaless columns whose JSON kinds to report (their type is being inferred in this run)
    watch: tuple[str, ...] = ()
    #: (partition, offset) of records whose unconvertible values are accepted (walflow.lake.accept.records)
    accept: frozenset[tuple[int, int]] = frozenset()
    batch_rows: int = 20_000
    #: a batch is cut at this many bytes of records too, so that huge rows (arrays, documents) keep memory
    #: bounded and Arrow's 32-bit offsets of one batch never overflow
    batch_bytes: int = 64 * 1024 * 1024

    def columns(self) -> list[tuple[str, str]]:
        """The batches' columns as (name, Spark DDL type): :data:`FRAME_META`, the target's columns, :data:`STATS`."""
        shape = RowShape(self.value_schema)
        return [*C.FRAME_META, *((n, shape.types[n]) for n in shape.names), *C.STATS]

    def ddl(self) -> str:
        return ", ".join(f"{sql_quote(n)} {t}" for n, t in self.columns())


def split_records(records: Iterable[Record]) -> Iterator[tuple[str | None, str | None, int, int, bool, bytes | None, Any, int, str | None]]:
    """Split each record into its schema and its parsed payload; tombstones are dropped.

    Yields (schema hash, schema text on the first record of that schema here else None, partition, offset, keyed,
    key, payload, size in bytes, error). The hash of a record without a schema part is "". A record that is not
    JSON gives hash None, payload None and the error.
    """
    hashes: dict[bytes, str] = {}
    head = b""  # the previous record's bytes up to its payload, b'{"schema":...,"payload":'
    head_hash = ""
    for partition, offset, key, value in records:
        if value is None:
            continue
        text = None
        try:
            if head and value.startswith(head):
                schema_hash = head_hash
                payload = orjson.loads(value[len(head) : -1])
            else:
                schema_bytes = None
                if value.startswith(SCHEMA_PREFIX):
                    # A schema's own keys never include "payload", so the first separator ends it.
                    cut = value.find(PAYLOAD_SEPARATOR)
                    if cut > 0:
                        schema_bytes = value[len(SCHEMA_PREFIX) : cut]
                        head = value[: cut + len(PAYLOAD_SEPARATOR)]
                        payload = orjson.loads(value[len(head) : -1])
                if schema_bytes is None:
                    head = b""
                    doc = orjson.loads(value)
                    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
                        payload = doc["payload"]
                        schema_bytes = orjson.dumps(doc["schema"], option=orjson.OPT_SORT_KEYS) if doc["schema"] is not None else b""
                    else:
                        payload, schema_bytes = doc, b""
                schema_hash = hashes.get(schema_bytes)  # type: ignore[assignment]
                if schema_hash is None:
                    schema_hash = hashes[schema_bytes] = hashlib.sha1(schema_bytes).hexdigest() if schema_bytes else ""
                    text = schema_bytes.decode()
                head_hash = schema_hash
        except orjson.JSONDecodeError as exc:
            head = b""
            yield None, None, partition, offset, False, key, None, len(value), f"not JSON: {exc}"
            continue
        if payload is None:
            continue  # a null payload: the JSON converter's form of a tombstone
        # a key serialised with its schema still has a payload of null for a null key
        keyed = key is not None and not (key.startswith(SCHEMA_PREFIX) and key.endswith(_NULL_KEY_END))
        yield schema_hash, text, partition, offset, keyed, key, payload, len(value), None


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


class Decoder:
    """Decodes the slices of one topic into Arrow batches of :meth:`DecodePlan.columns`."""

    def __init__(self, plan: DecodePlan) -> None:
        self.plan = plan
        self.target = RowShape(plan.value_schema)
        self.names = self.target.names
        self.index = {n: i for i, n in enumerate(self.names)}
        self.schema = pa.schema([pa.field(n, arrow_type(t)) for n, t in plan.columns()])
        self.n_meta, self.n_data = len(C.FRAME_META), len(self.names)
        self.data_types = [(self.schema.field(self.n_meta + i).type) for i in range(self.n_data)]
        self.temporal = [has_temporal(t) for t in self.data_types]
        self.filled = [plan.defaults.get(n) for n in self.names]
        self.watch = set(plan.watch)
        # per schema hash: its shape and where each target column sits in its rows (-1: absent, use the default)
        self.shapes: dict[str, tuple[RowShape, list[int]]] = {"": (self.target, list(range(self.n_data)))}
        self.unknown: dict[tuple[str, ...], list[str]] = {}
        #: the target was built for records without a schema part (their columns are typed from JSON values)
        self.plan_schemaless = any(f.get("name") == LOOSE for f in self.target.fields)

    # -- the function handed to mapInArrow -------------------------------------------------------------
    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Read and decode the (topic, partition, start, end) tasks of Arrow batches ``tasks``."""
        for batch in tasks:
            for task in batch.to_pylist():
                yield from self.decode(read_slice(self.plan.kafka, task["topic"], task["partition"], task["start"], task["end"]))

    def shape_of(self, schema_hash: str, schema_text: str | None) -> tuple[RowShape, list[int]]:
        """The shape of a record's schema and where each target column sits in its converted values."""
        known = self.shapes.get(schema_hash)
        if known is None:
            if schema_text is None:
                raise ValueError(f"schema {schema_hash} came without its text")
            shape = RowShape(orjson.loads(schema_text))
            positions = {n: i for i, n in enumerate(shape.names)}
            known = self.shapes[schema_hash] = (shape, [positions.get(n, -1) for n in self.names])
        return known

    def decode(self, records: Iterable[Record]) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        placeholders, accept, topic = plan.placeholders, plan.accept, plan.topic
        width = len(self.schema)
        n_meta, n_data = self.n_meta, self.n_data
        filled, empty = self.filled, [None] * n_data
        kinds: dict[str, set[str]] = {}
        columns: list[list[Any]] = [[] for _ in range(width)]
        overflow: dict[int, list[tuple[str, str]]] = {}
        size = 0
        last_source: tuple[Any, Any] | None = None
        key_seen = False
        # schema texts: each goes out once per slice, with the first event of its schema that is written
        texts: dict[str, str] = {}
        sent: set[str] = set()

        def problem(partition: int, offset: int, column: str | None, value: Any, error: str, accepted: bool = False, schemaless: bool = False) -> None:
            doc: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "column": column, "error": error}
            if schemaless:
                doc["schemaless"] = True
            if accepted:
                doc["accepted"] = True
            if value is not None:
                doc["value"] = _short(value)
            row: list[Any] = [None] * width
            row[1], row[2] = partition, offset
            row[width - 2] = orjson.dumps(doc).decode()
            for column_values, v in zip(columns, row):
                column_values.append(v)

        def convert(shape: RowShape, image: dict[str, Any], partition: int, offset: int) -> tuple[list[Any], list[str], list[Any]] | None:
            try:
                values, toasted = shape.convert(image, placeholders)
                return values, toasted, []
            except Exception:  # noqa: BLE001 - found again below, with its column and value
                values, toasted, failures = shape.convert_leniently(image, placeholders)
                if (partition, offset) in accept:
                    return values, toasted, failures
                column, value, why = failures[0] if failures else (None, image, "conversion failed")
                problem(partition, offset, column, value, why, schemaless=shape is self.target and self.plan_schemaless)
                return None

        for schema_hash, schema_text, partition, offset, keyed, key, payload, nbytes, error in split_records(records):
            size += nbytes
            if schema_text is not None:
                texts[schema_hash] = schema_text  # type: ignore[index]
            accepted = (partition, offset) in accept
            if error is not None or not isinstance(payload, dict) or "op" not in payload:
                problem(partition, offset, None, None if error else payload, error or "not a change event (no 'op' in its payload)", accepted)
                continue
            try:
                shape, order = self.shape_of(schema_hash, texts.get(schema_hash))  # type: ignore[arg-type]
                op = payload["op"]
                source = payload.get("source") or {}
                a, b, c = source_position(source, payload.get("transaction"))
                lsn, ts = source.get("lsn"), source.get("ts_ms")
                row = payload.get("after") if op != "d" else payload.get("before")
                old = payload.get("before") if op == "u" and not keyed else None
            except Exception as exc:  # noqa: BLE001 - a malformed event, reported with its place
                problem(partition, offset, None, payload, f"{type(exc).__name__}: {exc}", accepted)
                continue
            images: list[tuple[Any, int, bool]] = []
            if old is not None:
                # an update without a key: its old row leaves (sign -1), its new row arrives (sign +1)
                images.append((convert(shape, old, partition, offset), -1, False))
            images.append((convert(shape, row, partition, offset) if row is not None else (empty, [], []), -1 if op == "d" else 1, True))
            if any(image is None for image, _sign, _event in images):
                continue  # reported
            if schema_hash == "" and row is not None:
                self._track(row, kinds)
            name = (source.get("schema"), source.get("table"))
            changed = name != last_source
            last_source = name
            for (values, toasted, failures), sign, event in images:
                if failures:
                    overflow.setdefault(len(columns[0]), []).extend((n, _short(v, 10_000)) for n, v, _why in failures)
                data = values if values is empty else [values[j] if j >= 0 else default for j, default in zip(order, filled)]
                for column_values, v in zip(columns, (op, partition, offset, lsn, ts, toasted, a, b, c, sign, None)):
                    column_values.append(v)
                for column_values, v in zip(columns[n_meta:], data):
                    column_values.append(v)
                if event:
                    text = None
                    if schema_hash not in sent:
                        text = texts.get(schema_hash)  # type: ignore[arg-type]
                        sent.add(schema_hash)  # type: ignore[arg-type]
                    stats = (schema_hash, text, keyed, key if keyed and not key_seen else None,
                             name[0] if changed else None, name[1] if changed else None, None, None)
                else:
                    stats = (schema_hash, None, keyed, None, None, None, None, None)
                for column_values, v in zip(columns[n_meta + n_data :], stats):
                    column_values.append(v)
            key_seen = key_seen or keyed
            if len(columns[0]) >= plan.batch_rows or size >= plan.batch_bytes:
                yield self._flush(columns, overflow, kinds)
                columns = [[] for _ in range(width)]
                overflow, kinds, size = {}, {}, 0
        if columns[0] or kinds:
            yield self._flush(columns, overflow, kinds)

    def _track(self, row: dict[str, Any] | None, kinds: dict[str, set[str]]) -> None:
        """Note the JSON kinds of the schemaless columns being typed, and of columns the target lacks."""
        if row is None:
            return
        names = tuple(row)
        unknown = self.unknown.get(names)
        if unknown is None:
            unknown = self.unknown[names] = [n for n in names if n not in self.index or n in self.watch]
        for name in unknown:
            seen = kinds.setdefault(name, set())
            kind = json_kind(row.get(name))
            if kind is not None:
                seen.add(kind)

    def _flush(self, columns: list[list[Any]], overflow: dict[int, list[tuple[str, str]]], kinds: dict[str, set[str]]) -> pa.RecordBatch:
        n_meta, width = self.n_meta, len(self.schema)
        if not columns[0]:  # only kinds to report: one row that is no event
            for column_values in columns:
                column_values.append(None)
        if kinds:
            columns[-1][-1] = orjson.dumps({n: sorted(k) for n, k in kinds.items()}).decode()
        arrays: dict[int, pa.Array] = {}
        for i in range(n_meta, n_meta + self.n_data):
            array, fitted = column_array(columns[i], self.schema.field(i).type, self.temporal[i - n_meta])
            name = self.names[i - n_meta]
            for row, (status, text) in fitted.items():
                overflow.setdefault(row, []).append((name, text))
                where = (columns[1][row], columns[2][row])
                if status == INVALID and where not in self.plan.accept and columns[width - 2][row] is None:
                    # a value of the wrong kind for its column: the record is malformed; the driver stops with it
                    columns[width - 2][row] = orjson.dumps(
                        {"topic": self.plan.topic, "partition": where[0], "offset": where[1], "column": name, "value": _short(text),
                         "error": f"not a value of the column's type ({self.schema.field(i).type})", "schemaless": self.plan_schemaless}
                    ).decode()
            arrays[i] = array
        columns[_OVERFLOW_AT] = [overflow.get(row) for row in range(len(columns[0]))]
        batch = [arrays[i] if i in arrays else pa.array(values, type=self.schema.field(i).type) for i, values in enumerate(columns)]
        return pa.RecordBatch.from_arrays(batch, schema=self.schema)


_OVERFLOW_AT = [name for name, _t in C.FRAME_META].index(C.OVERFLOW)
