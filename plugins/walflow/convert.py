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
from datetime import date, datetime, timezone
from decimal import Decimal, localcontext
from typing import Any

import orjson

from walflow.envelope import java_hash_map_order

log = logging.getLogger(__name__)

#: Session settings under which PostgreSQL's text output is what the converters expect.
SESSION_SETTINGS = {
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "iso_8601",
    "lc_monetary": "C",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# Built-in type OIDs (pg_type.h); extension types are resolved by name through the catalog.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, MONEY, MACADDR, INET, CIDR, MACADDR8 = 114, 142, 700, 701, 790, 829, 869, 650, 774
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266
BIT, VARBIT, NUMERIC, UUID, JSONB, POINT = 1560, 1562, 1700, 2950, 3802, 600


@dataclass(frozen=True)
class ColumnType:
    """What the catalog says about a column's type, enough to choose its converter."""

    oid: int
    modifier: int = -1
    name: str = ""  # format_type() text, e.g. 'numeric(10,2)' or 'character varying(255)'
    base_name: str = ""  # pg_type.typname of the type (or of a domain's base type)
    category: str = ""  # pg_type.typcategory
    enum_values: tuple[str, ...] = ()
    element: ColumnType | None = None  # element type of an array
    #: declared dimensions of an array column (pg_attribute.attndims; 0 or 1 for one dimension)
    ndims: int = 1
    #: pg_type.typname of the column's own type (the domain's, the array's ``_int4``), as Debezium names it
    type_name: str = ""
    #: pg_type.typdelim: what separates this type's values in an array literal (``:`` for PostGIS geometry)
    delimiter: str = ","


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


def _unscaled_bytes(unscaled: int) -> bytes:
    # Java's BigInteger.toByteArray(): the shortest two's-complement form, sign bit included.
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return unscaled.to_bytes(length, "big", signed=True)


#: What Debezium emits for 'infinity' / '-infinity' dates: the JDBC driver's infinity instants
#: (PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY milliseconds) turned into days with an int overflow.
DATE_POS_INF_DAYS, DATE_NEG_INF_DAYS = -2147472692, -2147472691


def _days(text: str) -> int:
    if text == "infinity":
        return DATE_POS_INF_DAYS
    if text == "-infinity":
        return DATE_NEG_INF_DAYS
    bc = text.endswith(" BC")
    if bc:
        text = text[:-3]
    year_s, month_s, day_s = text.rsplit("-", 2)
    year = int(year_s)
    if bc:
        year = 1 - year
    return _civil_to_days(year, int(month_s), int(day_s))


def _civil_to_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, for any year (Python's date stops at 1..9999)."""
    if 1 <= year <= 9999:
        return date(year, month, day).toordinal() - _EPOCH_ORDINAL
    # Howard Hinnant's days_from_civil, valid for all years.
    y = year - (month <= 2)
    era = y // 400  # floor division: Python needs no adjustment for negative years
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


#: What Debezium's snapshots (a JDBC query) emit for 'infinity' / '-infinity' dates: the driver's infinity
#: instants as java.sql.Date labels (292278994-08-16 and, era lost, 292269055-12-02) in days, cut to an int.
JDBC_DATE_POS_INF_DAYS, JDBC_DATE_NEG_INF_DAYS = -622191234, -625821272


def _jdbc_days(text: str) -> int:
    """A date as Debezium's snapshots see it through the JDBC driver's ``java.sql.Date``: the same as streamed for
    dates of the common era, the year of a BC date without its era (44 BC is read as 44 AD), fixed numbers for the
    infinities."""
    if text == "infinity":
        return JDBC_DATE_POS_INF_DAYS
    if text == "-infinity":
        return JDBC_DATE_NEG_INF_DAYS
    if text.endswith(" BC"):
        year_s, month_s, day_s = text[:-3].rsplit("-", 2)
        return _civil_to_days(int(year_s), int(month_s), int(day_s))
    return _days(text)


def _time_micros(text: str) -> int:
    hh, mm, rest = text.split(":", 2)
    if "." in rest:
        ss, frac = rest.split(".")
        micros = int((frac + "000000")[:6])
    else:
        ss, micros = rest, 0
    return ((int(hh) * 60 + int(mm)) * 60 + int(ss)) * 1_000_000 + micros


# The reference's fixed values for 'infinity'/'-infinity' timestamps (PostgreSQL's JDBC driver's
# PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY), in microsecond fields; Debezium 3.6 divides them by
# 1000 in millisecond fields (precision 0-3, and the connect mode).
_TS_POS_INF = 9223372036825200000
_TS_NEG_INF = -9223372036832400000
_TS_POS_INF_MS = _TS_POS_INF // 1000
_TS_NEG_INF_MS = -(-_TS_NEG_INF // 1000)


_NAIVE_EPOCH = datetime(1970, 1, 1)


def _timestamp_micros(text: str) -> int:
    try:
        # The common case, in C: years 1..9999, no BC, no infinity.
        delta = datetime.fromisoformat(text) - _NAIVE_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    except ValueError:
        pass
    if text == "infinity":
        return _TS_POS_INF
    if text == "-infinity":
        return _TS_NEG_INF
    day_part, time_part = text.split(" ", 1)
    bc = time_part.endswith(" BC")
    if bc:
        time_part = time_part[:-3]
        day_part += " BC"
    return _days(day_part) * 86_400_000_000 + _time_micros(time_part)


def _timestamp_millis(text: str) -> int:
    """Milliseconds since the epoch (``Timestamp``, connect mode); infinities are the fixed values in ms."""
    try:
        delta = datetime.fromisoformat(text) - _NAIVE_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000 + delta.microseconds // 1_000
    except ValueError:
        pass
    if text == "infinity":
        return _TS_POS_INF_MS
    if text == "-infinity":
        return _TS_NEG_INF_MS
    return _timestamp_micros(text) // 1000


def _split_offset(text: str) -> tuple[str, int]:
    """Split '15:13:16.945+05:30' into the local part and the offset in seconds."""
    for i in range(len(text) - 1, 0, -1):
        ch = text[i]
        if ch in "+-":
            sign = 1 if ch == "+" else -1
            parts = text[i + 1 :].split(":")
            seconds = int(parts[0]) * 3600 + (int(parts[1]) * 60 if len(parts) > 1 else 0)
            seconds += int(parts[2]) if len(parts) > 2 else 0
            return text[:i], sign * seconds
        if ch == ":" or ch.isdigit():
            continue
        break
    raise ValueError(f"no UTC offset in {text!r}")


def _format_zoned_micros(micros: int, width: int = 0) -> str:
    """ISO-8601 in UTC as Java formats a ZonedDateTime for Debezium: with ``width`` > 0 exactly that many fraction
    digits (the column's precision), otherwise only the digits needed."""
    days, rem = divmod(micros, 86_400_000_000)
    seconds, frac = divmod(rem, 1_000_000)
    hh, rest = divmod(seconds, 3600)
    mm, ss = divmod(rest, 60)
    y, m, d = _days_to_civil(days)
    year = f"{y:04d}" if 0 <= y <= 9999 else f"{y:+05d}"
    text = f"{year}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"
    if width > 0:
        text += "." + (f"{frac:06d}" + "000")[:width]
    elif frac:
        text += "." + f"{frac:06d}".rstrip("0")
    return text + "Z"


def _days_to_civil(days: int) -> tuple[int, int, int]:
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return y + (m <= 2), m, d


def _zoned_timestamp(text: str, width: int = 6) -> str:
    if text in ("infinity", "-infinity"):
        return text
    bc = text.endswith(" BC")
    if bc:
        text = text[:-3]
    local, offset = _split_offset(text)
    if bc:
        day_part, time_part = local.split(" ", 1)
        local = f"{day_part} BC"
        micros = _days(local) * 86_400_000_000 + _time_micros(time_part)
    else:
        micros = _timestamp_micros(local)
    return _format_zoned_micros(micros - offset * 1_000_000, width)


def _zoned_time(text: str) -> str:
    local, offset = _split_offset(text)
    micros = (_time_micros(local) - offset * 1_000_000) % 86_400_000_000
    seconds, frac = divmod(micros, 1_000_000)
    hh, rest = divmod(seconds, 3600)
    mm, ss = divmod(rest, 60)
    out = f"{hh:02d}:{mm:02d}:{ss:02d}"
    if frac:
        out += "." + f"{frac:06d}".rstrip("0")
    return out + "Z"


# -- converter factory ----------------------------------------------------------------------------
def _numeric_precision_scale(modifier: int) -> tuple[int | None, int | None]:
    if modifier < 4:
        return None, None
    value = modifier - 4
    scale = value & 0xFFFF
    if scale & 0x8000:  # PostgreSQL 15 allows negative scales
        scale -= 0x10000
    return (value >> 16) & 0xFFFF, scale


def _datetime_precision(modifier: int) -> int:
    return 6 if modifier < 0 else modifier


@dataclass(frozen=True)
class ConverterSettings:
    """The connector settings that change how values are represented."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"
    include_unknown_datatypes: bool = False
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
        )


def _schema(type_: str, name: str | None = None, parameters: dict[str, str] | None = None, version: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": type_, "optional": True}
    if name:
        schema["name"] = name
    if version is not None:
        schema["version"] = version
    if parameters:
        schema["parameters"] = parameters
    return schema


def _decimal_converter(settings: ConverterSettings, modifier: int) -> tuple[dict[str, Any], Callable[[str], Any], str]:
    precision, scale = _numeric_precision_scale(modifier)
    mode = settings.decimal_handling_mode
    if mode == "double":
        return _schema("double"), _float, "double"
    if mode == "string":
        # Debezium writes its special decimal values by name.
        return _schema("string"), lambda t: _SPECIAL_DECIMAL_NAMES.get(t, t), "string"
    if scale is not None:
        exponent = Decimal(1).scaleb(-scale)

        def fixed(text: str, _scale: int = scale, _exp: Decimal = exponent) -> str | None:
            # PostgreSQL prints numeric(p, s) with exactly s fraction digits, so the unscaled value is the
            # digits without the point; anything else (NaN, negative scales) takes the Decimal path.
            head, dot, frac = text.partition(".")
            if len(frac) == _scale and (dot or _scale == 0) and text not in _SPECIAL_DECIMAL_NAMES:
                unscaled = int(head + frac)
            else:
                if text in _SPECIAL_DECIMAL_NAMES:
                    # precise mode cannot carry NaN (nor ±Infinity, which only unconstrained numeric can hold
                    # since PostgreSQL 14): Debezium emits null
                    return None
                with localcontext() as ctx:
                    ctx.prec = 1000  # numeric allows 131072 digits before the point; never round here
                    unscaled = int(Decimal(text).quantize(_exp).scaleb(_scale))
            return b64encode(_unscaled_bytes(unscaled)).decode("ascii")

        params = {"scale": str(scale), "connect.decimal.precision": str(precision)}
        return _schema("bytes", "org.apache.kafka.connect.data.Decimal", params, 1), fixed, "decimal"

    def variable(text: str) -> dict[str, Any] | None:
        if text in _SPECIAL_DECIMAL_NAMES:
            return None
        # PostgreSQL prints numeric in plain notation; digits after the point are the value's scale, without
        # trailing zeros (Debezium strips them: 3.0 has scale 0, 100 stays 100 with scale 0). Working on the text
        # keeps every digit (Decimal arithmetic would round at its context precision).
        head, _, frac = text.partition(".")
        frac = frac.rstrip("0")
        unscaled = int(head + frac) if head not in ("-", "") else int(head + (frac or "0"))
        return {"scale": len(frac), "value": b64encode(_unscaled_bytes(unscaled)).decode("ascii")}

    schema = {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "doc": "Variable scaled decimal",
    }
    return schema, variable, "variable_decimal"


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
    precision = _datetime_precision(modifier)
    if oid == DATE:
        days = _jdbc_days if settings.snapshot else _days
        if mode == "connect":
            return _schema("int32", "org.apache.kafka.connect.data.Date", None, 1), days, "date"
        return _schema("int32", "io.debezium.time.Date", None, 1), days, "date"
    if oid == TIME:
        if mode == "connect":
            return _schema("int32", "org.apache.kafka.connect.data.Time", None, 1), lambda t: _time_micros(t) // 1000, "time_ms"
        if mode == "adaptive" and precision <= 3:
            return _schema("int32", "io.debezium.time.Time", None, 1), lambda t: _time_micros(t) // 1000, "time_ms"
        return _schema("int64", "io.debezium.time.MicroTime", None, 1), _time_micros, "time_us"
    if oid == TIMESTAMP:
        if mode == "connect":
            return _schema("int64", "org.apache.kafka.connect.data.Timestamp", None, 1), _timestamp_millis, "timestamp_ms"
        if precision <= 3:
            return _schema("int64", "io.debezium.time.Timestamp", None, 1), _timestamp_millis, "timestamp_ms"
        return _schema("int64", "io.debezium.time.MicroTimestamp", None, 1), _timestamp_micros, "timestamp_us"
    if oid == TIMESTAMPTZ:
        # Debezium writes as many fraction digits as the column's precision (6 when it has none)
        return _schema("string", "io.debezium.time.ZonedTimestamp", None, 1), lambda t, _w=precision: _zoned_timestamp(t, _w), "timestamptz"
    if oid == TIMETZ:
        return _schema("string", "io.debezium.time.ZonedTime", None, 1), _zoned_time, "timetz"
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
        return ColumnConverter(_schema("string", "io.debezium.data.Enum", {"allowed": allowed}, 1), str, semantic="enum")
    if settings.include_unknown_datatypes:
        # the bytes of the value's text, represented as binary.handling.mode says (as a bytea column)
        schema, binary = _binary_converter(settings)
        if column_type.base_name in _GEOMETRIC:
            # the JDBC driver's PGbox, PGcircle... objects print their coordinates as Java doubles ("10.0")
            return ColumnConverter(schema, lambda text: binary("\\x" + _java_geometric_text(text).hex()), semantic="bytes")
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


_SPECIAL_DECIMAL_NAMES = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}

INT4RANGE, INT8RANGE, NUMRANGE, TSRANGE, TSTZRANGE, DATERANGE = 3904, 3926, 3906, 3908, 3910, 3912
INT4MULTIRANGE, NUMMULTIRANGE, TSMULTIRANGE, TSTZMULTIRANGE, DATEMULTIRANGE, INT8MULTIRANGE = 4451, 4532, 4533, 4534, 4535, 4536
_RANGES = {INT4RANGE, INT8RANGE, NUMRANGE, TSRANGE, TSTZRANGE, DATERANGE,
           INT4MULTIRANGE, NUMMULTIRANGE, TSMULTIRANGE, TSTZMULTIRANGE, DATEMULTIRANGE, INT8MULTIRANGE}


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
    """MONEY as Debezium's decimal with 2 fraction digits (lc_monetary=C prints '-$1,234.56')."""

    def plain(text: str) -> str:
        negative = text.startswith("-") or text.startswith("(")
        digits = "".join(ch for ch in text if ch.isdigit() or ch == ".")
        return ("-" if negative else "") + digits

    mode = settings.decimal_handling_mode
    if mode == "double":
        return ColumnConverter(_schema("double"), lambda t: float(plain(t)), semantic="double")
    if mode == "string":
        return ColumnConverter(_schema("string"), plain, semantic="string")

    def precise(text: str) -> str:
        unscaled = int(Decimal(plain(text)).scaleb(2))
        return b64encode(_unscaled_bytes(unscaled)).decode("ascii")

    schema = _schema("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}, 1)
    return ColumnConverter(schema, precise, semantic="decimal")


# -- interval --------------------------------------------------------------------------------------
_DAYS_PER_MONTH_AVG = 365.25 / 12.0


def _interval_parts(text: str) -> tuple[int, int, int, int, int, Decimal]:
    """Parse IntervalStyle=iso_8601 output ('P1Y2M3DT4H5M6.78S', 'P-1Y-2M3DT-4H-5M-6.78S', 'PT0S')."""
    if not text.startswith("P"):
        raise ValueError(f"not an ISO 8601 interval: {text!r}")
    date_part, _, time_part = text[1:].partition("T")
    years = months = days = hours = minutes = 0
    seconds = Decimal(0)
    for part, units in ((date_part, "YMD"), (time_part, "HMS")):
        number = ""
        for ch in part:
            if ch in units:
                if ch == "S":
                    seconds = Decimal(number)
                else:
                    value = int(number)
                    if part is date_part:
                        if ch == "Y":
                            years = value
                        elif ch == "M":
                            months = value
                        else:
                            days = value
                    elif ch == "H":
                        hours = value
                    else:
                        minutes = value
                number = ""
            else:
                number += ch
        if number:
            raise ValueError(f"not an ISO 8601 interval: {text!r}")
    return years, months, days, hours, minutes, seconds


def _interval_micros(text: str) -> int:
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    number_of_days = ((years * 12) + months) * _DAYS_PER_MONTH_AVG + days
    number_of_seconds = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + float(seconds)
    return int(number_of_seconds * 1e6)  # Java's (long) cast truncates toward zero


def _interval_string(text: str) -> str:
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    if -seconds.as_tuple().exponent > 6:
        seconds = seconds.quantize(Decimal("0.000001"), rounding="ROUND_DOWN")
    sec = format(seconds.normalize(), "f") if seconds else "0"
    return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{sec}S"


def _interval_converter(settings: ConverterSettings) -> ColumnConverter:
    if settings.interval_handling_mode == "string":
        return ColumnConverter(_schema("string", "io.debezium.time.Interval", None, 1), _interval_string, semantic="string")
    return ColumnConverter(_schema("int64", "io.debezium.time.MicroDuration", None, 1), _interval_micros, semantic="duration")


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
        key, i = _read_quoted(text, i)
        i = text.index("=>", i) + 2
        while text[i] == " ":
            i += 1
        if text.startswith("NULL", i):
            result[key] = None
            i += 4
        else:
            result[key], i = _read_quoted(text, i)
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


# -- arrays ----------------------------------------------------------------------------------------
def parse_array(text: str, delimiter: str = ",") -> list[Any]:
    """Split a PostgreSQL array literal (``{1,NULL,"a b"}``) into element texts (``None`` for NULL).

    A multi-dimensional literal (``{{1,2},{3,4}}``) gives nested lists, one level per dimension.
    """
    if text.startswith("["):  # explicit bounds: '[0:1]={a,b}'
        text = text[text.index("=") + 1 :]
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text[:50]!r}")
    body = text[1:-1]
    if not body:
        return []
    try:
        if body.startswith("{"):
            # an unquoted element never starts with a brace: this is a sub-array, so the array has 2+ dimensions
            nested, end = _parse_nested(text, 0, delimiter)
            if end != len(text):
                raise ValueError(f"not an array literal: {text[:50]!r}")
            return nested
        return _parse_flat(body, delimiter)
    except IndexError:
        raise ValueError(f"unterminated array literal: {text[:50]!r}") from None


def _read_quoted(text: str, pos: int) -> tuple[str, int]:
    """The double-quoted element starting at ``text[pos] == '"'`` with its backslash escapes undone, and the
    position after its closing quote."""
    pos += 1
    out = []
    while text[pos] != '"':
        if text[pos] == "\\":
            pos += 1
        out.append(text[pos])
        pos += 1
    return "".join(out), pos + 1


def _parse_flat(body: str, delimiter: str = ",") -> list[Any]:
    """The elements of a one-dimensional array literal's body (between its braces)."""
    items: list[Any] = []
    i, n = 0, len(body)
    while i <= n:
        if i < n and body[i] == '"':
            value, i = _read_quoted(body, i)
            items.append(value)
            i += 1  # the comma
        else:
            end = body.find(delimiter, i)
            if end < 0:
                end = n
            token = body[i:end]
            items.append(None if token == "NULL" else token)
            i = end + 1
    return items


def _parse_nested(text: str, pos: int, delimiter: str = ",") -> tuple[list[Any], int]:
    """Parse the sub-array starting at ``text[pos] == '{'``; return it and the position after its ``}``."""
    items: list[Any] = []
    pos += 1
    if text[pos] == "}":
        return items, pos + 1
    while True:
        ch = text[pos]
        if ch == "{":
            sub, pos = _parse_nested(text, pos, delimiter)
            items.append(sub)
        elif ch == '"':
            value, pos = _read_quoted(text, pos)
            items.append(value)
        else:
            comma, close = text.find(delimiter, pos), text.find("}", pos)
            end = close if comma < 0 or close < comma else comma
            if end < 0:
                raise ValueError(f"unterminated array literal: {text[:50]!r}")
            token = text[pos:end]
            items.append(None if token == "NULL" else token)
            pos = end
        if text[pos] == delimiter:
            pos += 1
        elif text[pos] == "}":
            return items, pos + 1
        else:
            raise ValueError(f"malformed array literal near position {pos}: {text[:50]!r}")


def _value_depth(items: list[Any]) -> int:
    depth = 1
    while items and items[0].__class__ is list:
        items = items[0]
        depth += 1
    return depth


def _flatten_outer(items: list[Any], levels: int) -> list[Any]:
    """Merge the ``levels`` outermost dimensions into one (row-major order)."""
    for _ in range(levels):
        items = [sub for part in items for sub in part]
    return items


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
        found = _value_depth(items)
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
                items = _flatten_outer(items, found - depth)
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
        return ColumnConverter(_geometry_schema("io.debezium.data.geometry.Geometry", "Geometry"), _ewkb, semantic="geometry")
    if name == "geography":
        return ColumnConverter(_geometry_schema("io.debezium.data.geometry.Geography", "Geography"), _ewkb, semantic="geometry")
    if name == "hstore":
        return _hstore_converter(settings)
    return None
