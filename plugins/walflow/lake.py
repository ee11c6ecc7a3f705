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
import hashlib
import re
from decimal import Decimal
from typing import Any

from walflow.errors import WalflowError

META_COLUMNS = ("_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_applied_at", "_walflow_position")
DELETED_COLUMN = "_walflow_deleted"
POSITION_COLUMN = "_walflow_position"
OFFSETS_PROPERTY = "walflow.offsets"
FINGERPRINTS_PROPERTY = "walflow.fingerprints"
#: Every snapshot walflow commits carries this summary property (its value says which step wrote it): a newest
#: snapshot without it was written by someone else.
COMMIT_PROPERTY = "walflow.commit"
TOAST_COLUMN = "_walflow_toast"
#: The field name of a schemaless column (the records had no schema part): ``parameters.spark`` is the lake type,
#: and the converter accepts the JSON forms a value of that type can take.
LOOSE = "walflow.lake.Loose"

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class LakeError(WalflowError):
    """The lake cannot take the events as they are (incompatible schema change, lost topics...)."""


_NOT_WORD = re.compile(r"[^\w]")


def table_name(schema: str, table: str) -> str:
    """Iceberg table name of a source table: ``<schema>__<table>``, lower-case, letters (any script), digits and ``_``.

    Catalogs differ in what they accept (Hive lower-cases, some reject dots and spaces), so other characters become
    ``_``. Two source tables must never share a lake table, so whenever the plain name is not exactly
    ``<schema>__<table>`` (a character was replaced or lower-cased, or the schema holds ``__`` or ends with ``_``,
    which makes the split ambiguous) a short stable hash of the exact source names is appended:
    ``public.orders`` stays ``public__orders``, ``"Sales"."a.b"`` becomes ``sales__a_b_3f2c9a1d``.
    """
    plain = f"{schema}__{table}"
    name = _NOT_WORD.sub("_", plain.lower())
    if name == plain and "__" not in schema and not schema.endswith("_"):
        return name
    digest = hashlib.sha1(f"{schema}\0{table}".encode()).hexdigest()[:8]
    return f"{name}_{digest}"


def sql_quote(name: str) -> str:
    """A Spark SQL identifier: backquoted, backquotes inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal. Spark reads backslash escapes inside literals, so both ``\\`` and ``'`` are escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_type(field: dict[str, Any]) -> str:
    """Spark SQL DDL type of a Debezium field schema (see the module's table)."""
    name = field.get("name")
    kind = field["type"]
    if name == LOOSE:
        return str(field["parameters"]["spark"])
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
        return "struct<" + ",".join(f"{sql_quote(f['field'])}:{spark_type(f)}" for f in field["fields"]) + ">"
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
    if name == LOOSE:
        return loose_converter(str(field["parameters"]["spark"]))
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


def check_evolution(existing: dict[str, str], wanted: dict[str, str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """From the lake's column types to the events': columns to add, columns to widen, and incompatible changes.

    Types are Spark simple strings. The widenings are the ones Iceberg can make in place (metadata only, every
    existing value still valid): int→bigint, float→double, and a decimal's precision growing at the same scale.
    Anything else that changes a column's type (narrowing, int→string...) is a problem, one message each.
    """
    add = {n: t for n, t in wanted.items() if n not in existing}
    widen: dict[str, str] = {}
    problems = []
    for name, new in wanted.items():
        old = existing.get(name)
        if old is None or old == new:
            continue
        if is_widening(old, new):
            widen[name] = new
            continue
        problems.append(f"column {name!r} changes from {old} to {new}")
    return add, widen, problems


def is_widening(old: str, new: str) -> bool:
    """Whether Iceberg can change a column from ``old`` to ``new`` in place (Spark simple type strings)."""
    if (old, new) in {("int", "bigint"), ("float", "double")}:
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        p_old, s_old = map(int, old[8:-1].split(","))
        p_new, s_new = map(int, new[8:-1].split(","))
        return s_old == s_new and p_new > p_old
    return False


def source_position(source: dict[str, Any], transaction: dict[str, Any] | None) -> tuple[int, int, int]:
    """An event's place in the order the source committed its changes: ``(commit position, change LSN, order)``.

    Streamed events carry ``source.sequence`` = [LSN of the previous commit, this change's LSN]: the first grows
    from one transaction to the next in commit order and the second inside a transaction, so the commit position
    is the larger of the two (a change written before the previous commit, in a transaction that committed after
    it, still sorts after every change of that earlier transaction). ``transaction.total_order`` breaks ties
    between events of one WAL record when transaction metadata is on.

    Snapshot events (no sequence) sit at their ``source.lsn``, before any change of the same position: for the
    initial snapshot the slot's consistent point, for an incremental snapshot the high watermark where the rows
    were emitted (DBLog: every change after the watermark is newer, the chunk dropped its rows changed before).
    """
    lsn = source.get("lsn") or 0
    sequence = source.get("sequence")
    order = (transaction or {}).get("total_order") or 0
    if sequence:
        # '["<previous>","<change>"]' as the stream writes it, without a JSON parse (this runs for every event)
        if sequence.startswith('["') and sequence.endswith('"]') and sequence.count('"') == 4:
            previous, change = sequence[2:-2].split('","')
        else:
            import orjson

            try:
                previous, change = orjson.loads(sequence)
            except (ValueError, TypeError):
                previous, change = None, None
        change = int(change) if change else lsn
        previous = int(previous) if previous else 0
        return max(previous, change), change, order
    return lsn, 0, order


def format_position(position: tuple[int, int, int]) -> str:
    """The text form stored in ``_walflow_position``: fixed-width hex, so text order is position order."""
    return f"{position[0]:016X}/{position[1]:016X}"


def json_kind(value: Any) -> str | None:
    """The JSON kind of a schemaless value: long, double, boolean, string, json (object or array), None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return "json"


def inferred_type(kinds: set[str]) -> str:
    """The lake type of a new schemaless column from the JSON kinds its values took (see the README's limits)."""
    if kinds == {"long"}:
        return "bigint"
    if kinds and kinds <= {"long", "double"}:
        return "double"
    if kinds == {"boolean"}:
        return "boolean"
    return "string"


#: JSON kinds each lake type can be read from when the records carry no schema part.
_LOOSE_KINDS = {
    "tinyint": {"long"}, "smallint": {"long"}, "int": {"long"}, "bigint": {"long"},
    "float": {"long", "double", "string"}, "double": {"long", "double", "string"},
    "boolean": {"boolean"}, "string": {"long", "double", "boolean", "string", "json"},
    "date": {"long", "string"}, "timestamp": {"long", "string"}, "timestamp_ntz": {"long", "string"},
    "binary": {"string"},
}


def loose_kinds_fit(spark_type_name: str, kinds: set[str]) -> bool:
    """Whether schemaless values of these JSON kinds can be written to a lake column of this type."""
    if spark_type_name.startswith("decimal"):
        return kinds <= {"long", "double", "string"}
    if spark_type_name.startswith(("array", "map", "struct")):
        return kinds <= {"json"}
    return kinds <= _LOOSE_KINDS.get(spark_type_name, set())


def loose_field(name: str, spark_type_name: str) -> dict[str, Any]:
    """A Debezium-shaped field for a schemaless column whose lake type is known (or was inferred)."""
    return {"type": "string", "optional": True, "field": name, "name": LOOSE, "parameters": {"spark": spark_type_name}}


def _loose_decimal(scale: int) -> Any:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return Decimal(v).quantize(Decimal(1).scaleb(-scale))
            except ArithmeticError:
                # decimal.handling.mode=precise: the unscaled value as base64 big-endian bytes
                return Decimal(int.from_bytes(base64.b64decode(v), "big", signed=True)).scaleb(-scale)
        return Decimal(str(v)).quantize(Decimal(1).scaleb(-scale))

    return convert


def _loose_time(zoned: bool) -> Any:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            parsed = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            if zoned:
                return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
            return parsed.replace(tzinfo=None) if parsed.tzinfo is None else parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
        value = _EPOCH + dt.timedelta(microseconds=v)  # Debezium's default: MicroTimestamp
        return value.replace(tzinfo=dt.timezone.utc) if zoned else value

    return convert


def loose_converter(spark_type_name: str) -> Any:
    """A function from a schemaless JSON value to the Python value of a lake column of ``spark_type_name``.

    Without the schema part nothing says a string is base64 or an integer is microseconds; the lake column's type
    decides: decimals take numbers, decimal text or the base64 of ``decimal.handling.mode=precise``; dates take
    days or ISO text; timestamps take microseconds (Debezium's default precision) or ISO text; strings take JSON
    objects and arrays as their JSON text.
    """
    import json

    t = spark_type_name
    if t in ("tinyint", "smallint", "int", "bigint"):
        return int
    if t in ("float", "double"):
        return lambda v: float(_special_float(v))
    if t == "boolean":
        return bool
    if t == "string":
        return lambda v: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    if t.startswith("decimal("):
        return _loose_decimal(int(t[8:-1].split(",")[1]))
    if t == "date":
        return lambda v: dt.date.fromisoformat(v[:10]) if isinstance(v, str) else _EPOCH_DATE + dt.timedelta(days=v)
    if t == "timestamp_ntz":
        return _loose_time(zoned=False)
    if t == "timestamp":
        return _loose_time(zoned=True)
    if t == "binary":
        return lambda v: base64.b64decode(v)
    if t.startswith("array<") and t.endswith(">"):
        inner = loose_converter(t[6:-1])
        return lambda v: [None if x is None else inner(x) for x in v]
    if t.startswith("map<"):
        return lambda v: {str(k): (x if isinstance(x, str) or x is None else json.dumps(x)) for k, x in v.items()}
    raise LakeError(
        f"a column of lake type {t} cannot be read from records without a schema part: set "
        "value.converter.schemas.enable: true for this connector"
    )


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
        return f"CAST({sql_string(text)} AS {spark_type_name})"
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
