"""Conversion of PostgreSQL column values to Debezium's Kafka Connect representation.

Both streaming (pgoutput text values) and snapshots (the same text form, read with the same session
settings) go through one :class:`ColumnConverter` per column, built once per relation rather than per row:
conversion is on the hot path. A converter pairs the field's Kafka Connect schema (as the JSON converter
writes it) with a function from PostgreSQL's text output to the JSON payload value.

The sessions that produce the text must use ``DateStyle=ISO``, ``IntervalStyle=iso_8601``, ``lc_monetary=C``,
``TimeZone=UTC`` and ``extra_float_digits=3``: :data:`SESSION_SETTINGS` lists them.
"""

from __future__ import annotations

import base64
import logging
import math
import re
import struct
from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import orjson

from walflow.records.arrays import flatten_outer, parse_array, read_quoted, value_depth
from walflow.records.decimals import (
    SPECIAL_DECIMAL_NAMES,
    fixed_scale,
    numeric_precision_scale,
    unscaled_base64,
    variable_scale,
    variable_scale_schema,
)
from walflow.records.envelope import java_hash_map_order
from walflow.records.temporal import (
    date_days,
    datetime_precision,
    interval_micros,
    interval_string,
    jdbc_days,
    time_micros,
    timestamp_micros,
    timestamp_millis,
    zoned_time,
    zoned_timestamp,
)
from walflow.source.catalog import ColumnType

log = logging.getLogger(__name__)


# Built-in type OIDs (pg_type.h); extension types are resolved by name through the catalog.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, MONEY, MACADDR, INET, CIDR, MACADDR8 = 114, 142, 700, 701, 790, 829, 869, 650, 774
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266
BIT, VARBIT, NUMERIC, UUID, JSONB, POINT = 1560, 1562, 1700, 2950, 3802, 600


@dataclass(frozen=True)
class ColumnConverter:
    """The Kafka Connect schema of one field and the function producing its JSON payload value."""

    schema: dict[str, Any]
    convert: Callable[[str], Any]
    optional: bool = True
    #: walflow-internal: the Debezium semantic name, for the lake's type mapping.
    semantic: str | None = field(default=None)


# -- value functions ------------------------------------------------------------------------------
def _bool(text: str) -> bool:
    # 't'/'f' from the output function; 'true'/'false' from a ::text cast (column defaults)
    return text[0] == "t"


def _float(text: str) -> float | str:
    value = float(text)
    if math.isfinite(value):
        return value
    # Kafka Connect's JSON converter writes non-finite doubles as these strings.
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _bytea(text: str) -> str:
    # bytea_output=hex: '\x0a0b'. The JSON converter carries bytes as base64.
    return base64.b64encode(bytes.fromhex(text[2:])).decode("ascii")


# -- converter factory ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ConverterSettings:
    """The connector settings that change how values are represented."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"
    include_unknown_datatypes: bool = False
    #: the scale of ``money`` as a precise decimal (``money.fraction.digits``)
    money_fraction_digits: int = 2
    #: values read by a snapshot's query, where Debezium goes through the JDBC driver's Java types (dates differ)
    snapshot: bool = False

    @classmethod
    def from_config(cls, config: Any) -> ConverterSettings:
        return cls(
            decimal_handling_mode=config.decimal_handling_mode,
            time_precision_mode=config.time_precision_mode,
            binary_handling_mode=config.binary_handling_mode,
            interval_handling_mode=config.interval_handling_mode,
            hstore_handling_mode=config.hstore_handling_mode,
            include_unknown_datatypes=config.include_unknown_datatypes,
            money_fraction_digits=config.money_fraction_digits,
        )


def _schema(
    type_: str, name: str | None = None, parameters: dict[str, str] | None = None, version: int | None = None
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": type_, "optional": True}
    if name:
        schema["name"] = name
    if version is not None:
        schema["version"] = version
    if parameters:
        schema["parameters"] = parameters
    return schema


def _decimal_converter(settings: ConverterSettings, modifier: int) -> tuple[dict[str, Any], Callable[[str], Any], str]:
    precision, scale = numeric_precision_scale(modifier)
    mode = settings.decimal_handling_mode
    if mode == "double":
        return _schema("double"), _float, "double"
    if mode == "string":
        # Debezium writes its special decimal values by name.
        if scale is not None and scale > 1000:
            # a negative scale read as 2048 + scale (see numeric_precision_scale): Debezium prints the whole
            # number with that many zeros after the point
            zeros = "." + "0" * scale
            return _schema("string"), lambda t: SPECIAL_DECIMAL_NAMES.get(t) or t + zeros, "string"
        return _schema("string"), lambda t: SPECIAL_DECIMAL_NAMES.get(t, t), "string"
    if scale is not None:
        params = {"scale": str(scale), "connect.decimal.precision": str(precision)}
        return _schema("bytes", "org.apache.kafka.connect.data.Decimal", params, 1), fixed_scale(scale), "decimal"
    return variable_scale_schema(), variable_scale, "variable_decimal"


def _binary_converter(settings: ConverterSettings) -> tuple[dict[str, Any], Callable[[str], Any]]:
    mode = settings.binary_handling_mode
    if mode == "bytes":
        return _schema("bytes"), _bytea
    if mode == "hex":
        return _schema("string"), lambda text: text[2:]
    if mode == "base64-url-safe":
        return _schema("string"), lambda text: base64.urlsafe_b64encode(bytes.fromhex(text[2:])).decode("ascii")
    return _schema("string"), _bytea


def _temporal_converter(
    settings: ConverterSettings, oid: int, modifier: int
) -> tuple[dict[str, Any], Callable[[str], Any], str]:
    mode = settings.time_precision_mode
    precision = datetime_precision(modifier)
    if oid == DATE:
        days = jdbc_days if settings.snapshot else date_days
        if mode == "connect":
            return _schema("int32", "org.apache.kafka.connect.data.Date", None, 1), days, "date"
        return _schema("int32", "io.debezium.time.Date", None, 1), days, "date"
    if oid == TIME:
        if mode == "connect":
            return (
                _schema("int32", "org.apache.kafka.connect.data.Time", None, 1),
                lambda t: time_micros(t) // 1000,
                "time_ms",
            )
        if mode == "adaptive" and precision <= 3:
            return _schema("int32", "io.debezium.time.Time", None, 1), lambda t: time_micros(t) // 1000, "time_ms"
        return _schema("int64", "io.debezium.time.MicroTime", None, 1), time_micros, "time_us"
    if oid == TIMESTAMP:
        if mode == "connect":
            return (
                _schema("int64", "org.apache.kafka.connect.data.Timestamp", None, 1),
                timestamp_millis,
                "timestamp_ms",
            )
        if precision <= 3:
            return _schema("int64", "io.debezium.time.Timestamp", None, 1), timestamp_millis, "timestamp_ms"
        return _schema("int64", "io.debezium.time.MicroTimestamp", None, 1), timestamp_micros, "timestamp_us"
    if oid == TIMESTAMPTZ:
        # Debezium writes as many fraction digits as the column's precision (6 when it has none)
        return (
            _schema("string", "io.debezium.time.ZonedTimestamp", None, 1),
            lambda t, _w=precision: zoned_timestamp(t, _w),
            "timestamptz",
        )
    if oid == TIMETZ:
        return _schema("string", "io.debezium.time.ZonedTime", None, 1), zoned_time, "timetz"
    raise AssertionError(oid)


_SIMPLE: dict[int, tuple[str, str | None, Callable[[str], Any]]] = {
    BOOL: ("boolean", None, _bool),
    INT2: ("int16", None, int),
    INT4: ("int32", None, int),
    INT8: ("int64", None, int),
    OID: ("int64", None, int),
    FLOAT4: ("float", None, _float),
    FLOAT8: ("double", None, _float),
    TEXT: ("string", None, str),
    VARCHAR: ("string", None, str),
    BPCHAR: ("string", None, str),
    NAME: ("string", None, str),
    CHAR: ("string", None, str),
    JSON: ("string", "io.debezium.data.Json", str),
    JSONB: ("string", "io.debezium.data.Json", str),
    XML: ("string", "io.debezium.data.Xml", str),
    UUID: ("string", "io.debezium.data.Uuid", str),
    INET: ("string", None, str),
    CIDR: ("string", None, str),
    MACADDR: ("string", None, str),
    MACADDR8: ("string", None, str),
}

_SIMPLE_BY_NAME: dict[str, tuple[str, str | None, Callable[[str], Any]]] = {
    "citext": ("string", None, str),
    "ltree": ("string", "io.debezium.data.Ltree", str),
    # the isn extension's isbn is a string in Debezium (it names this one type; ean13, issn... stay unknown)
    "isbn": ("string", None, str),
    "tsvector": ("string", "io.debezium.data.Tsvector", str),
}


def build_converter(column_type: ColumnType, settings: ConverterSettings) -> ColumnConverter | None:
    """Choose the converter of one column, or ``None`` when the type is unknown and not included.

    :param column_type: the column's type as the catalog describes it.
    :param settings: the connector's representation settings.
    """
    oid = column_type.oid
    if column_type.category == "A" and column_type.element is not None:
        return _array_converter(column_type.element, settings, column_type.ndims)
    special = _special_converter(column_type, settings)
    if special is not None:
        return special
    simple = _SIMPLE.get(oid) or _SIMPLE_BY_NAME.get(column_type.base_name)
    if simple is not None:
        type_, name, func = simple
        return ColumnConverter(_named(type_, name), func, semantic=name or type_)
    if oid == NUMERIC:
        schema, func, semantic = _decimal_converter(settings, column_type.modifier)
        return ColumnConverter(schema, func, semantic=semantic)
    if oid == BYTEA:
        schema, func = _binary_converter(settings)
        return ColumnConverter(schema, func, semantic="bytes" if schema["type"] == "bytes" else "string")
    if oid in (DATE, TIME, TIMESTAMP, TIMESTAMPTZ, TIMETZ):
        schema, func, semantic = _temporal_converter(settings, oid, column_type.modifier)
        return ColumnConverter(schema, func, semantic=semantic)
    if column_type.category == "E":
        allowed = ",".join(column_type.enum_values)
        return ColumnConverter(
            _schema("string", "io.debezium.data.Enum", {"allowed": allowed}, 1), str, semantic="enum"
        )
    if settings.include_unknown_datatypes:
        # the bytes of the value's text, represented as binary.handling.mode says (as a bytea column)
        schema, binary = _binary_converter(settings)
        if column_type.base_name in _GEOMETRIC:
            # the JDBC driver's PGbox, PGcircle... objects print their coordinates as Java doubles ("10.0")
            return ColumnConverter(
                schema, lambda text: binary("\\x" + _java_geometric_text(text).hex()), semantic="bytes"
            )
        return ColumnConverter(schema, lambda text: binary("\\x" + text.encode("utf-8").hex()), semantic="bytes")
    return None


_GEOMETRIC = frozenset({"box", "circle", "line", "lseg", "path", "polygon"})
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?Infinity|NaN")


def java_double(value: float) -> str:
    """``Double.toString`` of Java: decimal notation between 10^-3 and 10^7, else computerized scientific."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits_t = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_t.digits))
    exponent = len(digits) + int(digits_t.exponent) - 1  # of the first digit
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole, frac = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
        else:
            whole, frac = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _java_geometric_text(text: str) -> bytes:
    return _NUMBER.sub(lambda m: java_double(float(m.group(0))), text).encode("utf-8")


def _named(type_: str, name: str | None) -> dict[str, Any]:
    # Debezium's logical string types (Json, Xml, Uuid, Ltree) carry a version of 1.
    return _schema(type_, name, None, 1 if name else None)


INT4RANGE, INT8RANGE, NUMRANGE, TSRANGE, TSTZRANGE, DATERANGE = 3904, 3926, 3906, 3908, 3910, 3912
INT4MULTIRANGE, NUMMULTIRANGE, TSMULTIRANGE, TSTZMULTIRANGE, DATEMULTIRANGE, INT8MULTIRANGE = (
    4451,
    4532,
    4533,
    4534,
    4535,
    4536,
)
_RANGES = {
    INT4RANGE,
    INT8RANGE,
    NUMRANGE,
    TSRANGE,
    TSTZRANGE,
    DATERANGE,
    INT4MULTIRANGE,
    NUMMULTIRANGE,
    TSMULTIRANGE,
    TSTZMULTIRANGE,
    DATEMULTIRANGE,
    INT8MULTIRANGE,
}


# -- bits ------------------------------------------------------------------------------------------
def _bits_value(text: str) -> str:
    """Debezium's Bits: the rightmost character is bit 0, in as few little-endian bytes as the set bits need (Java's
    ``BitSet.toByteArray()``), so an all-zero string is empty, whatever the declared length."""
    value = int(text, 2) if text else 0
    return b64encode(value.to_bytes((value.bit_length() + 7) // 8, "little")).decode("ascii")


def _bits_converter(column_type: ColumnType) -> ColumnConverter:
    varying = column_type.oid == VARBIT
    length = column_type.modifier if column_type.modifier > 0 else (2**31 - 1 if varying else 1)
    if length == 1:
        # bit(1) and bit varying(1) are booleans in Debezium
        return ColumnConverter(_schema("boolean"), lambda t: int(t or "0", 2) != 0, semantic="boolean")
    schema = _schema("bytes", "io.debezium.data.Bits", {"length": str(length)}, 1)
    return ColumnConverter(schema, _bits_value, semantic="bits")


# -- money -----------------------------------------------------------------------------------------
def _money_converter(settings: ConverterSettings) -> ColumnConverter:
    """MONEY as Debezium's decimal with ``money.fraction.digits`` fraction digits (lc_monetary=C prints
    '-$1,234.56')."""

    def plain(text: str) -> str:
        negative = text.startswith(("-", "("))
        digits = "".join(ch for ch in text if ch.isdigit() or ch == ".")
        return ("-" if negative else "") + digits

    mode = settings.decimal_handling_mode
    if mode == "double":
        return ColumnConverter(_schema("double"), lambda t: float(plain(t)), semantic="double")
    if mode == "string":
        return ColumnConverter(_schema("string"), plain, semantic="string")

    digits = settings.money_fraction_digits
    # the server prints lc_monetary=C's two digits: more digits pad them, fewer round half up (as Java's
    # BigDecimal.setScale with RoundingMode.HALF_UP)
    step = Decimal(1).scaleb(-digits)

    def precise(text: str) -> str:
        return unscaled_base64(int(Decimal(plain(text)).quantize(step, rounding=ROUND_HALF_UP).scaleb(digits)))

    schema = _schema("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": str(digits)}, 1)
    return ColumnConverter(schema, precise, semantic="decimal")


def _interval_converter(settings: ConverterSettings) -> ColumnConverter:
    if settings.interval_handling_mode == "string":
        return ColumnConverter(
            _schema("string", "io.debezium.time.Interval", None, 1), interval_string, semantic="string"
        )
    return ColumnConverter(
        _schema("int64", "io.debezium.time.MicroDuration", None, 1), interval_micros, semantic="duration"
    )


# -- geometry --------------------------------------------------------------------------------------
_POINT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "double", "optional": False, "field": "x"},
        {"type": "double", "optional": False, "field": "y"},
        {"type": "bytes", "optional": True, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ],
    "optional": True,
    "name": "io.debezium.data.geometry.Point",
    "version": 1,
    "doc": "Geometry (POINT)",
}


def _point(text: str) -> dict[str, Any]:
    x_text, y_text = text.strip("()").split(",")
    x, y = float(x_text), float(y_text)
    wkb = b"\x01" + struct.pack("<Idd", 1, x, y)
    return {"x": x, "y": y, "wkb": b64encode(wkb).decode("ascii"), "srid": None}


def _geometry_schema(name: str, doc: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [
            {"type": "bytes", "optional": False, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
        "optional": True,
        "name": name,
        "version": 1,
        "doc": doc,
    }


def _ewkb(text: str) -> dict[str, Any]:
    """PostGIS hex EWKB to Debezium's {wkb, srid}: the EWKB as it is (SRID included), and the SRID beside it."""
    raw = bytes.fromhex(text)
    order = "<" if raw[0] == 1 else ">"
    (geom_type,) = struct.unpack_from(order + "I", raw, 1)
    srid = struct.unpack_from(order + "I", raw, 5)[0] if geom_type & 0x20000000 else None
    return {"wkb": b64encode(raw).decode("ascii"), "srid": srid}


# -- hstore ----------------------------------------------------------------------------------------
def _hstore_pairs(text: str) -> dict[str, str | None]:
    """Parse hstore's text output: '"a"=>"1", "b"=>NULL'."""
    result: dict[str, str | None] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        key, i = read_quoted(text, i)
        i = text.index("=>", i) + 2
        while text[i] == " ":
            i += 1
        if text.startswith("NULL", i):
            result[key] = None
            i += 4
        else:
            result[key], i = read_quoted(text, i)
    return result


def _hstore_java_order(text: str) -> dict[str, str | None]:
    """The pairs in the order Debezium writes them: the JDBC driver parses hstore into a ``java.util.HashMap``."""
    pairs = _hstore_pairs(text)
    return {key: pairs[key] for key in java_hash_map_order(list(pairs))}


def _hstore_converter(settings: ConverterSettings) -> ColumnConverter:
    if settings.hstore_handling_mode == "map":
        schema = {
            "type": "map",
            "keys": {"type": "string", "optional": False},
            "values": {"type": "string", "optional": True},
            "optional": True,
        }
        return ColumnConverter(schema, _hstore_java_order, semantic="map")
    return ColumnConverter(
        _schema("string", "io.debezium.data.Json", None, 1),
        lambda t: orjson.dumps(_hstore_java_order(t)).decode("utf-8"),
        semantic="io.debezium.data.Json",
    )


def _array_converter(element: ColumnType, settings: ConverterSettings, ndims: int = 1) -> ColumnConverter | None:
    """Kafka Connect ARRAY of the element's schema, nested once per declared dimension.

    PostgreSQL records a column's declared dimensions (``int[][]``) but does not enforce them, so a value can
    have more or fewer dimensions than its column declares. The schema must not change from row to row:
    such a value is reshaped to the declared depth (extra outer dimensions merged in row-major order, missing
    ones added as single-element levels) and a warning names the column type once per relation definition.
    """
    inner = build_converter(element, settings)
    if inner is None:
        return None
    item_convert = inner.convert
    delimiter = element.delimiter
    depth = max(1, ndims)
    # Debezium's items are optional, except an enum's (its array schema takes the Enum schema as it is)
    schema: dict[str, Any] = {**inner.schema, "optional": element.category != "E"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "optional": True}
    warned: list[bool] = []

    def leaves(items: list[Any], level: int) -> list[Any]:
        if level == 1:
            return [None if item is None else item_convert(item) for item in items]
        return [None if sub is None else leaves(sub, level - 1) for sub in items]

    def reshape(items: list[Any]) -> list[Any]:
        found = value_depth(items)
        if items and found != depth:
            if not warned:
                warned.append(True)
                log.warning(
                    "an array of %s has %d dimension(s) where its column declares %d; walflow reshapes such values "
                    "to the declared depth (declare the column with the dimensions it holds, e.g. %s%s)",
                    element.name or element.base_name or element.oid,
                    found,
                    depth,
                    element.name or element.base_name,
                    "[]" * found,
                )
            if found > depth:
                items = flatten_outer(items, found - depth)
            else:
                for _ in range(depth - found):
                    items = [items]
        return leaves(items, depth)

    if depth == 1:

        def convert(text: str) -> list[Any]:
            items = parse_array(text, delimiter)
            if items and items[0].__class__ is list:
                return reshape(items)
            return [None if item is None else item_convert(item) for item in items]

    else:

        def convert(text: str) -> list[Any]:
            return reshape(parse_array(text, delimiter))

    return ColumnConverter(schema, convert, semantic="array")


def _special_converter(column_type: ColumnType, settings: ConverterSettings) -> ColumnConverter | None:
    oid, name = column_type.oid, column_type.base_name
    if oid in (BIT, VARBIT):
        return _bits_converter(column_type)
    if oid == MONEY:
        return _money_converter(settings)
    if oid == INTERVAL:
        return _interval_converter(settings)
    if oid == POINT:
        return ColumnConverter(dict(_POINT_SCHEMA), _point, semantic="point")
    if oid in _RANGES:
        return ColumnConverter(_schema("string"), str, semantic="string")
    if name == "geometry":
        return ColumnConverter(
            _geometry_schema("io.debezium.data.geometry.Geometry", "Geometry"), _ewkb, semantic="geometry"
        )
    if name == "geography":
        return ColumnConverter(
            _geometry_schema("io.debezium.data.geometry.Geography", "Geography"), _ewkb, semantic="geometry"
        )
    if name == "hstore":
        return _hstore_converter(settings)
    return None
