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

import gc
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from walflow.lake import columns as C
from walflow.lake.evolution import Mapping
from walflow.lake.loose import LOOSE, json_kind
from walflow.lake.naming import sql_quote
from walflow.lake.positions import initial_snapshot_row, position
from walflow.lake.reader import NO_KEY, Record, key_payload, read_slice
from walflow.lake.types import RowShape, arrow_type
from walflow.lake.values import INVALID, column_array, has_temporal
from walflow.records.facts import UNAVAILABLE_HEADER

SCHEMA_PREFIX = b'{"schema":'
PAYLOAD_SEPARATOR = b',"payload":'
_NULL_KEY_END = b',"payload":null}'
EVENT_OPS = ("c", "r", "u", "d", "t")


#: the ops of events that carry a row (and so a key, when the table has one)
_ROW_OPS = frozenset(("c", "u", "d", "r"))


def _key_shape(key: bytes) -> Any:
    """What tells two record keys' shapes apart, cheaply: a key's schema part when it has one (bytes compared, no
    parsing), else its field names."""
    if key.startswith(SCHEMA_PREFIX):
        at = key.find(PAYLOAD_SEPARATOR)
        return key[:at] if at > 0 else key
    try:
        doc = orjson.loads(key)
    except orjson.JSONDecodeError:
        return key
    return tuple(doc) if isinstance(doc, dict) else key


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
    #: the target's columns by source attribute, so that records written before a rename map onto the renamed
    #: column (:mod:`walflow.lake.evolution`); None maps by name
    mapping: Mapping | None = None
    #: (the initial snapshot's consistent point, {partition: the offset its records start at}) from the newest start
    #: fact: the first transaction streamed after that snapshot has no previous commit (``source.sequence`` [null,
    #: L]) and may have written its changes before the consistent point (it committed after it), so its commit
    #: position is taken as at least that point: it is newer than every row of the snapshot. None: no start fact.
    first_commit: tuple[int, dict[int, int]] | None = None
    #: ``binary.handling.mode`` is base64: a bytea's unchanged TOASTed value may be null (LakeSettings)
    binary_placeholder_null: bool = False
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


class Source(msgspec.Struct):
    """The fields of an event's ``source`` block the job reads (the others are skipped, not parsed into objects)."""

    lsn: Any = None
    sequence: Any = None
    ts_ms: Any = None
    schema: Any = None
    table: Any = None


class Transaction(msgspec.Struct):
    total_order: Any = None


class Envelope(msgspec.Struct):
    """The fields of a change event the decoder reads. Parsing straight into these skips every other field of
    the payload (``ts_us``, ``ts_ns``, most of ``source``...) without building it: about half of orjson's time
    for a whole payload as a dict."""

    op: Any = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: Source | None = None
    transaction: Transaction | None = None


_ENVELOPE = msgspec.json.Decoder(Envelope)


def _typed(payload: bytes) -> Any:
    """The payload as an :class:`Envelope`; a payload of another shape as orjson parses it (the decoder reports
    it, as it reports anything that is not a change event)."""
    try:
        return _ENVELOPE.decode(payload)
    except msgspec.ValidationError:
        return orjson.loads(payload)


def _as_envelope(payload: Any) -> Any:
    if isinstance(payload, dict):
        try:
            return msgspec.convert(payload, Envelope)
        except msgspec.ValidationError:
            return payload
    return payload


class SplitRecord(NamedTuple):
    """One Kafka record as :func:`split_records` yields it: its schema part recognised, its payload parsed."""

    #: sha1 of the schema part's bytes; "" for a record without one (or a tombstone); None for a record that is
    #: not JSON (then ``error`` says why)
    schema_hash: str | None
    #: the schema part's text on the first record of that schema in this call, else None (sent once per slice)
    schema_text: str | None
    partition: int
    offset: int
    #: the record has a key (a key serialised with its schema part whose payload is null has none)
    keyed: bool
    key: bytes | None
    #: the parsed payload: with ``typed`` an :class:`Envelope` for a change event, else what orjson parses (a dict
    #: for a change event); None for a tombstone or a record that is not JSON
    payload: Any
    #: the record value's size in bytes (0 for a tombstone)
    size: int
    #: why the record could not be parsed, else None
    error: str | None


#: a :class:`SplitRecord` as a plain tuple of its fields in order, as :func:`_split_tuples` yields it
_SplitTuple = tuple[str | None, str | None, int, int, bool, bytes | None, Any, int, str | None]


def split_records(records: Iterable[Record], typed: bool = False, tombstones: bool = False) -> Iterator[SplitRecord]:
    """Split each record into its schema and its parsed payload (:class:`SplitRecord`); tombstones are dropped, or
    with ``tombstones`` yielded with the hash "" and the payload None.

    The hash of a record without a schema part is "". A record that is not JSON gives hash None, payload None and
    the error. With ``typed`` a change event's payload is an :class:`Envelope` (the decoder's form), anything else
    the value orjson parses; otherwise a dict.
    """
    return map(SplitRecord._make, _split_tuples(records, typed, tombstones))


def _split_tuples(records: Iterable[Record], typed: bool = False, tombstones: bool = False) -> Iterator[_SplitTuple]:
    """:func:`split_records` yielding plain tuples, for the decoder's per-record loop on the executors: building a
    NamedTuple costs about four times a tuple literal (``_make`` and ``tuple.__new__`` alike: a second allocation),
    and unpacking one leaves CPython's exact-tuple fast path; together about 14% of this loop, 7% of decoding."""
    loads = _typed if typed else orjson.loads
    hashes: dict[bytes, str] = {}
    head = b""  # the previous record's bytes up to its payload, b'{"schema":...,"payload":'
    head_hash = ""
    for partition, offset, key, value in records:
        if value is None:
            if tombstones:
                yield "", None, partition, offset, _has_key(key), key, None, 0, None
            continue
        text = None
        try:
            if head and value.startswith(head):
                schema_hash = head_hash
                payload = loads(value[len(head) : -1])
            else:
                schema_bytes = None
                if value.startswith(SCHEMA_PREFIX):
                    # A schema's own keys never include "payload", so the first separator ends it.
                    cut = value.find(PAYLOAD_SEPARATOR)
                    if cut > 0:
                        schema_bytes = value[len(SCHEMA_PREFIX) : cut]
                        head = value[: cut + len(PAYLOAD_SEPARATOR)]
                        payload = loads(value[len(head) : -1])
                if schema_bytes is None:
                    head = b""
                    # a record without a schema part is the payload itself (an envelope with an op)
                    plain = _plain_event(value) if typed else None
                    if plain is not None:
                        payload, schema_bytes = plain, b""
                    else:
                        doc = orjson.loads(value)
                        if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
                            payload = doc["payload"]
                            schema_bytes = (
                                orjson.dumps(doc["schema"], option=orjson.OPT_SORT_KEYS)
                                if doc["schema"] is not None
                                else b""
                            )
                        else:
                            payload, schema_bytes = doc, b""
                        if typed:
                            payload = _as_envelope(payload)
                known = hashes.get(schema_bytes)
                if known is None:
                    known = hashes[schema_bytes] = hashlib.sha1(schema_bytes).hexdigest() if schema_bytes else ""
                    text = schema_bytes.decode()
                head_hash = schema_hash = known
        except (ValueError, msgspec.DecodeError, RecursionError) as exc:
            # not JSON, text that is not UTF-8 (a UnicodeDecodeError is a ValueError), or nesting deeper than the
            # parsers go: a problem record like any other (walflow.lake.accept.records skips it)
            head = b""
            # the record's start, so that the error shows what it holds (text, or the bytes escaped)
            start = value[:120].decode("utf-8", errors="backslashreplace")
            more = f"… ({len(value)} bytes)" if len(value) > 120 else ""
            yield None, None, partition, offset, False, key, None, len(value), f"not JSON ({exc}): {start!r}{more}"
            continue
        if payload is None:
            continue  # a null payload: the JSON converter's form of a tombstone
        yield schema_hash, text, partition, offset, _has_key(key), key, payload, len(value), None


def _has_key(key: bytes | None) -> bool:
    # a key serialised with its schema still has a payload of null for a null key
    return key is not None and not (key.startswith(SCHEMA_PREFIX) and key.endswith(_NULL_KEY_END))


def _key_image(key: bytes) -> dict[str, Any] | None:
    """The fields of a record key (its payload when it has a schema part), or None when it holds none."""
    try:
        doc = key_payload(key)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and doc else None


def _plain_event(value: bytes) -> Envelope | None:
    """``value`` as an :class:`Envelope` when it is a change event without a schema part, else None."""
    try:
        event = _ENVELOPE.decode(value)
    except msgspec.DecodeError:
        return None
    return event if event.op is not None else None


#: a streamed event's ``source.sequence`` as the stream writes it, with LSNs short enough for a bigint
_SEQUENCE = r'^\["(?P<previous>[0-9]{1,18})","(?P<change>[0-9]{1,18})"\]$'


def position_arrays(
    events: pa.BooleanArray, lsns: Sequence[Any], sequences: Sequence[Any], orders: Sequence[Any]
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """:func:`position` of many rows at once, as three int64 arrays (null where ``events`` is false: a row that is
    no event).

    This runs over every record the lake job decodes: Arrow computes the common forms (an int LSN, a sequence as
    the stream writes it or none, an int or no total order) for a whole batch, and only the rows in another form
    go through :func:`position` one by one, so that both give the same positions.
    """
    try:
        lsn = pa.array(lsns, pa.int64())
        order = pa.array(orders, pa.int64())
        sequence = pa.array(sequences, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return _positions_one_by_one(events, lsns, sequences, orders)
    parts = pc.extract_regex(sequence, _SEQUENCE)
    matched = pc.is_valid(parts)
    with_sequence = pc.and_kleene(pc.is_valid(sequence), pc.not_equal(sequence, ""))
    odd = pc.and_kleene(with_sequence, pc.invert(matched))
    if pc.any(odd).as_py():
        return _positions_one_by_one(events, lsns, sequences, orders)
    previous = pc.cast(pc.struct_field(parts, "previous"), pa.int64())
    change = pc.cast(pc.struct_field(parts, "change"), pa.int64())
    plain = pc.fill_null(lsn, 0)
    nulls = pa.nulls(len(events), pa.int64())
    a = pc.if_else(matched, pc.max_element_wise(previous, change), plain)
    b = pc.if_else(matched, change, 0)
    c = pc.fill_null(order, 0)
    return pc.if_else(events, a, nulls), pc.if_else(events, b, nulls), pc.if_else(events, c, nulls)


def _positions_one_by_one(
    events: pa.BooleanArray, lsns: Sequence[Any], sequences: Sequence[Any], orders: Sequence[Any]
) -> tuple[pa.Array, pa.Array, pa.Array]:
    places = [
        position(lsn, sequence, order) if event else (None, None, None)
        for event, lsn, sequence, order in zip(events.to_pylist(), lsns, sequences, orders)
    ]
    a, b, c = zip(*places) if places else ((), (), ())
    return pa.array(a, pa.int64()), pa.array(b, pa.int64()), pa.array(c, pa.int64())


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
        # per schema hash: its shape, where each target column sits in its rows (-1: absent, use the default;
        # None: the target's own order) and its compiled converter
        self.shapes: dict[str, tuple[RowShape, list[int] | None, Any]] = {
            "": (self.target, None, self.target.compiled())
        }
        self.unknown: dict[tuple[str, ...], list[str]] = {}
        #: per schema hash: field name -> target column, for fields mapped onto a column of another name
        self.renamed: dict[str, dict[str, str]] = {}
        #: the target was built for records without a schema part (their columns are typed from JSON values)
        self.plan_schemaless = any(f.get("name") == LOOSE for f in self.target.fields)
        #: per schema hash: the columns whose unchanged TOASTed value may be a null (:meth:`_null_toast`)
        self.null_toast: dict[str, list[int]] = {}

    def _null_toast(self, shape: RowShape) -> list[int]:
        """The columns of ``shape`` whose unchanged TOASTed value Debezium may write as null: arrays (but those of text,
        numbers and UUIDs it fills with the placeholder), structs and maps, and with ``binary.handling.mode`` base64
        text and bytes (bytea). A null there is looked up in the record's header (records.facts.UNAVAILABLE_HEADER)."""
        kinds = (
            ("array", "struct", "map", "string", "bytes")
            if self.plan.binary_placeholder_null
            else ("array", "struct", "map")
        )
        return [i for i, f in enumerate(shape.fields) if f["type"] in kinds]

    # -- the function handed to mapInArrow -------------------------------------------------------------
    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Read and decode the (topic, partition, start, end) tasks of Arrow batches ``tasks``."""
        for batch in tasks:
            for task in batch.to_pylist():
                current: list[Any] = [
                    None
                ]  # the message of the record being decoded (its headers, if a row needs them)
                records = read_slice(
                    self.plan.kafka, task["topic"], task["partition"], task["start"], task["end"], current
                )
                yield from self.decode(records, lambda current=current: current[0].headers())

    def decode(self, records: Iterable[Record], headers: Any = None) -> Iterator[pa.RecordBatch]:
        """The events of ``records`` as Arrow batches of :meth:`DecodePlan.columns` (see :meth:`_decode`).

        Python's cyclic garbage collector is off meanwhile: decoding allocates millions of small objects (parsed
        payloads, rows, decimals) that hold no reference cycles, and the collector's passes over them cost more
        than the decoding itself (about 40% of the time with a batch of rows alive). Reference counting still
        frees everything as it goes.
        """
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield from self._decode(records, headers)
        finally:
            if enabled:
                gc.enable()

    def shape_of(self, schema_hash: str, schema_text: str | None) -> tuple[RowShape, list[int] | None, Any]:
        """The shape of a record's schema, where each target column sits in its converted values (None: in the
        target's order), and its compiled converter (:meth:`RowShape.compiled`)."""
        known = self.shapes.get(schema_hash)
        if known is None:
            if schema_text is None:
                raise ValueError(f"schema {schema_hash} came without its text")
            shape = RowShape(orjson.loads(schema_text))
            order = self.plan.mapping.order(shape.fields, self.names) if self.plan.mapping is not None else None
            if order is None:
                positions = {n: i for i, n in enumerate(shape.names)}
                order = [positions.get(n, -1) for n in self.names]
            same = order == list(range(self.n_data)) and len(shape.names) == self.n_data
            # the columns a record's field lands in under another name (renamed since): its TOAST placeholders are
            # named after the target's column, which carries the value forward
            renamed = {
                shape.names[j]: self.names[i] for i, j in enumerate(order) if j >= 0 and shape.names[j] != self.names[i]
            }
            if renamed:
                self.renamed[schema_hash] = renamed
            known = self.shapes[schema_hash] = (shape, None if same else order, shape.compiled())
        return known

    def _decode(self, records: Iterable[Record], headers: Any = None) -> Iterator[pa.RecordBatch]:
        """The events of ``records`` as Arrow batches of :meth:`DecodePlan.columns`.

        This loop runs once per record read, so it keeps the common case (one image, a known schema, every value
        converted) to a few steps: each output row is one tuple of the frame's columns and the table's, turned
        into columns when a batch is cut; the statistics columns, null on almost every row, are kept apart
        (:class:`_Batch`).
        """
        plan = self.plan
        placeholders, accept, topic = plan.placeholders, plan.accept, plan.topic
        first_commit = plan.first_commit
        batch_rows, batch_bytes = plan.batch_rows, plan.batch_bytes
        width = len(C.FRAME_META) + self.n_data
        filled, empty = self.filled, [None] * self.n_data
        shapes = self.shapes
        # a schemaless row has kinds to note only when some column is being typed or it has a column the target
        # lacks (:meth:`_track`); the subset test runs in C, once per record
        watching, known = bool(self.watch), self.index.keys()
        out = _Batch()
        rows = out.rows
        size = 0
        last_source: tuple[Any, Any] | None = None
        last_hash: str | None = None
        last_keyed: bool | None = None
        #: the shape of the key last written out (None: none yet): written again where it changes, so that the
        #: driver sees a key redefined within the run (walflow.lake.frames.key_cut)
        key_shape: Any = None
        # schema texts: each goes out once per slice, with the first event of its schema that is written
        texts: dict[str, str] = {}
        sent: set[str] = set()
        #: the key of the record before, when it was a delete event (its tombstone follows it)
        last_delete: bytes | None = None

        def problem(
            partition: int,
            offset: int,
            column: str | None,
            value: Any,
            error: str,
            accepted: bool = False,
            schemaless: bool = False,
        ) -> None:
            doc: dict[str, Any] = {
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "column": column,
                "error": error,
            }
            if schemaless:
                doc["schemaless"] = True
            if accepted:
                doc["accepted"] = True
            if value is not None:
                doc["value"] = _short(value)
            row: list[Any] = [None] * width
            row[1], row[2] = partition, offset
            out.problems[len(rows)] = orjson.dumps(doc).decode()
            out.runs(len(rows), None, None)
            rows.append(tuple(row))

        def convert(
            shape: RowShape, image: dict[str, Any], partition: int, offset: int
        ) -> tuple[list[Any], list[str], list[Any]] | None:
            """The careful conversion of an image whose compiled conversion failed: which value, and whether the
            record is accepted anyway."""
            values, toasted, failures = shape.convert_leniently(image, placeholders)
            if (partition, offset) in accept:
                return values, toasted, failures
            column, value, why = failures[0] if failures else (None, image, "conversion failed")
            problem(partition, offset, column, value, why, schemaless=shape is self.target and self.plan_schemaless)
            return None

        # the fields of a SplitRecord, from plain tuples (_split_tuples)
        for schema_hash, schema_text, partition, offset, keyed, key, payload, nbytes, error in _split_tuples(
            records, typed=True, tombstones=True
        ):
            if payload is None and error is None:
                # A tombstone. Right after the delete of its key it says nothing more. Alone (compaction removed
                # the delete and every older record of the key, the tombstone stays for delete.retention.ms) it is
                # the only word that the row is gone: a delete of its key, positioned nowhere (null), so that any
                # event of the key the run holds, all newer, wins over it, and the lake's row, older, goes.
                if keyed and key != last_delete:
                    assert key is not None  # keyed: the record has a key
                    image = _key_image(key)
                    try:
                        values, _toasted = shapes[""][2](image, placeholders) if image is not None else (None, None)
                    except Exception:
                        values = None
                    if values is not None:
                        if last_hash != "" or last_keyed is not True:
                            out.runs(len(rows), "", True)
                            last_hash, last_keyed = "", True
                        shape = _key_shape(key)
                        if shape != key_shape:  # the run's key, as for an event (walflow.lake.frames.key_cut)
                            out.sparse[len(rows)] = (None, key, None, None)
                            key_shape = shape
                        out.tombstones.append(len(rows))
                        rows.append(("d", partition, offset, None, None, [], None, None, None, -1, None, *values))
                last_delete = None
                continue
            size += nbytes
            if schema_text is not None and schema_hash is not None:  # (a record with a schema text has its hash)
                texts[schema_hash] = schema_text
            if error is not None or schema_hash is None or type(payload) is not Envelope or payload.op is None:
                if error is None and isinstance(payload, dict) and payload.get("op") is not None:
                    error = "not a change event: its 'source', 'transaction', 'before' or 'after' is not an object"
                problem(
                    partition,
                    offset,
                    None,
                    None if error else payload,
                    error or "not a change event (no 'op' in its payload)",
                    (partition, offset) in accept,
                )
                last_hash = last_keyed = None
                continue
            try:
                shape, order, compiled = shapes.get(schema_hash) or self.shape_of(schema_hash, texts.get(schema_hash))
                op = payload.op
                source = payload.source or _NO_SOURCE
                transaction = payload.transaction
                lsn, ts = source.lsn, source.ts_ms
                # the fields of the event's position, turned into it for the whole batch (position_arrays)
                a, b, c = lsn, source.sequence, None if transaction is None else transaction.total_order
                # '[null,"L"]': no previous commit (b[1:2] is a cached one-character string, no slice is made)
                if type(b) is str and b[1:2] == "n" and b[:6] == "[null,":
                    if initial_snapshot_row(op, lsn, b):
                        b = None  # it sits at its LSN, before every change of that position (positions.position)
                    elif first_commit is not None and offset >= first_commit[1].get(partition, 0):
                        b = f'["{first_commit[0]}",{b[6:]}'
                row = payload.after if op != "d" else payload.before
                old = payload.before if op == "u" and not keyed else None
            except Exception as exc:
                problem(partition, offset, None, payload, f"{type(exc).__name__}: {exc}", (partition, offset) in accept)
                last_hash = last_keyed = None
                continue
            sign = -1 if op == "d" else 1
            failures = None
            if row is None:
                values, toasted = empty, []
            elif old is None:
                try:
                    values, toasted = compiled(row, placeholders)
                except Exception:
                    converted = convert(shape, row, partition, offset)
                    if converted is None:
                        last_hash = last_keyed = None
                        continue  # reported
                    values, toasted, failures = converted
                if headers is not None and (op == "u" or op == "c"):
                    nullable = self.null_toast.get(schema_hash)
                    if nullable is None:
                        nullable = self.null_toast[schema_hash] = self._null_toast(shape)
                    if nullable and any(values[i] is None for i in nullable):
                        gone = _unavailable(headers())
                        if gone:
                            toasted = [*toasted, *(n for n in shape.names if n in gone and n not in toasted)]
            else:
                # an update without a key: its old row leaves (sign -1), its new row arrives (sign +1)
                old_image = (
                    convert(shape, old, partition, offset)
                    if _fails(compiled, old, placeholders)
                    else (*compiled(old, placeholders), None)
                )
                new_image = (
                    convert(shape, row, partition, offset)
                    if _fails(compiled, row, placeholders)
                    else (*compiled(row, placeholders), None)
                )
                if old_image is None or new_image is None:
                    last_hash = last_keyed = None
                    continue  # reported
                old_values, old_toasted, old_failures = old_image
                if old_toasted and schema_hash in self.renamed:
                    old_toasted = [self.renamed[schema_hash].get(n, n) for n in old_toasted]
                if old_failures:
                    out.overflow.setdefault(len(rows), []).extend((n, _short(v, 10_000)) for n, v, _why in old_failures)
                if order is not None:
                    old_values = [old_values[j] if j >= 0 else default for j, default in zip(order, filled)]
                if schema_hash != last_hash or keyed != last_keyed:
                    out.runs(len(rows), schema_hash, keyed)
                    last_hash, last_keyed = schema_hash, keyed
                if old_toasted:
                    out.toasted = True
                rows.append((op, partition, offset, lsn, ts, old_toasted, a, b, c, -1, None, *old_values))
                values, toasted, failures = new_image
            if schema_hash == "" and row is not None and (watching or not row.keys() <= known):
                self._track(row, out.kinds)
            if failures:
                out.overflow.setdefault(len(rows), []).extend((n, _short(v, 10_000)) for n, v, _why in failures)
            if order is not None and values is not empty:
                values = [values[j] if j >= 0 else default for j, default in zip(order, filled)]
            if toasted:
                out.toasted = True
                if schema_hash in self.renamed:
                    toasted = [self.renamed[schema_hash].get(n, n) for n in toasted]
            if schema_hash != last_hash or keyed != last_keyed:
                out.runs(len(rows), schema_hash, keyed)
                last_hash, last_keyed = schema_hash, keyed
            name = (source.schema, source.table)
            text = None
            if schema_hash not in sent:
                text = texts.get(schema_hash)
                sent.add(schema_hash)
            if keyed:
                assert key is not None  # keyed: the record has a key
                shape = _key_shape(key)
            elif op in _ROW_OPS:
                # a row event without a key (a table without one, or one whose key was dropped): written out as
                # the empty key, so that the driver sees a table going from keyed to keyless within the run
                shape = NO_KEY
            else:
                shape = key_shape  # a truncate or a message: no row, no key
            if text is not None or shape != key_shape or name != last_source:
                out.sparse[len(rows)] = (
                    text,
                    (key or NO_KEY) if shape != key_shape else None,
                    *(name if name != last_source else (None, None)),
                )
                last_source = name
                key_shape = shape
            rows.append((op, partition, offset, lsn, ts, toasted, a, b, c, sign, None, *values))
            last_delete = key if op == "d" else None
            if len(rows) >= batch_rows or size >= batch_bytes:
                yield self._flush(out)
                out = _Batch()
                rows = out.rows
                size = 0
                last_hash = last_keyed = None
        if rows or out.kinds:
            yield self._flush(out)

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

    def _flush(self, out: _Batch) -> pa.RecordBatch:
        """One Arrow batch of :meth:`DecodePlan.columns` from the rows and statistics gathered in ``out``."""
        n_meta, width = self.n_meta, len(self.schema)
        rows = out.rows
        if not rows:  # only kinds to report: one row that is no event
            out.runs(0, None, None)
            rows.append((None,) * (n_meta + self.n_data))
        n = len(rows)
        columns: list[Any] = list(zip(*rows))
        problems = out.problems
        arrays: list[pa.Array | None] = [None] * width
        for i in range(n_meta, n_meta + self.n_data):
            array, fitted = column_array(columns[i], self.schema.field(i).type, self.temporal[i - n_meta])
            name = self.names[i - n_meta]
            for row, (status, text) in fitted.items():
                out.overflow.setdefault(row, []).append((name, text))
                where = (columns[1][row], columns[2][row])
                if status == INVALID and where not in self.plan.accept and row not in problems:
                    # a value of the wrong kind for its column: the record is malformed; the driver stops with it
                    problems[row] = orjson.dumps(
                        {
                            "topic": self.plan.topic,
                            "partition": where[0],
                            "offset": where[1],
                            "column": name,
                            "value": _short(text),
                            "error": f"not a value of the column's type ({self.schema.field(i).type})",
                            "schemaless": self.plan_schemaless,
                        }
                    ).decode()
            arrays[i] = array
        for i in range(n_meta):
            kind = self.schema.field(i).type
            if i in _POSITION_AT:
                continue
            if i == _OVERFLOW_AT:
                arrays[i] = pa.array(_spread(n, out.overflow), type=kind) if out.overflow else pa.nulls(n, kind)
            elif i == _TOAST_AT and not out.toasted:
                arrays[i] = pa.repeat(pa.scalar([], type=kind), n)
            else:
                arrays[i] = pa.array(columns[i], type=kind)
        # the rows hold the fields of each event's position (LSN, sequence, total order) in these three columns; a
        # row with an op is an event
        events = pc.is_valid(arrays[_OP_AT])
        lone = None
        if out.tombstones:  # a lone tombstone's delete has no position (see _decode)
            mask = [False] * n
            for row in out.tombstones:
                mask[row] = True
            lone = pa.array(mask, pa.bool_())
        for i, array in zip(_POSITION_AT, position_arrays(events, *(columns[i] for i in _POSITION_AT))):
            arrays[i] = array if lone is None else pc.if_else(lone, pa.nulls(n, pa.int64()), array)
        # statistics: the schema hash and whether the record had a key change in runs; the rest on a few rows
        stats = n_meta + self.n_data
        hashes, keyed = [], []
        bounds = [*out.run_starts, n]
        for (start, schema_hash, has_key), end in zip(out.run_values, bounds[1:]):
            hashes.append(pa.repeat(pa.scalar(schema_hash, pa.string()), end - start))
            keyed.append(pa.repeat(pa.scalar(has_key, pa.bool_()), end - start))
        arrays[stats] = pa.concat_arrays(hashes)
        arrays[stats + 2] = pa.concat_arrays(keyed)
        for k, i in enumerate((stats + 1, stats + 3, stats + 4, stats + 5)):
            kind = self.schema.field(i).type
            arrays[i] = (
                pa.array(_spread(n, {r: v[k] for r, v in out.sparse.items()}), type=kind)
                if out.sparse
                else pa.nulls(n, kind)
            )
        arrays[stats + 6] = pa.array(_spread(n, problems), type=pa.string()) if problems else pa.nulls(n, pa.string())
        kinds = orjson.dumps({name: sorted(k) for name, k in out.kinds.items()}).decode() if out.kinds else None
        arrays[stats + 7] = (
            pa.array([None] * (n - 1) + [kinds], type=pa.string()) if kinds else pa.nulls(n, pa.string())
        )
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class _Batch:
    """What :meth:`Decoder.decode` gathers for one output batch: a tuple per row (the frame's columns and the
    table's), and the statistics columns apart (null on almost every row): the schema hash and whether the record
    had a key in runs of equal values, the sparse ones (schema text, key, source names) by row, problems by row,
    the JSON kinds of schemaless columns, the overflow entries by row, and whether any row holds a placeholder."""

    __slots__ = ("kinds", "overflow", "problems", "rows", "run_starts", "run_values", "sparse", "toasted", "tombstones")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.run_starts: list[int] = []
        self.run_values: list[tuple[int, str | None, bool | None]] = []
        self.sparse: dict[int, tuple[Any, Any, Any, Any]] = {}
        self.problems: dict[int, str] = {}
        self.kinds: dict[str, set[str]] = {}
        self.overflow: dict[int, list[tuple[str, str]]] = {}
        self.toasted = False
        #: rows that are the deletes of lone tombstones
        self.tombstones: list[int] = []

    def runs(self, row: int, schema_hash: str | None, keyed: bool | None) -> None:
        """From ``row`` on, the rows have this schema hash and key flag (until the next call)."""
        if self.run_starts and self.run_starts[-1] == row:
            self.run_values[-1] = (row, schema_hash, keyed)
            return
        self.run_starts.append(row)
        self.run_values.append((row, schema_hash, keyed))


def _spread(n: int, values: dict[int, Any]) -> list[Any]:
    """A column of ``n`` rows holding ``values`` (row -> value) and null elsewhere."""
    column: list[Any] = [None] * n
    for row, value in values.items():
        column[row] = value
    return column


def _unavailable(headers: list[tuple[str, bytes]] | None) -> list[str]:
    """The fields a change event's header names as unchanged TOASTed values written as null (none without it)."""
    for name, value in headers or ():
        if name == UNAVAILABLE_HEADER and value:
            try:
                fields = orjson.loads(value)
            except orjson.JSONDecodeError:
                return []
            return [str(f) for f in fields] if isinstance(fields, list) else []
    return []


def _fails(compiled: Any, image: dict[str, Any], placeholders: tuple[Any, ...]) -> bool:
    """Whether the compiled conversion of ``image`` raises (the careful one then says which value)."""
    try:
        compiled(image, placeholders)
    except Exception:
        return True
    return False


_NO_SOURCE = Source()
_OVERFLOW_AT = [name for name, _t in C.FRAME_META].index(C.OVERFLOW)
_TOAST_AT = [name for name, _t in C.FRAME_META].index(C.TOAST)
_OP_AT = [name for name, _t in C.FRAME_META].index(C.OP)
_POSITION_AT = tuple([name for name, _t in C.FRAME_META].index(n) for n in (C.POS_A, C.POS_B, C.POS_C))
