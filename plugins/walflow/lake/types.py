"""Debezium field schemas to lake (Spark/Iceberg) types, and JSON payload values to the values the lake stores.

================================================  =============================================================
Debezium                                          Iceberg / Spark
================================================  =============================================================
int8/int16/int32, int64                           int, long
float / double                                    float / double (NaN and ±Infinity kept)
boolean                                           boolean
string, Json, Xml, Uuid, Enum, Ltree, Interval    string
bytes, Bits                                       binary
Decimal (precision p <= 38, scale 0..38)          decimal(p, s) (p = 38 when not given)
Decimal with a negative scale                     decimal(p - s, 0) (the values are whole numbers)
Decimal with p > 38 or s > 38                     string: the exact decimal text (Spark stops at 38 digits)
VariableScaleDecimal                              string: the exact decimal text
Date / connect Date                               date
Timestamp, MicroTimestamp, connect Timestamp      timestamp (without zone)
ZonedTimestamp                                    timestamptz
Time, MicroTime, connect Time, MicroDuration      long (microseconds; Spark has no time type)
ZonedTime                                         string
array                                             list<element>
map                                               map<key, value>
Point, Geometry, Geography                        struct of their fields (wkb as binary)
================================================  =============================================================

Converters give temporal values as integers (microseconds or days since the epoch) and Arrow-ready nested values
(structs as dicts, maps as lists of pairs); :mod:`walflow.lake.values` fits what a lake type cannot hold. A
field whose semantic name is unknown (a newer Debezium's) falls back to its schema type.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa

from walflow.errors import LakeError
from walflow.lake.loose import KEEPS, LOOSE, loose_converter
from walflow.lake.naming import sql_quote, sql_string
from walflow.lake.values import (
    DEBEZIUM_INFINITE_DAYS,
    TS_NEG_INF,
    TS_NEG_INF_MS,
    TS_POS_INF,
    TS_POS_INF_MS,
    fit,
    parse_zoned,
    render_days,
    render_micros,
    scaled,
    special_float,
)

Converter = Callable[[Any], Any] | None  # None: the JSON value is stored as it is

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
_MILLI_TIMESTAMPS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
_MILLI_TIMES = ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time")
_MICRO_LONGS = ("io.debezium.time.MicroTime", "io.debezium.time.MicroDuration")
_PLAIN = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "bigint",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}


#: PostgreSQL's largest numeric scale: a Decimal's scale above it is a negative scale as Debezium reads it
#: (numeric(5,-2) arrives with scale 2046, the 11-bit two's complement read unsigned)
_MAX_PG_SCALE = 1000


def _decimal_shape(field: dict[str, Any]) -> tuple[int | None, int]:
    """(precision, scale) of a Decimal field, the scale as the column declares it (negative ones restored)."""
    params = field.get("parameters") or {}
    precision = params.get("connect.decimal.precision")
    scale = int(params.get("scale", 0))
    if scale > _MAX_PG_SCALE:
        scale = ((scale & 0x7FF) ^ 0x400) - 0x400
    return (int(precision) if precision is not None else None), scale


def spark_type(field: dict[str, Any]) -> str:
    """Spark SQL DDL type of a Debezium field schema (see the module's table)."""
    name = field.get("name")
    kind = field["type"]
    if name == LOOSE:
        return str(field["parameters"]["spark"])
    if name == DECIMAL:
        precision, scale = _decimal_shape(field)
        if scale < 0:
            return f"decimal({min((precision or 38) - scale, 38)},0)"
        if scale > 38 or (precision or 0) > 38:
            return "string"
        return f"decimal({max(precision or 38, scale, 1)},{scale})"
    if name == VARIABLE_DECIMAL:
        return "string"
    if name in _DATES:
        return "date"
    if name in _MILLI_TIMESTAMPS or name in ("io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp"):
        return "timestamp_ntz"
    if name == "io.debezium.time.ZonedTimestamp":
        return "timestamp"
    if name in _MILLI_TIMES or name in _MICRO_LONGS or name == "io.debezium.time.NanoTime":
        return "bigint"
    if kind == "array":
        return f"array<{spark_type(field['items'])}>"
    if kind == "map":
        return f"map<{spark_type(field['keys'])},{spark_type(field['values'])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"{sql_quote(f['field'])}:{spark_type(f)}" for f in field["fields"]) + ">"
    return _PLAIN[kind]


def _unscaled(text: str) -> int:
    # binascii directly: base64.b64decode's argument checks cost as much as the decoding (this runs per value)
    return int.from_bytes(binascii.a2b_base64(text), "big", signed=True)


def _milli_timestamp(v: int) -> int:
    # Debezium 3.6 sends the infinity numbers divided by 1000 in millisecond fields; the pre-2.6 form sent them as is
    if v in (TS_POS_INF_MS, TS_POS_INF):
        return TS_POS_INF
    if v in (TS_NEG_INF_MS, TS_NEG_INF):
        return TS_NEG_INF
    return v * 1000


def _days(v: int) -> int:
    # Debezium's infinity day numbers are far below 0001-01-01: the lake's own ones clamp each to its end of the range
    return DEBEZIUM_INFINITE_DAYS.get(v, v)


def value_converter(field: dict[str, Any]) -> Converter:
    """A function from the JSON payload value of ``field`` to the value the lake stores, or None for as-is."""
    name = field.get("name")
    kind = field["type"]
    if name == LOOSE:
        return loose_converter(str(field["parameters"]["spark"]))
    if name == DECIMAL:
        _precision, scale = _decimal_shape(field)
        if spark_type(field) == "string":
            return lambda v: format(scaled(_unscaled(v), scale), "f")
        if scale < 0:
            wire = int(field["parameters"]["scale"])  # the scale the record's unscaled value goes with
            if wire < 0:
                return lambda v: Decimal(_unscaled(v) * 10 ** (-scale))
            return lambda v: Decimal(_unscaled(v) // 10**wire)
        return lambda v: scaled(_unscaled(v), scale)
    if name == VARIABLE_DECIMAL:
        return lambda v: format(scaled(_unscaled(v["value"]), int(v["scale"])), "f")
    if name in _DATES:
        return _days
    if name == "io.debezium.time.MicroTimestamp" or name in _MICRO_LONGS:
        return None  # microseconds: already the lake's integers
    if name in _MILLI_TIMESTAMPS:
        return _milli_timestamp
    if name in ("io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime"):
        return lambda v: v // 1000
    if name == "io.debezium.time.ZonedTimestamp":
        return parse_zoned
    if name in _MILLI_TIMES:
        return lambda v: v * 1000
    if kind in ("float", "double"):
        return special_float
    if kind == "bytes":
        return base64.b64decode
    if kind == "array":
        inner = value_converter(field["items"])
        if inner is None:
            return None
        return lambda v: [None if x is None else inner(x) for x in v]
    if kind == "map":
        keys, values = value_converter(field["keys"]), value_converter(field["values"])
        return lambda v: [
            (k if keys is None else keys(k), x if x is None or values is None else values(x)) for k, x in v.items()
        ]
    if kind == "struct":
        subs = [(f["field"], value_converter(f)) for f in field["fields"]]
        return lambda v: {n: (v.get(n) if c is None or v.get(n) is None else c(v[n])) for n, c in subs}
    return None


class RowShape:
    """The columns of one table version: names, Spark types and payload converters."""

    def __init__(self, value_schema: dict[str, Any]) -> None:
        after = next(f for f in value_schema["fields"] if f["field"] == "after")
        self.fields: list[dict[str, Any]] = after.get("fields") or []
        self.names = [f["field"] for f in self.fields]
        self.types = {f["field"]: spark_type(f) for f in self.fields}
        # whether a value can be the TOAST placeholder: 1 for strings and bytes, 2 for arrays of them (the
        # placeholder as the only element), 0 for anything else
        self.converters = [(f["field"], value_converter(f), _toastable(f)) for f in self.fields]
        self._compiled: Callable[[dict[str, Any], tuple[Any, ...]], tuple[list[Any], list[str]]] | None = None

    def convert(self, row: dict[str, Any], placeholders: tuple[Any, ...]) -> tuple[list[Any], list[str]]:
        """The row's values (in ``names`` order) and the names of columns holding the TOAST placeholder."""
        values: list[Any] = []
        toasted: list[str] = []
        for name, convert, can_toast in self.converters:
            value = row.get(name)
            if value is None:
                values.append(None)
            elif can_toast and _is_placeholder(value, can_toast, placeholders):
                toasted.append(name)
                values.append(None)
            else:
                values.append(value if convert is None else convert(value))
        return values, toasted

    def compiled(self) -> Callable[[dict[str, Any], tuple[Any, ...]], tuple[list[Any], list[str]]]:
        """:meth:`convert` as one generated function, without a loop over the columns.

        It runs for every record the lake job reads, and the loop with its per-column tests cost about as much as
        the conversions themselves; the generated code does the same steps column by column (the tests check
        that both give the same results). Column names enter the code only as ``repr`` literals.
        """
        if self._compiled is not None:
            return self._compiled
        env: dict[str, Any] = {"is_placeholder": _is_placeholder}
        lines = ["def convert(row, placeholders):", "    get = row.get", "    toasted = []"]
        for i, (name, convert, can_toast) in enumerate(self.converters):
            v = f"v{i}"
            lines.append(f"    {v} = get({name!r})")
            if convert is None and not can_toast:
                continue
            lines.append(f"    if {v} is not None:")
            call = f"{v} = c{i}({v})"
            keep = KEEPS.get(convert)
            if keep is not None:  # the common case, a value of the type the converter keeps, without a call
                env[f"t{i}"] = keep
                call = f"{v} = {v} if type({v}) is t{i} else c{i}({v})"
            if can_toast:
                test = (
                    f"{v} in placeholders"
                    if can_toast == TOAST_VALUE
                    else f"is_placeholder({v}, {can_toast}, placeholders)"
                )
                lines += [f"        if {test}:", f"            toasted.append({name!r})", f"            {v} = None"]
                if convert is not None:
                    env[f"c{i}"] = convert
                    lines += ["        else:", f"            {call}"]
            else:
                env[f"c{i}"] = convert
                lines.append(f"        {call}")
        lines.append("    return [" + ", ".join(f"v{i}" for i in range(len(self.converters))) + "], toasted")
        exec(compile("\n".join(lines), f"<walflow.lake.types.RowShape {len(self.converters)} columns>", "exec"), env)
        self._compiled = env["convert"]
        return self._compiled

    def convert_leniently(
        self, row: dict[str, Any], placeholders: tuple[Any, ...]
    ) -> tuple[list[Any], list[str], list[tuple[str, Any, str]]]:
        """As :meth:`convert`, but a value that fails to convert becomes None: returns the failures too, as
        (column, JSON value, error). (The loop is :meth:`convert`'s with a ``try`` per value: that one runs for
        every record and stays free of it; this one only for a record whose conversion failed.)"""
        values: list[Any] = []
        toasted: list[str] = []
        failures = []
        for name, convert, can_toast in self.converters:
            value = row.get(name)
            if value is None:
                values.append(None)
            elif can_toast and _is_placeholder(value, can_toast, placeholders):
                toasted.append(name)
                values.append(None)
            else:
                try:
                    values.append(value if convert is None else convert(value))
                except Exception as exc:
                    failures.append((name, value, f"{type(exc).__name__}: {exc}"))
                    values.append(None)
        return values, toasted, failures


#: the kinds of values an unchanged TOASTed column's placeholder can take (:func:`_toastable`): none; a string or
#: bytes (base64) value; an array of one such element; an array of the placeholder's bytes as numbers (Debezium's form
#: for ``int4[]``, ``int8[]`` and ``date[]``); a map of one entry (``hstore`` as a map)
NOT_TOASTABLE, TOAST_VALUE, TOAST_ELEMENT, TOAST_NUMBERS, TOAST_MAP = range(5)


def _toastable(field: dict[str, Any]) -> int:
    kind = field["type"]
    if kind in ("string", "bytes"):
        return TOAST_VALUE
    if kind == "array":
        items = field["items"]["type"]
        if items in ("string", "bytes"):
            return TOAST_ELEMENT
        if items in ("int32", "int64"):
            return TOAST_NUMBERS
    if kind == "map":
        return TOAST_MAP
    return NOT_TOASTABLE


def _is_placeholder(value: Any, kind: int, placeholders: tuple[Any, ...]) -> bool:
    """Whether ``value`` is the placeholder in the form of ``kind`` (``placeholders``: :func:`placeholder_values`,
    whose last entry is the placeholder's bytes as numbers)."""
    if kind == TOAST_VALUE:
        return value in placeholders
    if not value or not placeholders:
        return False
    if kind == TOAST_ELEMENT:
        return isinstance(value, list) and len(value) == 1 and value[0] in placeholders
    if kind == TOAST_NUMBERS:
        numbers = placeholders[-1]
        return isinstance(value, list) and len(value) == len(numbers) and tuple(value) == numbers
    if kind == TOAST_MAP:
        return (
            isinstance(value, dict)
            and len(value) == 1
            and next(iter(value.items())) == (placeholders[0], placeholders[0])
        )
    return False


def placeholder_values(placeholder: str) -> tuple[Any, ...]:
    """The forms Debezium gives the TOAST placeholder (``toasted.value.placeholder``) in the lake's columns: its text
    (string columns, text-like array elements, a one-entry map's key and value), its bytes in base64 (bytes columns and
    elements), a version 3 UUID of its bytes (``uuid[]``), the text of a one-entry JSON object (``hstore`` as JSON),
    and, last, its bytes as signed numbers (``int4[]``, ``int8[]``, ``date[]``)."""
    raw = bytes.fromhex(placeholder[4:]) if placeholder.startswith("hex:") else placeholder.encode()
    text = raw.decode("utf-8", errors="replace")
    as_uuid = str(uuid.UUID(bytes=hashlib.md5(raw).digest(), version=3))  # java.util.UUID.nameUUIDFromBytes
    as_json = orjson.dumps({text: text}).decode()
    numbers = tuple(b - 256 if b > 127 else b for b in raw)
    return (text, base64.b64encode(raw).decode("ascii"), as_uuid, as_json, numbers)


def field_defaults(value_schema: dict[str, Any]) -> dict[str, Any]:
    """Column defaults the event schema carries, converted to lake values (``default`` of each field)."""
    after = next(f for f in value_schema["fields"] if f["field"] == "after")
    out = {}
    for f in after.get("fields") or []:
        if f.get("default") is not None:
            convert = value_converter(f)
            out[f["field"]] = f["default"] if convert is None else convert(f["default"])
    return out


def sql_literal(value: Any, spark_type_name: str) -> str:
    """A Spark SQL literal of ``value`` (already converted by :func:`value_converter`) in the given type; temporal
    values outside Spark's range are clamped as :mod:`walflow.lake.values` does."""
    if value is None:
        return f"CAST(NULL AS {spark_type_name})"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    if spark_type_name == "date" and isinstance(value, int):
        return f"CAST({sql_string(render_days(fit(value, pa.date32())[0]))} AS date)"
    if spark_type_name in ("timestamp", "timestamp_ntz") and isinstance(value, int):
        zoned = spark_type_name == "timestamp"
        clamped = fit(value, pa.timestamp("us"))[0]
        return f"CAST({sql_string(render_micros(clamped, zoned=zoned).replace('T', ' '))} AS {spark_type_name})"
    if isinstance(value, (int, float, Decimal, str)):
        return f"CAST({sql_string(str(value))} AS {spark_type_name})"
    if isinstance(value, list) and spark_type_name.startswith("array<"):
        (element,) = type_arguments(spark_type_name)
        return f"CAST(array({', '.join(sql_literal(v, element) for v in value)}) AS {spark_type_name})"
    if isinstance(value, (dict, list)) and spark_type_name.startswith("map<"):
        # a map's converted value is Arrow's form, a list of (key, value) pairs; a dict is taken too
        key_type, value_type = type_arguments(spark_type_name)
        items = value.items() if isinstance(value, dict) else value
        pairs = (f"{sql_literal(k, key_type)}, {sql_literal(v, value_type)}" for k, v in items)
        return f"CAST(map({', '.join(pairs)}) AS {spark_type_name})"
    raise LakeError(f"cannot write a default value of type {type(value).__name__} ({spark_type_name}): {value!r}")


def type_arguments(spark_type_name: str) -> list[str]:
    """The element types of ``array<...>`` or ``map<...,...>`` (nested types and ``decimal(p,s)`` kept whole)."""
    inner = spark_type_name[spark_type_name.index("<") + 1 : spark_type_name.rindex(">")]
    parts, depth, begin = [], 0, 0
    for i, char in enumerate(inner):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[begin:i].strip())
            begin = i + 1
    parts.append(inner[begin:].strip())
    return parts


# -- Spark DDL types to Arrow types (the types Spark expects from mapInArrow), without a JVM --------------
_ARROW_SIMPLE = {
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def arrow_type(ddl: str) -> pa.DataType:
    """The Arrow type PySpark uses for a Spark DDL type as :func:`spark_type` writes it (the same as PySpark's
    ``to_arrow_type``; checked against it in the tests)."""
    kind, rest = _parse(ddl.strip(), 0)
    if rest != len(ddl.strip()):
        raise ValueError(f"unexpected text after a type in {ddl!r}")
    return kind


def _parse(text: str, i: int) -> tuple[pa.DataType, int]:
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] == "_"):
        j += 1
    word = text[i:j].lower()
    if word == "decimal":
        close = text.index(")", j)
        precision, scale = (int(x) for x in text[j + 1 : close].split(","))
        return pa.decimal128(precision, scale), close + 1
    if word == "array":
        inner, k = _parse(text, j + 1)
        return pa.list_(inner), k + 1
    if word == "map":
        key, k = _parse(text, j + 1)
        value, k = _parse(text, k + 1)
        return pa.map_(key, value), k + 1
    if word == "struct":
        fields = []
        k = j + 1
        while text[k] != ">":
            if text[k] == "`":
                end = k + 1
                while True:
                    end = text.index("`", end)
                    if text[end : end + 2] == "``":
                        end += 2
                        continue
                    break
                name, k = text[k + 1 : end].replace("``", "`"), end + 1
            else:
                end = text.index(":", k)
                name, k = text[k:end], end
            kind, k = _parse(text, k + 1)
            fields.append(pa.field(name, kind, nullable=True))
            if text[k] == ",":
                k += 1
        return pa.struct(fields), k + 1
    return _ARROW_SIMPLE[word], j


# -- schema evolution rules ---------------------------------------------------------------------------
def check_evolution(
    existing: dict[str, str], wanted: dict[str, str]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
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
