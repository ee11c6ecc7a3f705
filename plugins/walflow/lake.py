"""The lake side without Spark: Debezium schemas to Iceberg/Spark types, events to rows, offsets bookkeeping.

The Spark job (``include/spark/apply_changes.py``) uses these functions on the driver and the executors;
keeping them free of Spark makes them testable and reusable (pyiceberg readers use the same mapping).

Type mapping (Debezium semantic type → Iceberg type):

================================================  =======================================
Debezium                                          Iceberg / Spark
================================================  =======================================
int8/int16/int32                                  int
int64                                             long
float / double                                    float / double
boolean                                           boolean
string, Json, Xml, Uuid, Enum, Ltree, Interval    string
bytes, Bits                                       binary
Decimal (scale s, precision p)                    decimal(p, s) (p = 38 when unknown)
VariableScaleDecimal                              string (the exact decimal text: lossless)
Date / connect Date                               date
Timestamp, MicroTimestamp, connect Timestamp      timestamp (without zone)
ZonedTimestamp                                    timestamptz
Time, MicroTime, connect Time, MicroDuration      long (microseconds; Spark has no time type)
ZonedTime                                         string
array                                             list<element>
map                                               map<string, string>
Point, Geometry, Geography                        struct of their fields (wkb as binary)
================================================  =======================================
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from decimal import Decimal
from typing import Any

from walflow.errors import WalflowError

META_COLUMNS = ("_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_applied_at")
DELETED_COLUMN = "_walflow_deleted"
OFFSETS_PROPERTY = "walflow.offsets"
FINGERPRINTS_PROPERTY = "walflow.fingerprints"
TOAST_COLUMN = "_walflow_toast"

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class LakeError(WalflowError):
    """The lake cannot take the events as they are (incompatible schema change, lost topics...)."""


def table_name(schema: str, table: str) -> str:
    """Iceberg table name of a source table: ``<schema>__<table>``, lower-case, safe characters only."""
    return re.sub(r"[^a-z0-9_]", "_", f"{schema}__{table}".lower())


def spark_type(field: dict[str, Any]) -> str:
    """Spark SQL DDL type of a Debezium field schema (see the module's table)."""
    name = field.get("name")
    kind = field["type"]
    if name == "org.apache.kafka.connect.data.Decimal":
        params = field.get("parameters", {})
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        precision = min(max(precision, scale, 1), 38)
        return f"decimal({precision},{scale})"
    if name == "io.debezium.data.VariableScaleDecimal":
        return "string"
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return "date"
    if name in ("io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp", "org.apache.kafka.connect.data.Timestamp"):
        return "timestamp_ntz"
    if name == "io.debezium.time.ZonedTimestamp":
        return "timestamp"
    if name in ("io.debezium.time.Time", "io.debezium.time.MicroTime", "org.apache.kafka.connect.data.Time", "io.debezium.time.MicroDuration"):
        return "bigint"
    if kind == "array":
        return f"array<{spark_type(field['items'])}>"
    if kind == "map":
        return f"map<{spark_type(field['keys'])},{spark_type(field['values'])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"`{f['field']}`:{spark_type(f)}" for f in field["fields"]) + ">"
    return {
        "int8": "int",
        "int16": "int",
        "int32": "int",
        "int64": "bigint",
        "float": "float",
        "double": "double",
        "boolean": "boolean",
        "string": "string",
        "bytes": "binary",
    }[kind]


def _special_float(value: Any) -> Any:
    if isinstance(value, str):
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.get(value, value)
    return value


def value_converter(field: dict[str, Any]) -> Any:
    """A function from the JSON payload value of ``field`` to the Python value Spark stores."""
    name = field.get("name")
    kind = field["type"]
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int(field.get("parameters", {}).get("scale", 0))
        return lambda v: Decimal(int.from_bytes(base64.b64decode(v), "big", signed=True)).scaleb(-scale)
    if name == "io.debezium.data.VariableScaleDecimal":
        return lambda v: str(Decimal(int.from_bytes(base64.b64decode(v["value"]), "big", signed=True)).scaleb(-int(v["scale"])))
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return lambda v: _EPOCH_DATE + dt.timedelta(days=v)
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return lambda v: _EPOCH + dt.timedelta(milliseconds=v)
    if name == "io.debezium.time.MicroTimestamp":
        return lambda v: _EPOCH + dt.timedelta(microseconds=v)
    if name == "io.debezium.time.ZonedTimestamp":
        return lambda v: dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return lambda v: v * 1000
    if kind in ("float", "double"):
        return _special_float
    if kind == "bytes":
        return lambda v: base64.b64decode(v)
    if kind == "array":
        inner = value_converter(field["items"])
        return lambda v: [None if x is None else inner(x) for x in v]
    if kind == "struct":
        subs = [(f["field"], value_converter(f)) for f in field["fields"]]
        return lambda v: tuple(None if v.get(n) is None else c(v[n]) for n, c in subs)
    return lambda v: v


class RowShape:
    """The columns of one table version: names, Spark types and payload converters."""

    def __init__(self, value_schema: dict[str, Any]) -> None:
        after = next(f for f in value_schema["fields"] if f["field"] == "after")
        self.fields = after["fields"]
        self.names = [f["field"] for f in self.fields]
        self.types = {f["field"]: spark_type(f) for f in self.fields}
        self.converters = [(f["field"], value_converter(f), f["type"] in ("string", "bytes")) for f in self.fields]

    def convert(self, row: dict[str, Any], placeholder_values: tuple[Any, ...]) -> tuple[list[Any], list[str]]:
        """The row's values (in ``names`` order) and the names of columns holding the TOAST placeholder."""
        values: list[Any] = []
        toasted: list[str] = []
        for name, convert, can_toast in self.converters:
            value = row.get(name)
            if value is None:
                values.append(None)
                continue
            if can_toast and value in placeholder_values:
                toasted.append(name)
                values.append(None)
                continue
            values.append(convert(value))
        return values, toasted


def placeholder_values(placeholder: str) -> tuple[Any, ...]:
    """The forms the TOAST placeholder takes in string and bytes (base64) columns."""
    raw = bytes.fromhex(placeholder[4:]) if placeholder.startswith("hex:") else placeholder.encode()
    text = raw.decode("utf-8", errors="replace")
    return (text, base64.b64encode(raw).decode("ascii"))


def check_evolution(existing: dict[str, str], wanted: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Columns to add, and incompatible changes (each a message), from the lake's to the events' schema."""
    widenings = {("int", "bigint"), ("float", "double")}
    add = {n: t for n, t in wanted.items() if n not in existing}
    problems = []
    for name, new in wanted.items():
        old = existing.get(name)
        if old is None or old == new:
            continue
        if (old, new) in widenings:
            continue
        if old.startswith("decimal") and new.startswith("decimal"):
            p_old, s_old = map(int, old[8:-1].split(","))
            p_new, s_new = map(int, new[8:-1].split(","))
            if s_old == s_new and p_new >= p_old:
                continue
        problems.append(f"column {name!r} changes from {old} to {new}")
    return add, problems


def parse_offsets(text: str | None) -> dict[str, dict[int, int]]:
    import json

    if not text:
        return {}
    raw = json.loads(text)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def format_offsets(offsets: dict[str, dict[int, int]]) -> str:
    import json

    return json.dumps({topic: {str(p): o for p, o in sorted(parts.items())} for topic, parts in sorted(offsets.items())}, sort_keys=True)


def sql_literal(value: Any, spark_type_name: str) -> str:
    """A Spark SQL literal of ``value`` (already converted by :func:`value_converter`) in the given type."""
    if value is None:
        return f"CAST(NULL AS {spark_type_name})"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    if isinstance(value, (int, float, Decimal, dt.date, dt.datetime, str)):
        text = value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else str(value)
        return "CAST('" + text.replace("'", "''") + f"' AS {spark_type_name})"
    raise LakeError(f"cannot write a default value of type {type(value).__name__} ({spark_type_name})")


def field_defaults(value_schema: dict[str, Any]) -> dict[str, Any]:
    """Column defaults the event schema carries, converted to lake values (``default`` of each field)."""
    after = next(f for f in value_schema["fields"] if f["field"] == "after")
    return {f["field"]: value_converter(f)(f["default"]) for f in after["fields"] if f.get("default") is not None}


def read_hadoop_table(warehouse: str, namespace: str, table: str) -> Any | None:
    """A lake table of a Hadoop catalog opened with pyiceberg (no Spark needed), or None if it does not exist.

    The Hadoop catalog keeps no catalog service: the table is ``<warehouse>/<namespace>/<table>``, and
    ``metadata/version-hint.text`` names its current metadata file. For REST, Hive or JDBC catalogs use
    ``pyiceberg.catalog.load_catalog`` instead.
    """
    from pathlib import Path

    from pyiceberg.table import StaticTable

    folder = Path(warehouse) / namespace / table / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        return None
    return StaticTable.from_metadata(str(folder / f"v{hint.read_text().strip()}.metadata.json"))


def partition_end(consumer: Any, topic: str, partition: int, start: int, timeout: float = 30.0) -> int:
    """A partition's end offset, found by consuming to EOF with ``consumer`` (``enable.partition.eof`` set).

    ListOffsets can be short by the last batch on some Kafka-compatible brokers (see DESIGN.md), so it only
    gives where to begin reading: one record before it, or ``start`` when that is further.
    """
    from confluent_kafka import KafkaError, TopicPartition

    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    begin = max(0, min(high, max(start, high - 1)))
    consumer.assign([TopicPartition(topic, partition, begin)])
    end = begin
    while True:
        msg = consumer.poll(timeout)
        if msg is None:
            raise LakeError(f"no end of partition from {topic}[{partition}] within {timeout:.0f} s: is the broker reachable?")
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return max(end, msg.offset()) if msg.offset() >= 0 else end
            raise LakeError(f"{topic}[{partition}]: {msg.error().str()}")
        end = msg.offset() + 1


def record_fingerprint(consumer: Any, topic: str, partition: int, offset: int, timeout: float = 30.0) -> str:
    """A short hash of the record at ``offset`` (key and value), or "" when the partition has no such record.

    Stored with the lake's offsets, it tells a topic that was recreated and refilled (same offsets, other
    records) from the topic the lake read.
    """
    import hashlib

    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(topic, partition, offset)])
    msg = consumer.poll(timeout)
    if msg is None:
        raise LakeError(f"no answer from {topic}[{partition}] within {timeout:.0f} s: is the broker reachable?")
    if msg.error():
        if msg.error().code() == KafkaError._PARTITION_EOF:
            return ""
        raise LakeError(f"{topic}[{partition}]: {msg.error().str()}")
    if msg.offset() != offset:
        return ""  # the record is gone (retention, or a shorter recreated topic)
    digest = hashlib.sha1()
    digest.update(msg.key() or b"")
    digest.update(b"\0")
    digest.update(msg.value() or b"")
    return digest.hexdigest()[:16]
