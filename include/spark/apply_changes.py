"""walflow's Spark job: apply a connector's Debezium change events from Kafka to Iceberg tables, exactly once.

Submitted by the stream DAG's SparkSubmitOperator after each stream batch (``local[*]`` on the embedded
runtime, any Spark 3.5 cluster in production):

    spark-submit --jars iceberg-spark-runtime-3.5_2.12-1.10.2.jar \\
        --conf spark.sql.catalog.lake=org.apache.iceberg.spark.SparkCatalog ... \\
        include/spark/apply_changes.py --topic-prefix inventory --bootstrap kafka:9092 --catalog lake

Per topic (one source table): read the partitions from the offsets stored in the lake table's snapshot summary
to their end (found by consuming to EOF), one Spark task per partition slice, reading with confluent-kafka on the
executors; order the events by source position (the order PostgreSQL committed them, whatever partition they
landed in), cut at the last truncate, keep the last event per key, and run one MERGE INTO the Iceberg table that
commits the consumed offsets in the same snapshot's summary. A rerun after a crash anywhere therefore applies
exactly what was not committed.

``WALFLOW_APPLY_FAULT=<point>[:<n>]`` makes the job SIGKILL itself the n-th time it reaches ``point`` (one of
:data:`FAULT_POINTS`), for the crash tests; ``WALFLOW_APPLY_FAULT_FILE`` names a file where it first writes which
point fired.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

log = logging.getLogger("walflow.apply")

INTERNAL_SUFFIXES = (".transaction", ".message")

FAULT_ENV = "WALFLOW_APPLY_FAULT"
FAULT_FILE_ENV = "WALFLOW_APPLY_FAULT_FILE"
#: Where the job can be made to kill itself: after the read (nothing written), after the table DDL (table created
#: or altered, no data), after the changelog's commit (changelog ahead of the table), after a truncate's commit
#: (rows removed, offsets not yet committed), after a table's MERGE commit (before the next table).
FAULT_POINTS = ("after_read", "after_ddl", "after_changelog", "after_truncate", "after_commit")
_fault_hits: dict[str, int] = {}
#: Table property: the position of the last truncate applied (events older than it are obsolete).
TRUNCATED_AT = "walflow.truncated-at"


def fault(point: str) -> None:
    """SIGKILL the job here if ``WALFLOW_APPLY_FAULT`` names this point (and this is its n-th visit).

    The driver's parent is the spark-submit JVM in client mode: it is killed too, so the whole job dies at once
    as with ``kill -9``, with no shutdown hook running. The point is written to ``WALFLOW_APPLY_FAULT_FILE`` first
    so the caller can tell that the kill happened where it asked.
    """
    wanted = os.environ.get(FAULT_ENV, "")
    name, _, nth = wanted.partition(":")
    if name != point:
        return
    _fault_hits[point] = _fault_hits.get(point, 0) + 1
    if _fault_hits[point] != int(nth or 1):
        return
    marker = os.environ.get(FAULT_FILE_ENV)
    if marker:
        with open(marker, "w") as fh:
            fh.write(point)
            fh.flush()
            os.fsync(fh.fileno())
    print(f"WALFLOW_APPLY_FAULT {point}: killing the job", file=sys.stderr, flush=True)
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
            parent = fh.read()
    except OSError:
        parent = b""
    if b"org.apache.spark.deploy.SparkSubmit" in parent:
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


#: Consumer settings of the bulk reads. librdkafka stops fetching while its local queue holds more than
#: ``queued.max.messages.kbytes``; at the default (64 MB, the size of one large fetch) fetching and consuming
#: take turns instead of overlapping, which cut the read of the apply benchmark's records to a quarter of the
#: broker's pace. The Kafka Connection's extras override these.
READ_SETTINGS: dict[str, Any] = {"fetch.max.bytes": 64 * 1024 * 1024, "queued.max.messages.kbytes": 256 * 1024}


def _consumer(bootstrap: str, extra: dict[str, Any], **overrides: Any) -> Any:
    from confluent_kafka import Consumer

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"walflow-apply-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    settings.update(overrides)
    settings.update({k: v for k, v in extra.items() if not k.startswith("walflow.")})
    return Consumer(settings)


def list_topics(bootstrap: str, extra: dict[str, Any], prefix: str) -> dict[str, list[int]]:
    consumer = _consumer(bootstrap, extra)
    try:
        metadata = consumer.list_topics(timeout=30)
    finally:
        consumer.close()
    topics = {}
    for name, meta in metadata.topics.items():
        if name.startswith(prefix + ".") and not name.endswith(INTERNAL_SUFFIXES) and meta.error is None:
            topics[name] = sorted(meta.partitions)
    return topics


def partition_end(bootstrap: str, extra: dict[str, Any], topic: str, partition: int, start: int) -> int:
    """The partition's end, found by consuming to EOF (ListOffsets can be short)."""
    from walflow.lake import partition_end as find_end

    consumer = _consumer(bootstrap, extra)
    try:
        return find_end(consumer, topic, partition, start)
    finally:
        consumer.close()


def topic_source(bootstrap: str, extra: dict[str, Any], topic: str, partitions: list[int], timeout: float = 10.0) -> tuple[str, str] | None:
    """The source (schema, table) of a topic, from the ``source`` block of its first change record.

    Topic names replace every character Kafka rejects with ``_`` (as Debezium does), so they cannot name the lake
    table: ``café`` and ``caf_`` share a topic name but not a source name.
    """
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    consumer = _consumer(bootstrap, extra, **{"fetch.max.bytes": 1024 * 1024, "max.partition.fetch.bytes": 256 * 1024})
    try:
        for partition in partitions:
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise RuntimeError(f"{topic}[{partition}]: {msg.error().str()}")
                if msg.value() is None:
                    continue
                doc = orjson.loads(msg.value())
                payload = doc.get("payload", doc) if isinstance(doc, dict) and "schema" in doc else doc
                source = (payload or {}).get("source") or {} if isinstance(payload, dict) else {}
                if source.get("schema") is not None and source.get("table") is not None:
                    return str(source["schema"]), str(source["table"])
    finally:
        consumer.close()
    return None


def read_slice(bootstrap: str, extra: dict[str, Any], topic: str, partition: int, start: int, end: int) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """Yield (partition, offset, key, value) for offsets [start, end) of one partition (runs on executors)."""
    from confluent_kafka import KafkaError, TopicPartition

    if end <= start:
        return
    consumer = _consumer(bootstrap, extra, **READ_SETTINGS)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        idle_since = time.monotonic()
        while True:
            # consume() returns when it has the batch or the timeout passed: keep the timeout short
            messages = consumer.consume(5000, 0.5)
            if not messages:
                if time.monotonic() - idle_since > 60:
                    raise RuntimeError(f"{topic}[{partition}]: nothing to read before offset {end} for 60 s")
                continue
            idle_since = time.monotonic()
            for msg in messages:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}[{partition}] ended at {msg.offset()} before {end}: was the topic recreated?")
                    raise RuntimeError(f"{topic}[{partition}]: {msg.error().str()}")
                if msg.offset() >= end:
                    return
                yield partition, msg.offset(), msg.key(), msg.value()
                if msg.offset() + 1 >= end:
                    return
    finally:
        consumer.close()


_SCHEMA_PREFIX = b'{"schema":'
_PAYLOAD_SEPARATOR = b',"payload":'

#: The columns of the parsed records (one cached DataFrame per topic and run), as Spark DDL.
RAW_COLUMNS = (
    ("hash", "string"), ("schema", "string"), ("op", "string"), ("partition", "int"), ("offset", "bigint"),
    ("keyed", "boolean"), ("key", "binary"), ("lsn", "bigint"), ("ts", "bigint"), ("row", "binary"), ("toast", "boolean"),
    ("pos_a", "bigint"), ("pos_b", "bigint"), ("pos_c", "bigint"), ("before", "binary"), ("src_schema", "string"), ("src_table", "string"),
)
#: The columns of the converted events ahead of the table's own columns.
FRAME_META = (
    ("_walflow_op", "string"), ("_walflow_partition", "int"), ("_walflow_offset", "bigint"), ("_walflow_lsn", "bigint"),
    ("_walflow_source_ts_ms", "bigint"), ("_walflow_toast", "array<string>"), ("_walflow_pos_a", "bigint"),
    ("_walflow_pos_b", "bigint"), ("_walflow_pos_c", "bigint"), ("_walflow_sign", "int"),
)
BATCH_ROWS = 20_000


def decode_records(records: Iterator[tuple[int, int, bytes | None, bytes | None]]) -> Iterator[tuple[str, str | None, int, int, bool, bytes | None, dict[str, Any]]]:
    """Split each record of one partition slice into its schema and its parsed payload (tombstones are dropped).

    Yields (schema hash, schema text on the first record of that schema in the slice else None, partition, offset,
    keyed, key, payload). Only the payload is parsed: the JSON converter writes ``{"schema": …, "payload": …}``
    and every record repeats the same few kB of schema, so the schema is recognised by its bytes (the previous
    record's envelope head is compared first, a memcmp) and hashed once. The hash of records without a schema
    part (converter schemas disabled) is "".
    """
    hashes: dict[bytes, str] = {}
    head = b""  # the previous record's bytes up to its payload, b'{"schema":...,"payload":'
    head_hash = ""
    for partition, offset, key, value in records:
        if value is None:
            continue
        text = None
        if head and value.startswith(head):
            schema_hash = head_hash
            payload = orjson.loads(value[len(head) : -1])
        else:
            schema_bytes = None
            if value.startswith(_SCHEMA_PREFIX):
                # A schema's own keys never include "payload", so the first separator ends it.
                cut = value.find(_PAYLOAD_SEPARATOR)
                if cut > 0:
                    schema_bytes = value[len(_SCHEMA_PREFIX) : cut]
                    head = value[: cut + len(_PAYLOAD_SEPARATOR)]
                    payload = orjson.loads(value[len(head) : -1])
            if schema_bytes is None:
                head = b""
                doc = orjson.loads(value)
                if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
                    payload = doc["payload"]
                    schema_bytes = orjson.dumps(doc["schema"], option=orjson.OPT_SORT_KEYS)
                else:
                    payload, schema_bytes = doc, b""
            schema_hash = hashes.get(schema_bytes)  # type: ignore[assignment]
            if schema_hash is None:
                schema_hash = hashes[schema_bytes] = hashlib.sha1(schema_bytes).hexdigest() if schema_bytes else ""
                text = schema_bytes.decode()
            head_hash = schema_hash
        # a key serialised with its schema still has a payload of null for a null key
        keyed = key is not None and not (key.startswith(_SCHEMA_PREFIX) and key.endswith(b',"payload":null}'))
        yield schema_hash, text, partition, offset, keyed, key, payload


def parse_records(records: Iterator[tuple[int, int, bytes | None, bytes | None]], markers: tuple[bytes, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Parse one partition slice's records into tuples of :data:`RAW_COLUMNS` (runs on the executors).

    ``row`` is the after image (the before image of a delete) as JSON, ``toast`` whether it holds one of the TOAST
    placeholder ``markers``, ``pos_*`` the position of :func:`walflow.lake.source_position`, ``before`` the before
    image of an update without a key (tables without primary key match rows by their whole old value). The schema
    text travels only with the first record of each schema in the slice, the raw key only with the first keyed
    record, the source names only when they change.
    """
    from walflow.lake import source_position

    last_source: tuple[Any, Any] | None = None
    key_seen = False
    for schema_hash, schema_text, partition, offset, keyed, key, payload in decode_records(records):
        op = payload["op"]
        row = payload.get("after") if op != "d" else payload.get("before")
        source = payload.get("source") or {}
        row_json = orjson.dumps(row) if row is not None else None
        a, b, c = source_position(source, payload.get("transaction"))
        before = payload.get("before") if op == "u" and not keyed else None
        name = (source.get("schema"), source.get("table"))
        changed = name != last_source
        yield (
            schema_hash,
            schema_text,
            op,
            partition,
            offset,
            keyed,
            key if keyed and not key_seen else None,
            source.get("lsn"),
            source.get("ts_ms"),
            row_json,
            row_json is not None and any(m in row_json for m in markers),
            a,
            b,
            c,
            orjson.dumps(before) if before is not None else None,
            name[0] if changed else None,
            name[1] if changed else None,
        )
        key_seen = key_seen or keyed
        last_source = name


#: Columns the one-pass read adds after the events' frame, for the run's statistics.
STAT_COLUMNS = (
    ("_walflow_hash", "string"), ("_walflow_schema", "string"), ("_walflow_keyed", "boolean"), ("_walflow_key", "binary"),
    ("_walflow_src_schema", "string"), ("_walflow_src_table", "string"),
)


def read_events(
    tasks: Iterator[Any],
    bootstrap: str,
    extra: dict[str, Any],
    target: dict[str, Any],
    names: list[str],
    defaults: dict[str, Any],
    placeholders: tuple[Any, ...],
    schema: Any,
) -> Iterator[Any]:
    """Read, parse and convert the offset slices of ``tasks`` in one pass (runs on the executors).

    Yields Arrow batches of :data:`FRAME_META`, the columns ``names`` of the ``target`` value schema, then
    :data:`STAT_COLUMNS`. Each record is converted with its own schema's shape and mapped by name onto the target's
    columns (a column it lacks takes the target's default), so records of older shapes fit; records without a
    schema part are read with the target's shape. The target is a guess taken before reading (the schema of the
    newest record sampled); the driver checks it against the newest schema actually read.
    """
    from walflow.lake import RowShape, source_position

    fixes = [_arrow_ready(field.type) for field in list(schema)[len(FRAME_META) : len(FRAME_META) + len(names)]]
    width = len(schema)
    n_meta, n_data = len(FRAME_META), len(names)
    empty = [None] * n_data
    filled = [defaults.get(n) for n in names]

    def flush(columns: list[list[Any]]) -> Any:
        for column, fix in zip(columns[n_meta : n_meta + n_data], fixes):
            if fix is not None:
                column[:] = [v if v is None else fix(v) for v in column]
        return _arrow_batch(columns, schema)

    for batch in tasks:
        for task in batch.to_pylist():
            # per schema: its shape and where each target column sits in its rows (-1: absent, use the default)
            local: dict[str, tuple[Any, list[int]]] = {}
            columns: list[list[Any]] = [[] for _ in range(width)]
            meta = columns[:n_meta]
            data = columns[n_meta : n_meta + n_data]
            stats = columns[n_meta + n_data :]
            last_source: tuple[Any, Any] | None = None
            key_seen = False
            records = read_slice(bootstrap, extra, task["topic"], task["partition"], task["start"], task["end"])
            for schema_hash, schema_text, partition, offset, keyed, key, payload in decode_records(records):
                known = local.get(schema_hash)
                if known is None:
                    shape = RowShape(json.loads(schema_text) if schema_hash and schema_text else target)
                    known = local[schema_hash] = (shape, [shape.names.index(n) if n in shape.names else -1 for n in names])
                shape, order = known
                op = payload["op"]
                source = payload.get("source") or {}
                a, b, c = source_position(source, payload.get("transaction"))
                lsn, ts = source.get("lsn"), source.get("ts_ms")
                name = (source.get("schema"), source.get("table"))
                changed = name != last_source
                last_source = name
                row = payload.get("after") if op != "d" else payload.get("before")
                if op == "u" and not keyed and payload.get("before") is not None:
                    # an update without a key: its old row leaves (sign -1), its new row arrives (sign +1)
                    old, _ = shape.convert(payload["before"], placeholders)
                    for column, value in zip(meta, (op, partition, offset, lsn, ts, [], a, b, c, -1)):
                        column.append(value)
                    for column, j, default in zip(data, order, filled):
                        column.append(old[j] if j >= 0 else default)
                    for column, value in zip(stats, (schema_hash, None, keyed, None, None, None)):
                        column.append(value)
                if row is not None:
                    values, toasted = shape.convert(row, placeholders)
                    for column, j, default in zip(data, order, filled):
                        column.append(values[j] if j >= 0 else default)
                else:
                    toasted = []
                    for column, value in zip(data, empty):
                        column.append(value)
                for column, value in zip(meta, (op, partition, offset, lsn, ts, toasted, a, b, c, -1 if op == "d" else 1)):
                    column.append(value)
                for column, value in zip(
                    stats, (schema_hash, schema_text, keyed, key if keyed and not key_seen else None, name[0] if changed else None, name[1] if changed else None)
                ):
                    column.append(value)
                key_seen = key_seen or keyed
                if len(meta[0]) >= BATCH_ROWS:
                    yield flush(columns)
                    columns = [[] for _ in range(width)]
                    meta, data, stats = columns[:n_meta], columns[n_meta : n_meta + n_data], columns[n_meta + n_data :]
            if meta[0]:
                yield flush(columns)


def _arrow_schema(columns: list[tuple[str, str]]) -> Any:
    """The Arrow schema Spark expects for these (name, Spark DDL type) columns."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_schema(_parse_datatype_string(", ".join(f"{_q(n)} {t}" for n, t in columns)))


def _arrow_batch(columns: list[list[Any]], schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array(values, type=field.type) for values, field in zip(columns, schema)], schema=schema)


def read_batches(tasks: Iterator[Any], bootstrap: str, extra: dict[str, Any], markers: tuple[bytes, ...], schema: Any) -> Iterator[Any]:
    """Read and parse the offset slices of ``tasks`` (Arrow batches of topic, partition, start, end) into Arrow
    batches of :data:`RAW_COLUMNS` (runs on the executors)."""
    for batch in tasks:
        for task in batch.to_pylist():
            columns: list[list[Any]] = [[] for _ in RAW_COLUMNS]
            records = read_slice(bootstrap, extra, task["topic"], task["partition"], task["start"], task["end"])
            for record in parse_records(records, markers):
                for column, value in zip(columns, record):
                    column.append(value)
                if len(columns[0]) >= BATCH_ROWS:
                    yield _arrow_batch(columns, schema)
                    columns = [[] for _ in RAW_COLUMNS]
            if columns[0]:
                yield _arrow_batch(columns, schema)


def _arrow_ready(arrow_type: Any) -> Any:
    """A function making a converted value acceptable to pyarrow for ``arrow_type`` (struct values are tuples and
    maps dicts in :class:`walflow.lake.RowShape`), or None when values need no change."""
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        subs = [(f.name, _arrow_ready(f.type)) for f in arrow_type]
        return lambda v: {n: (x if fix is None or x is None else fix(x)) for (n, fix), x in zip(subs, v)}
    if pa.types.is_map(arrow_type):
        fix = _arrow_ready(arrow_type.item_type)
        return lambda v: [(k, x if fix is None or x is None else fix(x)) for k, x in v.items()]
    if pa.types.is_list(arrow_type):
        fix = _arrow_ready(arrow_type.value_type)
        return None if fix is None else (lambda v: [x if x is None else fix(x) for x in v])
    return None


def convert_batches(
    batches: Iterator[Any], shapes: dict[str, Any], names: list[str], defaults: dict[str, Any], placeholders: tuple[Any, ...], schema: Any
) -> Iterator[Any]:
    """Convert parsed records (Arrow batches of :data:`RAW_COLUMNS`) into Arrow batches of the events' frame:
    :data:`FRAME_META` then the table's columns (runs on the executors)."""
    from walflow.lake import RowShape

    # per schema: its shape, and where each of the table's columns sits in its rows (-1: not there, use the default)
    local: dict[str, tuple[RowShape, list[int]]] = {}
    fixes = [_arrow_ready(field.type) for field in list(schema)[len(FRAME_META) :]]
    width = len(FRAME_META) + len(names)
    for batch in batches:
        raw = batch.to_pydict()
        out: list[list[Any]] = [[] for _ in range(width)]
        meta_out, data_out = out[: len(FRAME_META)], out[len(FRAME_META) :]
        for i, shape_hash in enumerate(raw["hash"]):
            known = local.get(shape_hash)
            if known is None:
                row_shape = RowShape(shapes[shape_hash])
                known = local[shape_hash] = (row_shape, [row_shape.names.index(n) if n in row_shape.names else -1 for n in names])
            row_shape, order = known
            op = raw["op"][i]
            row = raw["row"][i]
            head = (op, raw["partition"][i], raw["offset"][i], raw["lsn"][i], raw["ts"][i])
            position = (raw["pos_a"][i], raw["pos_b"][i], raw["pos_c"][i])
            before = raw["before"][i]
            if before is not None:
                # an update without a key: its old row leaves (sign -1), its new row arrives (sign +1)
                old, _ = row_shape.convert(orjson.loads(before), placeholders)
                for column, value in zip(meta_out, (*head, [], *position, -1)):
                    column.append(value)
                for column, j, n in zip(data_out, order, names):
                    column.append(old[j] if j >= 0 else defaults.get(n))
            values, toasted = row_shape.convert(orjson.loads(row) if row else {}, placeholders)
            for column, value in zip(meta_out, (*head, toasted, *position, -1 if op == "d" else 1)):
                column.append(value)
            for column, j, n in zip(data_out, order, names):
                column.append(values[j] if j >= 0 else defaults.get(n))
        for column, fix in zip(data_out, fixes):
            if fix is not None:
                column[:] = [v if v is None else fix(v) for v in column]
        yield _arrow_batch(out, schema)


def schemaless_kinds(rows: Iterator[Any]) -> Iterator[dict[str, set[str]]]:
    """The JSON kinds each column of schemaless rows took (one dict per partition; runs on the executors)."""
    from walflow.lake import json_kind

    kinds: dict[str, set[str]] = {}
    for (row,) in rows:
        if row is None:
            continue
        for name, value in orjson.loads(bytes(row)).items():
            seen = kinds.setdefault(name, set())
            kind = json_kind(value)
            if kind is not None:
                seen.add(kind)
    yield kinds


def map_in_arrow(frame: Any, function: Any, schema: Any) -> Any:
    """``frame.mapInArrow(function, schema)``: Arrow batches in and out of the Python workers, no row pickling.

    PySpark 3.5's public ``mapInArrow`` insists on pandas although it does not use it; without pandas the same
    plan (a SQL_MAP_ARROW_ITER_UDF over every column) is built directly.
    """
    try:
        import pandas  # noqa: F401
    except ImportError:
        from pyspark.rdd import PythonEvalType
        from pyspark.sql import DataFrame
        from pyspark.sql.udf import UserDefinedFunction

        udf = UserDefinedFunction(function, returnType=schema, name="walflow_arrow", evalType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
        column = udf(*[frame[_q(c)] for c in frame.columns])
        return DataFrame(frame._jdf.pythonMapInArrow(column._jc.expr(), False), frame.sparkSession)
    return frame.mapInArrow(function, schema)


def _q(name: str) -> str:
    from walflow.lake import sql_quote

    return sql_quote(name)


def _s(text: str) -> str:
    from walflow.lake import sql_string

    return sql_string(text)


class Applier:
    def __init__(self, spark: Any, args: argparse.Namespace) -> None:
        self.spark = spark
        self.args = args
        self.extra = json.loads(args.kafka_config) if args.kafka_config else {}
        self.catalog = args.catalog
        self.namespace = args.namespace or args.topic_prefix
        from walflow.lake import placeholder_values

        self.placeholders = placeholder_values(args.placeholder)
        self.remaining = args.max_records
        self.changelog = bool(getattr(args, "changelog", False))
        self.soft = args.delete_mode == "soft"

    # -- names ------------------------------------------------------------------------------------
    def lake_name(self, topic: str, partitions: list[int]) -> str:
        """The lake table name of a topic: from the source names its records carry, else from the topic name."""
        from walflow.lake import table_name

        found = topic_source(self.args.bootstrap, self.extra, topic, partitions)
        if found is None:
            schema, _, table = topic[len(self.args.topic_prefix) + 1 :].partition(".")
            found = (schema, table)
        return table_name(*found)

    def ident(self, name: str) -> str:
        """The quoted Spark identifier of lake table ``name``."""
        return f"{_q(self.catalog)}.{_q(self.namespace)}.{_q(name)}"

    def exists(self, ident: str) -> bool:
        return bool(self.spark.catalog.tableExists(ident))

    # -- offsets ----------------------------------------------------------------------------------
    def stored_offsets(self, ident: str, topic: str, name: str = "<table>") -> dict[int, int]:
        return self.stored_position(ident, topic, name)[0]

    def stored_position(self, ident: str, topic: str, name: str = "<table>") -> tuple[dict[int, int], dict[int, str]]:
        """The offsets committed with the newest walflow snapshot that has them, and the fingerprints of the last
        record applied from each partition (committed alongside).

        The walk follows the current snapshot's ancestry (a rollback leaves the rolled-back snapshots out). Every
        snapshot on the way must be walflow's (it carries ``walflow.commit`` or offsets) or a compaction
        (operation ``replace``, data unchanged): a snapshot written by anyone else means the table may no longer
        equal the source, and applying on top of it would hide that, so the job stops.
        """
        from walflow.lake import COMMIT_PROPERTY, FINGERPRINTS_PROPERTY, OFFSETS_PROPERTY, LakeError, parse_offsets

        if not self.exists(ident):
            return {}, {}
        snapshots = {
            r["snapshot_id"]: r for r in self.spark.sql(f"SELECT snapshot_id, parent_id, operation, committed_at, summary FROM {ident}.snapshots").collect()
        }
        refs = self.spark.sql(f"SELECT snapshot_id FROM {ident}.refs WHERE name = 'main'").collect()
        current = refs[0]["snapshot_id"] if refs else None
        while current is not None and current in snapshots:
            row = snapshots[current]
            summary = row["summary"] or {}
            text = summary.get(OFFSETS_PROPERTY)
            if row["operation"] != "replace" and COMMIT_PROPERTY not in summary and not text:
                raise LakeError(
                    f"lake table {ident} was changed by another writer: its snapshot {current} ({row['operation']}, "
                    f"committed at {row['committed_at']}) was not written by walflow, so the table may no longer equal the "
                    "source, and walflow will not apply changes on top of it. Undo that change with CALL "
                    f"{_q(self.catalog)}.system.rollback_to_snapshot({_s(_q(self.namespace) + '.' + _q(name))}, {row['parent_id']}) (the snapshot before "
                    "it), or drop the lake table and re-snapshot the source; only compaction (rewrite_data_files, operation "
                    "'replace') may run on walflow's tables."
                )
            if text:
                prints = json.loads(summary.get(FINGERPRINTS_PROPERTY) or "{}").get(topic, {})
                return parse_offsets(text).get(topic, {}), {int(p): v for p, v in prints.items()}
            current = row["parent_id"]
        if current is not None:
            # The ancestry ends at an expired snapshot before any that carries offsets: starting again from offset
            # 0 would apply every event twice (and duplicate the rows of keyless tables), so stop instead.
            raise LakeError(
                f"lake table {ident}: the snapshots since walflow last committed offsets do not reach back to one that "
                f"has them (snapshot {current} was expired), so the job cannot tell which Kafka records it already applied. "
                "When expiring snapshots, keep the newest one walflow committed (summary 'walflow.commit'), e.g. "
                "expire_snapshots(retain_last => 1) only right after a walflow run; now drop the lake table and re-snapshot "
                "the source, or apply into a new walflow.lake.namespace."
            )
        return {}, {}

    def fingerprints(self, topic: str, offsets: dict[int, int]) -> dict[int, str]:
        """Fingerprints of the records just before each partition's offset (the last ones applied)."""
        from walflow.lake import record_fingerprint

        consumer = _consumer(self.args.bootstrap, self.extra)
        try:
            return {p: record_fingerprint(consumer, topic, p, o - 1) for p, o in offsets.items() if o > 0}
        finally:
            consumer.close()

    # -- one topic --------------------------------------------------------------------------------
    def apply_topic(self, topic: str, partitions: list[int]) -> dict[str, Any]:
        from walflow.lake import LakeError

        name = self.lake_name(topic, partitions)
        ident = self.ident(name)
        stored, stored_prints = self.stored_position(ident, topic, name)
        # The topic must still be the one the lake read: a recreated topic (or a broker that lost its data and
        # was refilled) can hold as many records as before, so offsets alone cannot tell.
        current = self.fingerprints(topic, {p: o for p, o in stored.items() if p in stored_prints})
        for p, fingerprint in current.items():
            if fingerprint != stored_prints[p]:
                raise LakeError(
                    f"topic {topic} partition {p}: the record at offset {stored[p] - 1} is not the one the lake table "
                    f"{ident} applied there (fingerprint {fingerprint or 'missing'}, expected {stored_prints[p]}): the "
                    "topic was recreated or the broker lost its data (the embedded broker keeps topics in memory "
                    "only), so its offsets no longer line up with the lake's. Nothing was skipped silently; re-snapshot "
                    "the source into a new lake namespace (walflow.lake.namespace), or drop the lake table."
                )
        # the changelog commits separately with its own offsets: read from the lower of the two
        log_stored = self.stored_offsets(self.ident(name + "__changelog"), topic, name + "__changelog") if self.changelog else None
        slices = []
        for p in partitions:
            start = stored.get(p, 0) if log_stored is None else min(stored.get(p, 0), log_stored.get(p, 0))
            applied = stored.get(p, 0) if log_stored is None else max(stored.get(p, 0), log_stored.get(p, 0))
            end = partition_end(self.args.bootstrap, self.extra, topic, p, applied)
            if end < applied:
                raise LakeError(
                    f"topic {topic} partition {p} ends at offset {end}, below the offset {applied} the lake table {ident} "
                    "already applied: the topic was recreated or the broker lost its data (the embedded broker keeps "
                    "topics in memory only). Nothing was skipped silently; re-snapshot the source (setup DAG with "
                    "snapshot.mode=always, or an ad-hoc snapshot) into a new lake namespace, or drop the lake table."
                )
            end = min(end, start + max(self.remaining, 0))
            if end > start:
                slices.append((p, start, end))
                self.remaining -= end - start
        if not slices:
            return {"topic": topic, "table": ident, "records": 0, "committed": False}
        # one Spark task per offset slice, so that even a single-partition topic is read by every core
        tasks = offset_slices(slices, self.spark.sparkContext.defaultParallelism)
        task_frame = self.spark.createDataFrame(
            self.spark.sparkContext.parallelize([(topic, *t) for t in tasks], len(tasks)), "topic string, partition int, start bigint, end bigint"
        )
        cached: list[Any] = []
        try:
            return self._apply(topic, name, task_frame, stored, slices, log_stored, cached)
        finally:
            for frame in cached:
                frame.unpersist()

    def _apply(
        self,
        topic: str,
        name: str,
        task_frame: Any,
        stored: dict[int, int],
        slices: list[tuple[int, int, int]],
        log_stored: dict[int, int] | None,
        cached: list[Any],
    ) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from walflow.lake import FINGERPRINTS_PROPERTY, OFFSETS_PROPERTY, LakeError, RowShape, field_defaults, format_offsets

        ident = self.ident(name)
        # Each table commits its own offsets, never below what it applied before: with the changelog behind the
        # table, the read starts at the changelog's offsets and may end (walflow.lake.max.records) below the
        # table's, which must then keep its own.
        offsets = dict(stored)
        log_offsets = dict(log_stored or {})
        for p, _start, end in slices:
            offsets[p] = max(end, stored.get(p, 0))
            log_offsets[p] = max(end, log_offsets.get(p, 0))
        phase = time.monotonic()
        frame, stats, value_schema = self._read_one_pass(topic, task_frame, slices, cached)
        passes = 1
        if frame is None:
            frame, stats, value_schema = self._read_two_passes(topic, ident, task_frame, cached)
            passes = 2
        counts, key_names = stats["counts"], stats["key_names"]
        toasted, keyless_changes, sources = stats["toasted"], stats["keyless"], stats["sources"]
        if not counts:
            return {"topic": topic, "table": ident, "records": 0, "committed": False}
        if len(sources) > 1:
            tables = ", ".join(sorted(f"{s}.{t}" for s, t in sources))
            raise LakeError(
                f"topic {topic} carries the events of several source tables ({tables}): Kafka topic names replace every "
                "character outside [A-Za-z0-9._-] with '_', so these tables' topic names collide and their events cannot be "
                "told apart by topic. Rename one of the tables (or exclude it with table.exclude.list), then rebuild the lake "
                "table from a new snapshot."
            )
        timings = {"read_s": round(time.monotonic() - phase, 2), "read_passes": passes}
        log.info("%s: read and parsed %d record(s) in %.1f s (%d pass(es))", topic, sum(counts.values()), timings["read_s"], passes)
        fault("after_read")
        phase = time.monotonic()
        target = RowShape(value_schema)
        names = target.names
        types = target.types
        properties = self._ensure_table(ident, names, types, field_defaults(value_schema), self._meta_columns())
        fault("after_ddl")
        timings["table_s"] = round(time.monotonic() - phase, 2)
        phase = time.monotonic()
        frame = frame.withColumn("_walflow_position", F.format_string("%016X/%016X", "_walflow_pos_a", "_walflow_pos_b"))
        # the before image of a keyless update is not an event of its own
        before_image = (F.col("_walflow_op") == "u") & (F.col("_walflow_sign") < 0)
        keyed = bool(key_names)
        if not stats["cached"] and (log_stored is not None or counts.get("t") or (not keyed and (counts.get("u") or counts.get("d")))):
            frame = frame.persist()  # used more than once: convert the events once
            cached.append(frame)
        if log_stored is not None:
            self._append_changelog(topic, name, frame.filter(~before_image), log_stored, log_offsets, names, types)
            fault("after_changelog")
            frame = frame.filter(_from_offsets(stored))
        truncated_at = properties.get(TRUNCATED_AT)
        if truncated_at:
            # Events older than a truncate the table already applied are obsolete even when redelivered later. The
            # truncate itself stays: a crash between recording it and its DELETE must still see it applied.
            frame = frame.filter(F.col("_walflow_position") >= truncated_at)
        cut = None
        if counts.get("t"):
            cut = frame.filter(F.col("_walflow_op") == "t").select(
                F.max(F.struct("_walflow_pos_a", "_walflow_pos_b", "_walflow_pos_c", "_walflow_position", "_walflow_lsn", "_walflow_source_ts_ms")).alias("m")
            ).collect()[0]["m"]
        if cut is not None:
            # A truncate removes every row older than it; later events still apply. This commit carries no
            # offsets: a crash after it repeats it, which changes nothing (it only touches older rows).
            self._truncate(ident, cut, truncated_at)
            fault("after_truncate")
            if self.soft and keyed:
                # soft deletes keep every row the source had: the rows the truncate removed are written too,
                # flagged (below, once the latest event per key is known)
                frame = frame.withColumn("_walflow_truncated", ~_after(cut))
            else:
                frame = frame.filter(_after(cut))
        frame = frame.filter(F.col("_walflow_op") != "t")
        commit = {OFFSETS_PROPERTY: format_offsets({topic: offsets}), FINGERPRINTS_PROPERTY: json.dumps({topic: self.fingerprints(topic, offsets)})}
        result: dict[str, Any] = {}
        if keyed:
            missing = [k for k in key_names if k not in names]
            if missing:
                raise LakeError(f"topic {topic}: the key field(s) {missing} are not columns of the events' rows, so the lake table {ident} cannot match rows by key")
            if keyless_changes:
                log.warning(
                    "%s: %d update(s)/delete(s) came without a key (written before the table had one, or under REPLICA IDENTITY "
                    "USING INDEX, whose old rows lack the key): they are matched by the key columns of their row, and those "
                    "whose key columns are null match nothing. Use REPLICA IDENTITY DEFAULT or FULL for tables with a key.",
                    topic,
                    keyless_changes,
                )
            frame = frame.filter(~before_image)
            if toasted:  # the window is only worth its cost when some event holds a placeholder
                frame = self._resolve_toast(frame, key_names, [n for n in names if types[n] in ("string", "binary") or types[n].startswith("array")])
            frame = _latest_per_key(frame, key_names)
            if "_walflow_truncated" in frame.columns:
                gone = F.col("_walflow_truncated") & (F.col("_walflow_op") != "d")
                for column, value in (
                    ("_walflow_op", F.lit("t")), ("_walflow_position", F.lit(cut["_walflow_position"])),
                    ("_walflow_lsn", F.lit(cut["_walflow_lsn"]).cast("bigint")), ("_walflow_source_ts_ms", F.lit(cut["_walflow_source_ts_ms"]).cast("bigint")),
                ):
                    frame = frame.withColumn(column, F.when(gone, value).otherwise(F.col(column)))
            view = f"walflow_src_{uuid.uuid4().hex[:8]}"
            frame.createOrReplaceTempView(view)
            self._commit(self._merge_sql(ident, view, names, key_names), commit, "merge")
        elif counts.get("u") or counts.get("d"):
            result["unmatched_before_images"] = self._merge_keyless(ident, frame, names, types, commit)
        else:
            # inserts only (a table without key, e.g. an append-only history): every event is a new row
            view = f"walflow_src_{uuid.uuid4().hex[:8]}"
            frame.createOrReplaceTempView(view)
            columns = [_q(n) for n in names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_position", "_walflow_applied_at"]
            values = [f"s.{_q(n)}" for n in names] + ["s._walflow_op", "s._walflow_lsn", "s._walflow_source_ts_ms", "s._walflow_position", "current_timestamp()"]
            if self.soft:
                columns.append("_walflow_deleted")
                values.append("false")
            self._commit(f"INSERT INTO {ident} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {view} s WHERE s._walflow_op <> 'd'", commit, "insert")
        fault("after_commit")
        timings["merge_s"] = round(time.monotonic() - phase, 2)
        log.info("%s: merged into %s in %.1f s", topic, ident, timings["merge_s"])
        records = int(sum(counts.values()))
        return {"topic": topic, "table": ident, "records": records, "ops": dict(counts), "committed": True, "offsets": offsets, "timings": timings, **result}

    def _sample_schema(self, topic: str, slices: list[tuple[int, int, int]]) -> tuple[str, str] | None:
        """The (hash, text) of the schema of the newest record among the last records of each slice, or None when
        they carry no schema part. It is almost always the newest schema of the run, which types the columns."""
        from confluent_kafka import TopicPartition

        from walflow.lake import source_position

        best: tuple[tuple[int, int, int], str, str] | None = None
        consumer = _consumer(self.args.bootstrap, self.extra, **{"max.partition.fetch.bytes": 1024 * 1024})
        try:
            for partition, start, end in slices:
                begin = max(start, end - 16)  # past a run of delete tombstones
                last = None
                consumer.assign([TopicPartition(topic, partition, begin)])
                while True:
                    msg = consumer.poll(30)
                    if msg is None or msg.error() or msg.offset() >= end:
                        break
                    if msg.value() is not None:
                        last = (partition, msg.offset(), msg.key(), msg.value())
                    if msg.offset() + 1 >= end:
                        break
                for schema_hash, text, _p, _o, _k, _key, payload in decode_records(iter([last] if last else [])):
                    position = source_position(payload.get("source") or {}, payload.get("transaction"))
                    if schema_hash and text and (best is None or position > best[0]):
                        best = (position, schema_hash, text)
        finally:
            consumer.close()
        return (best[1], best[2]) if best else None

    def _read_one_pass(self, topic: str, task_frame: Any, slices: list[tuple[int, int, int]], cached: list[Any]) -> tuple[Any, dict[str, Any], Any]:
        """Read, parse and convert the records in one pass, typed by the sampled newest schema.

        Returns (events frame, run statistics, value schema), or (None, {}, None) when there is no schema to sample
        or the newest schema read is not the sampled one: the two-pass read then types the events from what it read.
        """
        from pyspark.sql import functions as F

        from walflow.lake import RowShape, field_defaults

        sample = self._sample_schema(topic, slices)
        if sample is None:
            return None, {}, None
        value_schema = json.loads(sample[1])
        shape = RowShape(value_schema)
        names, types = shape.names, shape.types
        columns = list(FRAME_META) + [(n, types[n]) for n in names] + list(STAT_COLUMNS)
        arrow = _arrow_schema(columns)
        bootstrap, extra, placeholders, defaults = self.args.bootstrap, self.extra, self.placeholders, field_defaults(value_schema)
        events = map_in_arrow(
            task_frame,
            lambda batches: read_events(batches, bootstrap, extra, value_schema, names, defaults, placeholders, arrow),
            ", ".join(f"{_q(n)} {t}" for n, t in columns),
        ).persist()
        cached.append(events)
        before_image = (F.col("_walflow_op") == "u") & (F.col("_walflow_sign") < 0)
        stats = self._stats(
            events,
            hash="_walflow_hash", schema="_walflow_schema", op="_walflow_op", key="_walflow_key", keyed="_walflow_keyed",
            toast=F.size("_walflow_toast") > 0, src_schema="_walflow_src_schema", src_table="_walflow_src_table",
            order=F.struct("_walflow_pos_a", "_walflow_pos_b", "_walflow_pos_c", "_walflow_partition", "_walflow_offset"),
            events=~before_image,
        )
        if stats["newest"] != sample[0]:
            log.info("%s: the newest schema read is not the one sampled from the slices' ends; reading again", topic)
            events.unpersist()
            return None, {}, None
        frame = events.filter(F.col("_walflow_op").isin("c", "r", "u", "d", "t")).select(*[_q(n) for n, _t in columns[: len(FRAME_META) + len(names)]])
        return frame, {**stats, "cached": True}, value_schema

    def _read_two_passes(self, topic: str, ident: str, task_frame: Any, cached: list[Any]) -> tuple[Any, dict[str, Any], Any]:
        """Read and parse the records (cached), learn the run's schemas from them, then convert: for records without
        a schema part, and when the sampled schema was not the newest."""
        from pyspark.sql import functions as F

        from walflow.lake import RowShape, field_defaults

        bootstrap, extra = self.args.bootstrap, self.extra
        markers = tuple(orjson.dumps(v) for v in self.placeholders)
        raw_schema = _arrow_schema(list(RAW_COLUMNS))
        raw_type = ", ".join(f"{n} {t}" for n, t in RAW_COLUMNS)
        raw = map_in_arrow(task_frame, lambda batches: read_batches(batches, bootstrap, extra, markers, raw_schema), raw_type).persist()
        cached.append(raw)
        stats = self._stats(
            raw, hash="hash", schema="schema", op="op", key="key", keyed="keyed", toast=F.col("toast"), src_schema="src_schema",
            src_table="src_table", order=F.struct("pos_a", "pos_b", "pos_c", "partition", "offset"), events=F.lit(True),
        )
        schemas = stats["schemas"]
        if stats["newest"] is not None:
            value_schema = json.loads(schemas[stats["newest"]])
            shape_schemas = {h: json.loads(s) for h, s in schemas.items() if s}
            if "" in schemas:
                # the same connector with schemas switched off: the payload encoding is the same, so the newest
                # event schema types the schemaless records too
                shape_schemas[""] = value_schema
        else:
            kinds: dict[str, set[str]] = {}
            if "" in schemas:
                for part in raw.filter("hash = ''").select("row").rdd.mapPartitions(schemaless_kinds).collect():
                    for column, seen in part.items():
                        kinds.setdefault(column, set()).update(seen)
            value_schema = self._schemaless_schema(ident, kinds)
            shape_schemas = {"": value_schema}
        shape = RowShape(value_schema)
        names, types = shape.names, shape.types
        # a column added with a default holds it for every row that existed before (PostgreSQL fills them
        # without change events): events of an older shape get the default, not NULL
        defaults = field_defaults(value_schema)
        placeholders = self.placeholders
        columns = list(FRAME_META) + [(n, types[n]) for n in names]
        frame_schema = _arrow_schema(columns)
        events = raw.filter(F.col("op").isin("c", "r", "u", "d", "t")).select("hash", "op", "partition", "offset", "lsn", "ts", "row", "pos_a", "pos_b", "pos_c", "before")
        frame = map_in_arrow(
            events,
            lambda batches: convert_batches(batches, shape_schemas, names, defaults, placeholders, frame_schema),
            ", ".join(f"{_q(n)} {t}" for n, t in columns),
        )
        return frame, {**stats, "cached": False}, value_schema

    @staticmethod
    def _stats(frame: Any, *, hash: str, schema: str, op: str, key: str, keyed: str, toast: Any, src_schema: str, src_table: str, order: Any, events: Any) -> dict[str, Any]:
        """What the run holds, computed by Spark over the cached records: op counts, schemas, the schema of the
        newest event, a key, TOAST placeholders, updates/deletes without key, source tables."""
        from pyspark.sql import functions as F

        counts = {r[op]: int(r["count"]) for r in frame.filter(events).groupBy(op).count().collect()}
        schemas = {r[hash]: r[schema] for r in frame.filter(F.col(schema).isNotNull()).select(hash, schema).dropDuplicates([hash]).collect()}
        summary = frame.agg(
            F.max_by(hash, F.when(F.col(hash) != "", order)).alias("newest"),
            F.first(key, ignorenulls=True).alias("key"),
            F.sum(F.when(toast & events, 1).otherwise(0)).alias("toasted"),
            F.sum(F.when(~F.col(keyed) & F.col(op).isin("u", "d") & events, 1).otherwise(0)).alias("keyless"),
            F.collect_set(F.when(F.col(src_table).isNotNull(), F.struct(F.col(src_schema).alias("s"), F.col(src_table).alias("t")))).alias("sources"),
        ).collect()[0]
        return {
            "counts": counts,
            "schemas": schemas,
            "newest": summary["newest"] or None,
            "key_names": _key_names(summary["key"]),
            "toasted": summary["toasted"] or 0,
            "keyless": summary["keyless"] or 0,
            "sources": {(r["s"], r["t"]) for r in summary["sources"] or []},
        }

    def _schemaless_schema(self, ident: str, kinds: dict[str, set[str]]) -> dict[str, Any]:
        """A Debezium-shaped value schema for records without a schema part.

        Columns the lake table already has keep its types; new columns take the type their JSON values suggest
        (:func:`walflow.lake.inferred_type`). Values whose JSON kind the lake column cannot take stop the job.
        """
        from walflow.lake import LakeError, inferred_type, loose_field, loose_kinds_fit

        fields = []
        problems = []
        existing: list[tuple[str, str]] = []
        if self.exists(ident):
            existing = [(f.name, f.dataType.simpleString()) for f in self.spark.table(ident).schema.fields if not f.name.startswith("_walflow_")]
        known = {n for n, _t in existing}
        for column, type_name in existing:
            if column in kinds and not loose_kinds_fit(type_name, kinds[column]):
                problems.append(f"column {column!r} ({type_name}) received JSON {', '.join(sorted(kinds[column]))} values")
            fields.append(loose_field(column, type_name))
        for column, seen in kinds.items():
            if column not in known:
                fields.append(loose_field(column, inferred_type(seen)))
        if problems:
            raise LakeError(
                f"lake table {ident}: records without a schema part do not fit its columns: {'; '.join(problems)}. Without the "
                "schema part walflow can only type columns from the lake table or the JSON values; set "
                "value.converter.schemas.enable: true for this connector, or rebuild the lake table."
            )
        return {"type": "struct", "fields": [{"field": "before"}, {"field": "after", "type": "struct", "fields": fields}]}

    def _meta_columns(self) -> list[tuple[str, str]]:
        from walflow.lake import DELETED_COLUMN

        meta = [("_walflow_op", "string"), ("_walflow_lsn", "bigint"), ("_walflow_source_ts_ms", "bigint"), ("_walflow_applied_at", "timestamp"), ("_walflow_position", "string")]
        if self.soft:
            meta.append((DELETED_COLUMN, "boolean"))
        return meta

    @staticmethod
    def _resolve_toast(frame: Any, key_names: list[str], columns: list[str]) -> Any:
        """An unchanged TOASTed value takes the latest value an earlier event of the same batch carried.

        Only when no earlier event of the key has it does the placeholder stay, and the MERGE then keeps the
        lake's current value.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if not columns:
            return frame
        history = Window.partitionBy(*[F.col(_q(k)) for k in key_names]).orderBy(*_ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
        still_toasted = []
        for i, name in enumerate(columns):
            toasted = F.array_contains("_walflow_toast", name)
            known = f"_walflow_known_{i}"
            # a struct, so that a real NULL value counts as a value
            frame = frame.withColumn(known, F.last(F.when(~toasted, F.struct(F.col(_q(name)).alias("v"))), ignorenulls=True).over(history))
            frame = frame.withColumn(name, F.when(toasted & F.col(known).isNotNull(), F.col(known).getField("v")).otherwise(F.col(_q(name))))
            still_toasted.append(F.when(toasted & F.col(known).isNull(), F.lit(name)))
        frame = frame.withColumn("_walflow_toast", F.filter(F.array(*still_toasted), lambda x: x.isNotNull()))
        return frame.drop(*[f"_walflow_known_{i}" for i in range(len(columns))])

    def _append_changelog(
        self, topic: str, name: str, frame: Any, log_stored: dict[int, int], offsets: dict[int, int], names: list[str], types: dict[str, str]
    ) -> None:
        """Append every event not yet in the changelog table (an audit trail: one row per event)."""
        from walflow.lake import OFFSETS_PROPERTY, format_offsets

        log_ident = self.ident(name + "__changelog")
        meta = [
            ("_walflow_op", "string"), ("_walflow_lsn", "bigint"), ("_walflow_source_ts_ms", "bigint"), ("_walflow_partition", "int"),
            ("_walflow_offset", "bigint"), ("_walflow_toast", "array<string>"), ("_walflow_applied_at", "timestamp"), ("_walflow_position", "string"),
        ]
        self._ensure_table(log_ident, names, types, {}, meta)
        view = f"walflow_log_{uuid.uuid4().hex[:8]}"
        frame.filter(_from_offsets(log_stored)).createOrReplaceTempView(view)
        columns = [_q(n) for n in names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_partition", "_walflow_offset", "_walflow_toast", "_walflow_position"]
        self._commit(
            f"INSERT INTO {log_ident} ({', '.join(columns)}, _walflow_applied_at) SELECT {', '.join(columns)}, current_timestamp() FROM {view} "
            "ORDER BY _walflow_pos_a, _walflow_pos_b, _walflow_pos_c, _walflow_partition, _walflow_offset",
            {OFFSETS_PROPERTY: format_offsets({topic: offsets})},
            "changelog",
        )

    def _truncate(self, ident: str, cut: Any, truncated_at: str | None) -> None:
        """Apply a truncate at position ``cut``: rows older than it go (hard) or are flagged deleted (soft)."""
        from walflow.lake import DELETED_COLUMN

        older = f"(_walflow_position IS NULL OR _walflow_position < {_s(cut['_walflow_position'])})"
        if not truncated_at or cut["_walflow_position"] > truncated_at:
            # remembered first: a redelivered event older than the truncate must not bring a truncated row back
            self.spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ({_s(TRUNCATED_AT)} = {_s(cut['_walflow_position'])})")
        if self.soft:
            lsn = "NULL" if cut["_walflow_lsn"] is None else int(cut["_walflow_lsn"])
            ts = "NULL" if cut["_walflow_source_ts_ms"] is None else int(cut["_walflow_source_ts_ms"])
            self._commit(
                f"UPDATE {ident} SET {DELETED_COLUMN} = true, _walflow_op = 't', _walflow_lsn = {lsn}, _walflow_source_ts_ms = {ts}, "
                f"_walflow_position = {_s(cut['_walflow_position'])}, _walflow_applied_at = current_timestamp() "
                f"WHERE {older} AND NOT coalesce({DELETED_COLUMN}, false)",
                {},
                "truncate",
            )
        else:
            self._commit(f"DELETE FROM {ident} WHERE {older}", {}, "truncate")

    def _ensure_table(self, ident: str, names: list[str], types: dict[str, str], defaults: dict[str, Any], meta: list[tuple[str, str]]) -> dict[str, str]:
        """Create the table, or bring it to the events' schema: add columns, widen types, add missing metadata.
        Returns the table's properties."""
        from walflow.lake import LakeError, check_evolution, sql_literal

        if not self.exists(ident):
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {_q(self.catalog)}.{_q(self.namespace)}")
            columns = ", ".join([f"{_q(n)} {types[n]}" for n in names] + [f"{_q(n)} {t}" for n, t in meta])
            self.spark.sql(
                f"CREATE TABLE {ident} ({columns}) USING iceberg TBLPROPERTIES ("
                "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
                "'write.merge.mode'='merge-on-read')"
            )
            return {}
        existing = {f.name: f.dataType.simpleString() for f in self.spark.table(ident).schema.fields}
        wanted = {n: _simple(types[n]) for n in names}
        add, widen, problems = check_evolution(existing, wanted)
        if problems:
            raise LakeError(
                f"lake table {ident} cannot take the source's new schema: {'; '.join(problems)}. walflow adds columns and widens "
                "int→bigint, float→double and a decimal's precision (same scale), the changes Iceberg makes in place; any other "
                "type change (a narrowing, or e.g. int→text) needs the lake table rebuilt: drop it (or set walflow.lake.namespace "
                "to a new namespace) and re-snapshot the source table."
            )
        for name, new_type in widen.items():
            log.info("%s: widening column %s from %s to %s", ident, name, existing[name], new_type)
            self.spark.sql(f"ALTER TABLE {ident} ALTER COLUMN {_q(name)} TYPE {new_type}")
        for name, meta_type in meta:
            if name not in existing:
                self.spark.sql(f"ALTER TABLE {ident} ADD COLUMN {_q(name)} {meta_type}")
        pending = {}
        for name in add:
            if name in defaults:
                # PostgreSQL gave every existing row the default without a change event: so must the lake.
                # The intent is recorded first, so a crash between the steps is finished by the next run.
                pending[name] = sql_literal(defaults[name], types[name])
                self.spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ({_s('walflow.pending-default.' + name)} = {_s(pending[name])})")
            self.spark.sql(f"ALTER TABLE {ident} ADD COLUMN {_q(name)} {types[name]}")
        properties = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}
        for key, literal in properties.items():
            if key.startswith("walflow.pending-default."):
                column = key[len("walflow.pending-default.") :]
                self._commit(f"UPDATE {ident} SET {_q(column)} = {literal} WHERE {_q(column)} IS NULL", {}, "default")
                self.spark.sql(f"ALTER TABLE {ident} UNSET TBLPROPERTIES ({_s(key)})")
        return properties

    def _merge_sql(self, ident: str, view: str, names: list[str], key_names: list[str]) -> str:
        """One MERGE of the latest event per key. An event older than the row's (by source position) is ignored, so
        that a redelivered or late event never overwrites a newer row; equal positions are the same event again."""
        from walflow.lake import DELETED_COLUMN

        meta_values = "s._walflow_op, s._walflow_lsn, s._walflow_source_ts_ms, current_timestamp(), s._walflow_position"
        insert_cols = ", ".join([_q(n) for n in names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_applied_at", "_walflow_position"])
        insert_vals = ", ".join([f"s.{_q(n)}" for n in names] + [meta_values])
        if self.soft:
            insert_cols += f", {DELETED_COLUMN}"
            insert_vals += ", s._walflow_op IN ('d', 't')"
        on = " AND ".join(f"t.{_q(k)} <=> s.{_q(k)}" for k in key_names)
        newer = "(t._walflow_position IS NULL OR s._walflow_position >= t._walflow_position)"
        sets = ", ".join(f"t.{_q(n)} = CASE WHEN array_contains(s._walflow_toast, {_s(n)}) THEN t.{_q(n)} ELSE s.{_q(n)} END" for n in names)
        stamp = "t._walflow_op = s._walflow_op, t._walflow_lsn = s._walflow_lsn, t._walflow_source_ts_ms = s._walflow_source_ts_ms, t._walflow_applied_at = current_timestamp(), t._walflow_position = s._walflow_position"
        if self.soft:
            deleted = f"WHEN MATCHED AND s._walflow_op = 'd' AND {newer} THEN UPDATE SET t.{DELETED_COLUMN} = true, {stamp}"
            # 't': a row a truncate removed (soft mode writes it flagged, with its last values)
            sets += f", {stamp}, t.{DELETED_COLUMN} = (s._walflow_op = 't')"
            not_matched = f"WHEN NOT MATCHED THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
        else:
            deleted = f"WHEN MATCHED AND s._walflow_op = 'd' AND {newer} THEN DELETE"
            sets += f", {stamp}"
            not_matched = f"WHEN NOT MATCHED AND s._walflow_op <> 'd' THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
        return f"MERGE INTO {ident} t USING {view} s ON {on} {deleted} WHEN MATCHED AND {newer} THEN UPDATE SET {sets} {not_matched}"

    def _merge_keyless(self, ident: str, frame: Any, names: list[str], types: dict[str, str], commit: dict[str, str]) -> int:
        """Apply updates and deletes of a table without a key (REPLICA IDENTITY FULL) in one MERGE.

        Such a table is a multiset of rows: an insert adds one copy of its row, a delete removes one copy of its old
        row, an update does both. The net change per distinct row value does not depend on the order of the events
        (truncates aside, applied before), so the job sums them, reads how many copies of each affected value the
        lake holds, and in one MERGE deletes those copies and inserts the number that must remain plus the new
        rows. Returns how many before images the lake did not hold (a redelivered delete, or a lake that diverged).
        """
        from functools import reduce

        from pyspark.sql import functions as F

        from walflow.lake import DELETED_COLUMN, LakeError

        maps = [n for n in names if types[n].startswith("map")]
        if maps:
            raise LakeError(
                f"lake table {ident}: the source table has no key, and rows of it are matched by their whole value, which "
                f"map columns ({', '.join(maps)}) cannot take part in: give the table a primary key or set message.key.columns"
            )
        cols = [F.col(_q(n)) for n in names]
        meta = F.struct("_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_position")
        changes = frame.groupBy(*cols).agg(F.sum("_walflow_sign").alias("_walflow_delta"), F.max_by(meta, "_walflow_position").alias("_walflow_meta"))
        changes = changes.filter("_walflow_delta <> 0").persist()
        target = self.spark.table(ident)
        if self.soft:
            target = target.filter(f"NOT coalesce({DELETED_COLUMN}, false)")

        def same(left: str, right: str) -> Any:
            return reduce(lambda a, b: a & b, [F.col(f"{left}.{_q(n)}").eqNullSafe(F.col(f"{right}.{_q(n)}")) for n in names])

        gone = changes.filter("_walflow_delta < 0")
        held = (
            target.alias("t")
            .join(gone.alias("g"), same("t", "g"), "left_semi")
            .groupBy(*cols)
            .agg(F.count(F.lit(1)).alias("_walflow_n"), F.max_by(meta, "_walflow_position").alias("_walflow_kept"))
        )
        gone = gone.alias("g").join(held.alias("h"), same("g", "h"), "left").select(
            *[F.col(f"g.{_q(n)}").alias(n) for n in names],
            "g._walflow_delta",
            "g._walflow_meta",
            F.coalesce("h._walflow_n", F.lit(0)).alias("_walflow_n"),
            # the copies that stay keep their metadata (rows written before positions were stored have none)
            F.coalesce("h._walflow_kept", "g._walflow_meta").alias("_walflow_kept"),
        )

        def rows(source: Any, kind: str, copies: Any, meta_col: str, deleted: bool) -> Any:
            out = source.withColumn("_walflow_copies", copies).filter("_walflow_copies > 0")
            out = out.withColumn("_walflow_copy", F.explode(F.sequence(F.lit(1), F.col("_walflow_copies"))))
            return out.select(
                F.lit(kind).alias("_walflow_kind"),
                *[F.col(_q(n)) for n in names],
                F.col(f"{meta_col}._walflow_op").alias("_walflow_op"),
                F.col(f"{meta_col}._walflow_lsn").alias("_walflow_lsn"),
                F.col(f"{meta_col}._walflow_source_ts_ms").alias("_walflow_source_ts_ms"),
                F.col(f"{meta_col}._walflow_position").alias("_walflow_position"),
                F.lit(deleted).alias("_walflow_is_deleted"),
            )

        remaining = F.col("_walflow_n") + F.col("_walflow_delta")
        parts = [
            rows(gone, "del", F.lit(1), "_walflow_meta", False),  # matches every copy of the value
            rows(gone, "ins", F.greatest(remaining, F.lit(0)), "_walflow_kept", False),  # the copies that stay
            rows(changes.filter("_walflow_delta > 0"), "ins", F.col("_walflow_delta"), "_walflow_meta", False),
        ]
        if self.soft:
            parts.append(rows(gone, "ins", F.least(F.col("_walflow_n"), -F.col("_walflow_delta")), "_walflow_meta", True))
        source = reduce(lambda a, b: a.unionByName(b), parts).persist()
        unmatched = gone.select(F.sum(F.greatest(-remaining, F.lit(0)))).collect()[0][0] or 0
        if unmatched:
            log.warning(
                "%s: %d before image(s) of updates/deletes are not in the lake table (a redelivered change, or a table without "
                "key whose REPLICA IDENTITY is not FULL); those changes removed nothing",
                ident,
                unmatched,
            )
        view = f"walflow_src_{uuid.uuid4().hex[:8]}"
        source.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{_q(n)} <=> s.{_q(n)}" for n in names)
        if self.soft:
            on += f" AND NOT coalesce(t.{DELETED_COLUMN}, false)"
        insert_cols = [_q(n) for n in names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_position", "_walflow_applied_at"]
        insert_vals = [f"s.{_q(n)}" for n in names] + ["s._walflow_op", "s._walflow_lsn", "s._walflow_source_ts_ms", "s._walflow_position", "current_timestamp()"]
        if self.soft:
            insert_cols.append(DELETED_COLUMN)
            insert_vals.append("s._walflow_is_deleted")
        self._commit(
            f"MERGE INTO {ident} t USING {view} s ON s._walflow_kind = 'del' AND {on} WHEN MATCHED THEN DELETE "
            f"WHEN NOT MATCHED AND s._walflow_kind = 'ins' THEN INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})",
            commit,
            "merge",
        )
        source.unpersist()
        changes.unpersist()
        return int(unmatched)

    def _commit(self, statement: str, properties: dict[str, str], kind: str) -> None:
        """Run one SQL commit with ``properties`` and walflow's mark (``walflow.commit`` = ``kind``) in its snapshot summary.

        Iceberg's CommitMetadata keeps commit properties in a thread-local; PySpark pins each Python thread to
        one JVM thread, so setting it here and running the statement on the same thread attaches them to the
        statement's own snapshot: the data and its Kafka offsets commit together or not at all.
        """
        from walflow.lake import COMMIT_PROPERTY

        jvm = self.spark._jvm
        cls = jvm.org.apache.spark.util.Utils.classForName("org.apache.iceberg.spark.CommitMetadata", True, False)
        field = cls.getDeclaredField("COMMIT_PROPERTIES")
        field.setAccessible(True)
        local = field.get(None)
        props = jvm.java.util.HashMap()
        for key, value in {**properties, COMMIT_PROPERTY: kind}.items():
            props.put(key, value)
        local.set(props)
        try:
            self.spark.sql(statement)
        finally:
            local.remove()


def _key_names(key: bytes | bytearray | None) -> list[str]:
    """The field names of a record key (with or without its schema part)."""
    if key is None:
        return []
    doc = orjson.loads(bytes(key))
    if isinstance(doc, dict) and "schema" in doc and "payload" in doc:
        doc = doc["payload"]
    return list(doc.keys()) if isinstance(doc, dict) else []


#: The order of events: source position, then the Kafka position (redeliveries of one event sit in one partition).
_ORDER = ("_walflow_pos_a", "_walflow_pos_b", "_walflow_pos_c", "_walflow_partition", "_walflow_offset")


def _latest_per_key(frame: Any, key_names: list[str]) -> Any:
    """The last event (by source position) of each key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = Window.partitionBy(*[F.col(_q(k)) for k in key_names]).orderBy(*[F.col(c).desc() for c in _ORDER])
    return frame.withColumn("_walflow_rank", F.row_number().over(latest)).filter("_walflow_rank = 1").drop("_walflow_rank")


def _after(cut: Any) -> Any:
    """A filter keeping the events after position ``cut`` (a row with _walflow_pos_a/b/c)."""
    from pyspark.sql import functions as F

    a, b, c = (F.col(f"_walflow_pos_{x}") for x in "abc")
    ca, cb, cc = cut["_walflow_pos_a"], cut["_walflow_pos_b"], cut["_walflow_pos_c"]
    return (a > ca) | ((a == ca) & ((b > cb) | ((b == cb) & (c > cc))))


def offset_slices(slices: list[tuple[int, int, int]], parallelism: int, min_size: int = 20_000) -> list[tuple[int, int, int]]:
    """Cut (partition, start, end) ranges into about ``parallelism`` pieces of at least ``min_size`` records."""
    total = sum(end - start for _p, start, end in slices)
    size = max(min_size, -(-total // max(parallelism, 1)))
    out = []
    for partition, start, end in slices:
        for begin in range(start, end, size):
            out.append((partition, begin, min(begin + size, end)))
    return out


def ship_walflow(spark: Any) -> None:
    """Make ``walflow.lake`` importable on the executors of any cluster.

    The executors convert events with :mod:`walflow.lake`; on a cluster they do not have this repository, so the
    three pure-Python modules it needs are zipped on the driver and added with ``addPyFile``.
    """
    import tempfile
    import zipfile
    from pathlib import Path

    import walflow

    package = Path(walflow.__file__).parent
    archive = Path(tempfile.mkdtemp(prefix="walflow-pyfiles-")) / "walflow_lake.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for module in ("__init__.py", "errors.py", "lake.py"):
            zf.write(package / module, f"walflow/{module}")
    spark.sparkContext.addPyFile(str(archive))


def _from_offsets(starts: dict[int, int]) -> Any:
    """A filter keeping the events at or after each partition's start offset."""
    from pyspark.sql import functions as F

    keep = F.lit(True)
    for partition, start in starts.items():
        keep = keep & ((F.col("_walflow_partition") != partition) | (F.col("_walflow_offset") >= start))
    return keep


def _simple(ddl_type: str) -> str:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl_type).simpleString()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="apply a walflow connector's change events to Iceberg")
    parser.add_argument("--topic-prefix", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument(
        "--kafka-config", default=os.environ.get("WALFLOW_KAFKA_CONFIG", ""), help="JSON of extra librdkafka settings (TLS, SASL); default $WALFLOW_KAFKA_CONFIG"
    )
    parser.add_argument("--catalog", default="lake")
    parser.add_argument("--namespace", default=None, help="Iceberg namespace (default: the topic prefix)")
    parser.add_argument("--max-records", type=int, default=5_000_000)
    parser.add_argument("--delete-mode", choices=["hard", "soft"], default="hard")
    parser.add_argument("--placeholder", default="__debezium_unavailable_value")
    parser.add_argument("--changelog", action="store_true", help="also append every event to <table>__changelog")
    parser.add_argument("--topics", default="", help="comma-separated topics (default: every topic of the prefix)")
    parser.add_argument("--result", default="", help="write the JSON summary to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"walflow-apply-{args.topic_prefix}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not spark.sparkContext.master.startswith("local"):
        ship_walflow(spark)
    started = time.monotonic()
    applier = Applier(spark, args)
    topics = list_topics(args.bootstrap, applier.extra, args.topic_prefix)
    if args.topics:
        wanted = {t.strip() for t in args.topics.split(",") if t.strip()}
        topics = {t: p for t, p in topics.items() if t in wanted}
    results = []
    for topic in sorted(topics):
        result = applier.apply_topic(topic, topics[topic])
        log.info("%s → %s: %s record(s)%s", topic, result["table"], result["records"], "" if result["committed"] else " (nothing to commit)")
        results.append(result)
    summary = {"tables": results, "seconds": round(time.monotonic() - started, 2)}
    text = json.dumps(summary, default=str)
    print(f"WALFLOW_APPLY_SUMMARY {text}")
    if args.result:
        with open(args.result, "w") as fh:
            fh.write(text)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
