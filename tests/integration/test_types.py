"""Golden tests of the type mappings: column definition, literal, exact schema and value, through PostgreSQL
and the broker. Each case is one row of the reference's type tables (004 "Data type mappings", 000), with the value
Debezium 3.6.3 itself emits for it (seen in the differential suite, tests/compat, which runs these same cases
through the real connector: where the reference's text and 3.6.3 differ, 3.6.3's value is the expected one).

A case's expected schema is the field schema without ``field`` and ``optional`` (columns here are nullable,
so ``optional`` is true); the value is the JSON payload value.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tests.privileges import as_connector
from tests.support import (
    WHEEL_WITHOUT_POSTGIS,
    connector,
    prepare_source,
    producer,
    read_topic,
    server_has_xml,
    stream,
    unique,
    wheel_server,
)
from walflow.capture.context import CaptureContext, CaptureHelpers
from walflow.capture.snapshot import InitialSnapshot
from walflow.capture.snapshot_tables import _columns_sql, plan_tables
from walflow.source.connection import connect

NO_DEFAULT = object()


@dataclass
class Case:
    """One golden row: the column definition, the literal inserted, and the exact field schema and value.

    ``schema`` is the field schema without ``optional``, ``default`` and ``field``; those come from
    ``optional`` and ``default``. The table's second row names only its key, so each column holds its default
    there: NULL for most, ``null_value`` is what that row must show.
    """

    id: str
    ddl: str
    literal: str
    schema: dict[str, Any]
    value: Any
    needs: str | None = None  # an extension the case needs
    mode: dict[str, Any] = field(default_factory=dict)
    optional: bool = True
    default: Any = NO_DEFAULT
    null_value: Any = None
    #: the value a snapshot reads, where Debezium's snapshots (through the JDBC driver) differ from its stream
    snapshot_value: Any = NO_DEFAULT

    def field_schema(self) -> dict[str, Any]:
        out = {**self.schema, "optional": self.optional}
        if self.default is not NO_DEFAULT:
            out["default"] = self.default
        return {**out, "field": self.id}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def s(
    type_: str, name: str | None = None, params: dict[str, str] | None = None, version: int | None = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_}
    out.update(extra)
    if name:
        out["name"] = name
    if version is not None:
        out["version"] = version
    if params:
        out["parameters"] = params
    return out


def decimal(scale: int, precision: int | None = None) -> dict[str, Any]:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return s("bytes", "org.apache.kafka.connect.data.Decimal", params, 1)


def items(schema: dict[str, Any]) -> dict[str, Any]:
    """An array field schema whose elements have ``schema`` (elements are always optional)."""
    return {"type": "array", "items": {**schema, "optional": True}}


def unscaled(value: int) -> str:
    """Kafka Connect Decimal bytes: the unscaled value, shortest two's complement, base64."""
    return b64(value.to_bytes(((value if value >= 0 else ~value).bit_length() + 8) // 8, "big", signed=True))


def long_int(text: str) -> int:
    """``int(text)`` for more than 4,300 digits (Python refuses those unless its limit is lifted): lifted here only,
    and only for the expected values, so the code under test still runs under the limit."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return int(text)
    finally:
        sys.set_int_max_str_digits(limit)


#: The longest numeric PostgreSQL accepts (131,072 digits before the point, 16,383 after), as any role that may
#: insert into a captured table can write it into an unconstrained numeric column.
LONGEST_WHOLE, LONGEST_FRACTION = "9" + "1234567890" * 13107 + "7", "3" * 16382 + "1"
LONGEST_NUMERIC = f"{LONGEST_WHOLE}.{LONGEST_FRACTION}"

VSD = {
    "type": "struct",
    "fields": [
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"},
    ],
    "name": "io.debezium.data.VariableScaleDecimal",
    "version": 1,
    "doc": "Variable scaled decimal",
}
POINT = {
    "type": "struct",
    "fields": [
        {"type": "double", "optional": False, "field": "x"},
        {"type": "double", "optional": False, "field": "y"},
        {"type": "bytes", "optional": True, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ],
    "name": "io.debezium.data.geometry.Point",
    "version": 1,
    "doc": "Geometry (POINT)",
}
DATE = s("int32", "io.debezium.time.Date", version=1)
TIME_MS = s("int32", "io.debezium.time.Time", version=1)
MICRO_TIME = s("int64", "io.debezium.time.MicroTime", version=1)
TS_MS = s("int64", "io.debezium.time.Timestamp", version=1)
MICRO_TS = s("int64", "io.debezium.time.MicroTimestamp", version=1)
ZONED_TS = s("string", "io.debezium.time.ZonedTimestamp", version=1)
DURATION = s("int64", "io.debezium.time.MicroDuration", version=1)
INTERVAL_STRING = s("string", "io.debezium.time.Interval", version=1)
JSON = s("string", "io.debezium.data.Json", version=1)
UUID = s("string", "io.debezium.data.Uuid", version=1)
MOOD = s("string", "io.debezium.data.Enum", {"allowed": "sad,ok,happy"}, 1)
CONNECT_TS = s("int64", "org.apache.kafka.connect.data.Timestamp", version=1)

# The reference's fixed values for 'infinity' / '-infinity' timestamps, in every mode and precision.
POS_INF_TS, NEG_INF_TS = 9223372036825200000, -9223372036832400000

# 2018-06-20 15:13:16 UTC, the reference's example instant, in seconds.
REF_S = 1529507596
# 15:13:16 in seconds after midnight.
REF_TIME_S = (15 * 60 + 13) * 60 + 16

ADAPTIVE_US = {"time.precision.mode": "adaptive_time_microseconds"}
CONNECT = {"time.precision.mode": "connect"}
DOUBLE = {"decimal.handling.mode": "double"}
STRING = {"decimal.handling.mode": "string"}

CASES = [
    # -- basic types (Table 9) ---------------------------------------------------------------------
    Case("boolean", "boolean", "true", s("boolean"), True),
    Case("bit1", "bit(1)", "B'1'", s("boolean"), True),
    Case(
        "bit10",
        "bit(10)",
        "B'1000000001'",
        s("bytes", "io.debezium.data.Bits", {"length": "10"}, 1),
        b64((513).to_bytes(2, "little")),
    ),
    Case(
        "varbit16", "bit varying(16)", "B'101'", s("bytes", "io.debezium.data.Bits", {"length": "16"}, 1), b64(b"\x05")
    ),
    Case(
        "varbit", "bit varying", "B'1'", s("bytes", "io.debezium.data.Bits", {"length": "2147483647"}, 1), b64(b"\x01")
    ),
    Case("smallint_min", "smallint", "-32768", s("int16"), -32768),
    Case("integer_max", "integer", "2147483647", s("int32"), 2147483647),
    Case("integer_min", "int4", "-2147483648", s("int32"), -2147483648),
    Case("bigint_min", "bigint", "-9223372036854775808", s("int64"), -9223372036854775808),
    Case("bigint_max", "bigint", "9223372036854775807", s("int64"), 9223372036854775807),
    Case("oid", "oid", "4294967295", s("int64"), 4294967295),
    Case("real", "real", "1.5", s("float"), 1.5),
    Case("real_nan", "real", "'NaN'", s("float"), "NaN"),
    Case("real_inf", "real", "'Infinity'", s("float"), "Infinity"),
    Case("real_neginf", "float4", "'-Infinity'", s("float"), "-Infinity"),
    Case("double", "double precision", "-2.5e-10", s("double"), -2.5e-10),
    Case("double_nan", "double precision", "'NaN'", s("double"), "NaN"),
    Case("double_inf", "double precision", "'Infinity'", s("double"), "Infinity"),
    Case("double_neginf", "double precision", "'-Infinity'", s("double"), "-Infinity"),
    Case("char", "char(3)", "'ab'", s("string"), "ab "),
    Case("character", "character(4)", "'ab'", s("string"), "ab  "),
    Case("varchar", "varchar(10)", "'héllo'", s("string"), "héllo"),
    Case("character_varying", "character varying", "'x'", s("string"), "x"),
    Case("character_varying_n", "character varying(3)", "'xyz'", s("string"), "xyz"),
    Case("text", "text", "'line\nbreak \"quoted\" \\ back'", s("string"), 'line\nbreak "quoted" \\ back'),
    Case("citext", "citext", "'MiXeD'", s("string"), "MiXeD", needs="citext"),
    Case("json", "json", """'{"a": [1, 2]}'""", JSON, '{"a": [1, 2]}'),
    Case("jsonb", "jsonb", """'{"b": 1, "a": 2}'""", JSON, '{"a": 2, "b": 1}'),
    Case("xml", "xml", "'<a>1</a>'", s("string", "io.debezium.data.Xml", version=1), "<a>1</a>"),
    Case("uuid", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    Case(
        "ltree",
        "ltree",
        "'Top.Science.Astronomy'",
        s("string", "io.debezium.data.Ltree", version=1),
        "Top.Science.Astronomy",
        needs="ltree",
    ),
    Case("enum", "mood", "'happy'", MOOD, "happy"),
    Case("inet", "inet", "'192.168.0.1/24'", s("string"), "192.168.0.1/24"),
    Case("inet_host", "inet", "'192.168.0.1/32'", s("string"), "192.168.0.1"),
    Case("inet6", "inet", "'2001:db8::1/64'", s("string"), "2001:db8::1/64"),
    Case("cidr", "cidr", "'10.0.0.0/8'", s("string"), "10.0.0.0/8"),
    Case("macaddr", "macaddr", "'08:00:2b:01:02:03'", s("string"), "08:00:2b:01:02:03"),
    Case("macaddr8", "macaddr8", "'08:00:2b:01:02:03:04:05'", s("string"), "08:00:2b:01:02:03:04:05"),
    Case("int4range", "int4range", "'[1,10)'", s("string"), "[1,10)"),
    Case("int8range", "int8range", "'(1,10]'", s("string"), "[2,11)"),
    Case("numrange", "numrange", "'(1.5,2.5]'", s("string"), "(1.5,2.5]"),
    Case(
        "tsrange",
        "tsrange",
        "'[2020-01-01 00:00,2020-01-02 00:00)'",
        s("string"),
        '["2020-01-01 00:00:00","2020-01-02 00:00:00")',
    ),
    Case(
        "tstzrange",
        "tstzrange",
        "'[2020-01-01 00:00+02,2020-01-02 00:00+02)'",
        s("string"),
        '["2019-12-31 22:00:00+00","2020-01-01 22:00:00+00")',
    ),
    Case("daterange", "daterange", "'[2020-01-01,2020-01-05]'", s("string"), "[2020-01-01,2020-01-06)"),
    Case(
        "point",
        "point",
        "'(1.5,-2)'",
        POINT,
        {"x": 1.5, "y": -2.0, "wkb": b64(bytes.fromhex("0101000000000000000000f83f00000000000000c0")), "srid": None},
    ),
    # -- arrays of element types (Kafka Connect ARRAY with the element's schema) -------------------
    Case("int_array", "integer[]", "'{1,NULL,3}'", items(s("int32")), [1, None, 3]),
    Case("text_array", "text[]", """'{"a b",c,"NULL","q\\"x"}'""", items(s("string")), ["a b", "c", "NULL", 'q"x']),
    Case("numeric_array", "numeric(5,2)[]", "'{1.5,-0.01}'", items(decimal(2, 5)), [unscaled(150), unscaled(-1)]),
    Case("empty_array", "integer[]", "'{}'", items(s("int32")), []),
    Case("bool_array", "boolean[]", "'{t,f,NULL}'", items(s("boolean")), [True, False, None]),
    Case(
        "uuid_array",
        "uuid[]",
        "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'",
        items(UUID),
        ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
    ),
    Case("date_array", "date[]", "'{2020-02-29,1970-01-01,NULL}'", items(DATE), [18321, 0, None]),
    Case(
        "timestamp_array",
        "timestamp[]",
        """'{"2018-06-20 15:13:16.945104"}'""",
        items(MICRO_TS),
        [REF_S * 1_000_000 + 945104],
    ),
    Case("timestamp3_array", "timestamp(3)[]", """'{"2018-06-20 15:13:16.945"}'""", items(TS_MS), [REF_S * 1000 + 945]),
    Case(
        "timestamptz_array",
        "timestamptz[]",
        """'{"2018-06-20 15:13:16+02"}'""",
        items(ZONED_TS),
        ["2018-06-20T13:13:16.000000Z"],
    ),
    Case(
        "jsonb_array", "jsonb[]", """ARRAY['{"a": 1}'::jsonb, '[1, 2]'::jsonb]""", items(JSON), ['{"a": 1}', "[1, 2]"]
    ),
    Case("varchar_array", "varchar(5)[]", "ARRAY['ab', NULL, 'c d']", items(s("string")), ["ab", None, "c d"]),
    Case(
        "bytea_array",
        "bytea[]",
        "ARRAY['\\x0102'::bytea, '\\xff'::bytea]",
        items(s("bytes")),
        [b64(b"\x01\x02"), b64(b"\xff")],
    ),
    # Debezium's enum array items are required (its array schema takes the Enum schema as it is)
    Case(
        "enum_array",
        "mood[]",
        "'{happy,sad}'",
        {"type": "array", "items": {**MOOD, "optional": False}},
        ["happy", "sad"],
    ),
    Case("inet_array", "inet[]", "'{192.168.0.1/24,10.0.0.1}'", items(s("string")), ["192.168.0.1/24", "10.0.0.1"]),
    Case("domain_array", "intlist", "'{4,5}'", items(s("int32")), [4, 5]),
    # multi-dimensional arrays: one ARRAY level per declared dimension (see docs/events.md, "Type mappings")
    Case("int_array_2d", "integer[][]", "'{{1,2},{3,NULL}}'", items(items(s("int32"))), [[1, 2], [3, None]]),
    Case(
        "text_array_2d",
        "text[][]",
        """'{{a,"b c"},{NULL,"}"}}'""",
        items(items(s("string"))),
        [["a", "b c"], [None, "}"]],
    ),
    # a 2-D value in a column declared one-dimensional: PostgreSQL allows it; it is flattened row-major
    Case("int_array_2d_in_1d", "integer[]", "'{{1,2},{3,4}}'", items(s("int32")), [1, 2, 3, 4]),
    # -- domains: the base type with the nearest length/scale along the chain of domains ------------------
    Case("domain_numeric", "price", "12.5", decimal(3, 8), unscaled(12500)),
    Case("domain_varchar", "code", "'ab'", s("string"), "ab"),
    Case("domain_over_domain", "price2", "12.5", decimal(3, 8), unscaled(12500)),
    Case("domain_3_levels", "price3", "-1", decimal(3, 8), unscaled(-1000)),
    Case("money", "money", "1234.56", decimal(2), unscaled(123456)),
    Case("money_negative", "money", "-1.5", decimal(2), unscaled(-150)),
    Case("bytea", "bytea", "'\\x0102ff'", s("bytes"), b64(bytes.fromhex("0102ff"))),
    # -- interval, numeric mode: microseconds with 365.25 / 12 days a month --------------------------
    Case("interval", "interval", "'1 year 2 months 3 days 04:05:06.78'", DURATION, 37091106780000),
    Case("interval_negative", "interval", "'-1 day -00:00:01'", DURATION, -86401000000),
    Case("interval_p3", "interval(3)", "'1 day 00:00:01.12549'", DURATION, (86400 + 1) * 1_000_000 + 125_000),
    Case(
        "interval_day_to_second",
        "interval day to second",
        "'3 days 04:05:06.5'",
        DURATION,
        ((3 * 24 + 4) * 3600 + 5 * 60 + 6) * 1_000_000 + 500_000,
    ),
    Case("interval_year_to_month", "interval year to month", "'1 year 2 months'", DURATION, 36817200000000),
    # -- temporal, adaptive (Table 10) -----------------------------------------------------------
    Case("date_leap", "date", "'2020-02-29'", DATE, 18321),
    Case("date_1900", "date", "'1900-01-01'", DATE, -25567),
    Case("date_2100", "date", "'2100-12-31'", DATE, 47846),
    # PostgreSQL: SELECT '0044-03-15 BC'::date - '1970-01-01'::date (proleptic Gregorian, year -43); Debezium's
    # snapshots read it through java.sql.Date, which loses the era (0044-03-15 AD)
    Case("date_bc", "date", "'0044-03-15 BC'", DATE, -735160, snapshot_value=-703383),
    Case("date_year_12345", "date", "'12345-06-07'", DATE, 3789548),
    Case("time0", "time(0)", "'15:13:16.6'", TIME_MS, (REF_TIME_S + 1) * 1000),
    Case("time1", "time(1)", "'15:13:16.9'", TIME_MS, REF_TIME_S * 1000 + 900),
    Case("time2", "time(2)", "'15:13:16.94'", TIME_MS, REF_TIME_S * 1000 + 940),
    Case("time3", "time(3)", "'15:13:16.945'", TIME_MS, REF_TIME_S * 1000 + 945),
    Case("time4", "time(4)", "'15:13:16.9451'", MICRO_TIME, REF_TIME_S * 1_000_000 + 945100),
    Case("time5", "time(5)", "'15:13:16.94512'", MICRO_TIME, REF_TIME_S * 1_000_000 + 945120),
    Case("time6", "time(6)", "'15:13:16.945104'", MICRO_TIME, REF_TIME_S * 1_000_000 + 945104),
    Case("time", "time", "'23:59:59.999999'", MICRO_TIME, 86399999999),
    Case("timestamp0", "timestamp(0)", "'2018-06-20 15:13:16.4'", TS_MS, REF_S * 1000),
    Case("timestamp1", "timestamp(1)", "'2018-06-20 15:13:16.9'", TS_MS, REF_S * 1000 + 900),
    Case("timestamp2", "timestamp(2)", "'2018-06-20 15:13:16.94'", TS_MS, REF_S * 1000 + 940),
    Case("timestamp3", "timestamp(3)", "'2018-06-20 15:13:16.945'", TS_MS, 1529507596945),
    Case("timestamp4", "timestamp(4)", "'2018-06-20 15:13:16.9451'", MICRO_TS, REF_S * 1_000_000 + 945100),
    Case("timestamp5", "timestamp(5)", "'2018-06-20 15:13:16.94512'", MICRO_TS, REF_S * 1_000_000 + 945120),
    Case("timestamp6", "timestamp(6)", "'2018-06-20 15:13:16.945104'", MICRO_TS, REF_S * 1_000_000 + 945104),
    Case("timestamp_reference", "timestamp", "'2018-06-20 15:13:16.945104'", MICRO_TS, 1529507596945104),
    Case("timestamp_1960", "timestamp", "'1960-01-01 00:00:00'", MICRO_TS, -315619200000000),
    Case("timestamp_2100", "timestamp", "'2100-01-01 00:00:00'", MICRO_TS, 4102444800000000),
    # PostgreSQL: SELECT extract(epoch FROM '0044-03-15 12:00:00 BC'::timestamp) * 1000000
    Case("timestamp_bc", "timestamp", "'0044-03-15 12:00:00 BC'", MICRO_TS, -63517780800000000),
    Case("timestamp_year_12345", "timestamp", "'12345-06-07 01:02:03.5'", MICRO_TS, 327416950923500000),
    Case("timestamp_inf", "timestamp", "'infinity'", MICRO_TS, POS_INF_TS),
    Case("timestamp_neginf", "timestamp", "'-infinity'", MICRO_TS, NEG_INF_TS),
    # millisecond fields: Debezium 3.6 divides the fixed values by 1000
    Case("timestamp3_inf", "timestamp(3)", "'infinity'", TS_MS, POS_INF_TS // 1000),
    Case("timestamp0_neginf", "timestamp(0)", "'-infinity'", TS_MS, NEG_INF_TS // 1000),
    Case("timestamptz", "timestamptz", "'2018-06-20 15:13:16.945104+02'", ZONED_TS, "2018-06-20T13:13:16.945104Z"),
    # as many fraction digits as the column's precision (6 without one)
    Case(
        "timestamptz_whole",
        "timestamp with time zone",
        "'2038-01-19 03:14:08-05'",
        ZONED_TS,
        "2038-01-19T08:14:08.000000Z",
    ),
    Case("timestamptz_p0", "timestamptz(0)", "'2038-01-19 03:14:08.6-05'", ZONED_TS, "2038-01-19T08:14:09Z"),
    Case("timestamptz_p3", "timestamptz(3)", "'2038-01-19 03:14:08.5-05'", ZONED_TS, "2038-01-19T08:14:08.500Z"),
    Case("timestamptz_bc", "timestamptz", "'0044-03-15 12:00:00+00 BC'", ZONED_TS, "-0043-03-15T12:00:00.000000Z"),
    # Debezium's numbers for infinite dates: the driver's infinity instants in days, cut to an int (overflowed);
    # a snapshot reads them through java.sql.Date
    Case("date_inf", "date", "'infinity'", DATE, -2147472692, snapshot_value=-622191234),
    Case("date_neginf", "date", "'-infinity'", DATE, -2147472691, snapshot_value=-625821272),
    Case("timetz", "timetz", "'15:13:16.5+02'", s("string", "io.debezium.time.ZonedTime", version=1), "13:13:16.5Z"),
    Case(
        "time_with_time_zone",
        "time with time zone",
        "'01:00:00-03:30'",
        s("string", "io.debezium.time.ZonedTime", version=1),
        "04:30:00Z",
    ),
    # -- decimals, precise (Tables 13, 14) -------------------------------------------------------
    Case("numeric", "numeric(10,2)", "12.34", decimal(2, 10), unscaled(1234)),
    Case("decimal_negative", "decimal(5,2)", "-0.01", decimal(2, 5), unscaled(-1)),
    Case("numeric_scale0", "numeric(10)", "-128", decimal(0, 10), unscaled(-128)),
    Case("numeric_nan", "numeric(10,2)", "'NaN'", decimal(2, 10), None),
    Case("numeric_variable", "numeric", "3.14159", VSD, {"scale": 5, "value": unscaled(314159)}),
    Case("decimal_variable", "decimal", "-12.5", VSD, {"scale": 1, "value": unscaled(-125)}),
    Case("numeric_variable_integer", "numeric", "100", VSD, {"scale": 0, "value": unscaled(100)}),
    Case(
        "numeric_huge",
        "numeric",
        "123456789012345678901234567890.123",
        VSD,
        {"scale": 3, "value": unscaled(123456789012345678901234567890123)},
    ),
    # NaN and (PostgreSQL 14+, unconstrained numeric only) ±Infinity: a Decimal cannot hold them, so null,
    # as the reference says for NaN in precise mode
    Case("numeric_variable_nan", "numeric", "'NaN'", VSD, None),
    Case("numeric_inf", "numeric", "'Infinity'", VSD, None),
    Case("numeric_neginf", "numeric", "'-Infinity'", VSD, None),
    Case("odd %d{x} name", '"dom%s{y}"', "7", s("int32"), 7),
    Case(
        "numeric_longest",
        "numeric",
        f"'{LONGEST_NUMERIC}'",
        VSD,
        {"scale": 16383, "value": unscaled(long_int(LONGEST_WHOLE + LONGEST_FRACTION))},
    ),
    Case(
        "numeric_longest_negative",
        "numeric",
        f"'-{LONGEST_WHOLE}'",
        VSD,
        {"scale": 0, "value": unscaled(-long_int(LONGEST_WHOLE))},
    ),
    # -- HSTORE (Table 17) -----------------------------------------------------------------------
    Case("hstore_json", "hstore", "'a=>1, b=>NULL'", JSON, '{"a":"1","b":null}', needs="hstore"),
    # -- time.precision.mode=adaptive_time_microseconds (Table 11) ---------------------------------
    Case("date_us", "date", "'2020-02-29'", DATE, 18321, mode=ADAPTIVE_US),
    Case("time0_us", "time(0)", "'15:13:16'", MICRO_TIME, REF_TIME_S * 1_000_000, mode=ADAPTIVE_US),
    Case("time3_us", "time(3)", "'15:13:16.945'", MICRO_TIME, 54796945000, mode=ADAPTIVE_US),
    Case("time_us", "time", "'15:13:16.945104'", MICRO_TIME, REF_TIME_S * 1_000_000 + 945104, mode=ADAPTIVE_US),
    Case("timestamp1_us_mode", "timestamp(1)", "'2018-06-20 15:13:16.9'", TS_MS, REF_S * 1000 + 900, mode=ADAPTIVE_US),
    Case("timestamp3_us_mode", "timestamp(3)", "'2018-06-20 15:13:16.945'", TS_MS, 1529507596945, mode=ADAPTIVE_US),
    Case(
        "timestamp4_us_mode",
        "timestamp(4)",
        "'2018-06-20 15:13:16.9451'",
        MICRO_TS,
        REF_S * 1_000_000 + 945100,
        mode=ADAPTIVE_US,
    ),
    Case(
        "timestamp5_us_mode",
        "timestamp(5)",
        "'2018-06-20 15:13:16.94512'",
        MICRO_TS,
        REF_S * 1_000_000 + 945120,
        mode=ADAPTIVE_US,
    ),
    Case(
        "timestamp6_us_mode",
        "timestamp(6)",
        "'2018-06-20 15:13:16.945104'",
        MICRO_TS,
        REF_S * 1_000_000 + 945104,
        mode=ADAPTIVE_US,
    ),
    Case(
        "timestamp_us_mode", "timestamp", "'2018-06-20 15:13:16.945104'", MICRO_TS, 1529507596945104, mode=ADAPTIVE_US
    ),
    # -- time.precision.mode=connect (Table 12) ---------------------------------------------------
    Case(
        "date_connect",
        "date",
        "'2020-02-29'",
        s("int32", "org.apache.kafka.connect.data.Date", version=1),
        18321,
        mode=CONNECT,
    ),
    Case(
        "time_connect",
        "time",
        "'15:13:16.945104'",
        s("int32", "org.apache.kafka.connect.data.Time", version=1),
        54796945,
        mode=CONNECT,
    ),
    Case(
        "time3_connect",
        "time(3)",
        "'15:13:16.945'",
        s("int32", "org.apache.kafka.connect.data.Time", version=1),
        54796945,
        mode=CONNECT,
    ),
    Case("timestamp_connect", "timestamp", "'2018-06-20 15:13:16.945104'", CONNECT_TS, 1529507596945, mode=CONNECT),
    Case("timestamp3_connect", "timestamp(3)", "'2018-06-20 15:13:16.945'", CONNECT_TS, 1529507596945, mode=CONNECT),
    Case("timestamp_connect_inf", "timestamp", "'infinity'", CONNECT_TS, POS_INF_TS // 1000, mode=CONNECT),
    Case("timestamp_connect_neginf", "timestamp(6)", "'-infinity'", CONNECT_TS, NEG_INF_TS // 1000, mode=CONNECT),
    Case(
        "timestamp_connect_1960", "timestamp", "'1960-01-01 00:00:00.5'", CONNECT_TS, -315619200000 + 500, mode=CONNECT
    ),
    # -- decimal.handling.mode=double (Table 15) --------------------------------------------------
    Case("numeric_double", "numeric(10,2)", "12.34", s("double"), 12.34, mode=DOUBLE),
    Case("decimal_double", "decimal(5,2)", "-12.5", s("double"), -12.5, mode=DOUBLE),
    Case("numeric_variable_double", "numeric", "3.14159", s("double"), 3.14159, mode=DOUBLE),
    Case("numeric_double_nan", "numeric", "'NaN'", s("double"), "NaN", mode=DOUBLE),
    Case("numeric_double_inf", "numeric", "'Infinity'", s("double"), "Infinity", mode=DOUBLE),
    Case("numeric_double_neginf", "numeric", "'-Infinity'", s("double"), "-Infinity", mode=DOUBLE),
    Case("numeric_double_longest", "numeric", f"'{LONGEST_NUMERIC}'", s("double"), "Infinity", mode=DOUBLE),
    Case("domain_over_domain_double", "price2", "12.5", s("double"), 12.5, mode=DOUBLE),
    Case("money_double", "money", "-1.5", s("double"), -1.5, mode=DOUBLE),
    # -- decimal.handling.mode=string (Table 16) --------------------------------------------------
    Case("numeric_string", "numeric(10,2)", "12.34", s("string"), "12.34", mode=STRING),
    Case("decimal_string", "decimal(5,2)", "-12.5", s("string"), "-12.50", mode=STRING),
    Case("numeric_variable_string", "numeric", "3.14159", s("string"), "3.14159", mode=STRING),
    Case("numeric_string_nan", "numeric", "'NaN'", s("string"), "NAN", mode=STRING),
    Case("numeric_string_inf", "numeric", "'Infinity'", s("string"), "POSITIVE_INFINITY", mode=STRING),
    Case("numeric_string_neginf", "numeric", "'-Infinity'", s("string"), "NEGATIVE_INFINITY", mode=STRING),
    Case("numeric_string_longest", "numeric", f"'-{LONGEST_NUMERIC}'", s("string"), f"-{LONGEST_NUMERIC}", mode=STRING),
    Case("money_string", "money", "-1234.5", s("string"), "-1234.50", mode=STRING),
    # -- binary.handling.mode ------------------------------------------------------------------------
    Case("bytea_base64", "bytea", "'\\x0102ff'", s("string"), "AQL/", mode={"binary.handling.mode": "base64"}),
    Case(
        "bytea_base64_url",
        "bytea",
        "'\\x0102ff'",
        s("string"),
        "AQL_",
        mode={"binary.handling.mode": "base64-url-safe"},
    ),
    Case("bytea_hex", "bytea", "'\\x0102ff'", s("string"), "0102ff", mode={"binary.handling.mode": "hex"}),
    # -- interval.handling.mode=string -----------------------------------------------------------------
    Case(
        "interval_string",
        "interval",
        "'1 year 2 months 3 days 04:05:06.78'",
        INTERVAL_STRING,
        "P1Y2M3DT4H5M6.78S",
        mode={"interval.handling.mode": "string"},
    ),
    Case(
        "interval_string_zero",
        "interval",
        "'0'",
        INTERVAL_STRING,
        "P0Y0M0DT0H0M0S",
        mode={"interval.handling.mode": "string"},
    ),
    Case(
        "interval_string_p3",
        "interval(3)",
        "'1 day 00:00:01.12549'",
        INTERVAL_STRING,
        "P0Y0M1DT0H0M1.125S",
        mode={"interval.handling.mode": "string"},
    ),
    Case(
        "interval_string_negative",
        "interval day to second",
        "'-1 day -00:00:01'",
        INTERVAL_STRING,
        "P0Y0M-1DT0H0M-1S",
        mode={"interval.handling.mode": "string"},
    ),
    # -- hstore.handling.mode=map ---------------------------------------------------------------------
    Case(
        "hstore_map",
        "hstore",
        "'a=>1, b=>NULL'",
        {"type": "map", "keys": {"type": "string", "optional": False}, "values": {"type": "string", "optional": True}},
        {"a": "1", "b": None},
        needs="hstore",
        mode={"hstore.handling.mode": "map"},
    ),
    # an unknown type's text, as the JDBC driver prints it (geometric types: Java doubles), in binary.handling.mode
    Case(
        "unknown_included",
        "circle",
        "'<(1,2),3>'",
        s("bytes"),
        b64(b"<(1.0,2.0),3.0>"),
        mode={"include.unknown.datatypes": True},
    ),
    Case("tsvector", "tsvector", "'a fat cat'", s("string", "io.debezium.data.Tsvector", version=1), "'a' 'cat' 'fat'"),
    Case("isbn", "isbn", "'978-0-393-04002-9'", s("string"), "0-393-04002-X", needs="isn"),
    Case("bit_varying_1", "bit varying(1)", "B'1'", s("boolean"), True),
    Case("bit_zero", "bit varying(16)", "B'0000'", s("bytes", "io.debezium.data.Bits", {"length": "16"}, 1), ""),
    Case("numeric_trailing_zeros", "numeric", "3.50", VSD, {"scale": 1, "value": unscaled(35)}),
]

#: Columns that are NOT NULL with a function default (serials): their field is required, has the type's
#: zero value as its default, and the row that names only the key gets the next sequence value.
DEFAULTED_CASES = [
    Case("smallserial", "smallserial", "DEFAULT", s("int16"), 1, optional=False, default=0, null_value=2),
    Case("serial", "serial", "DEFAULT", s("int32"), 1, optional=False, default=0, null_value=2),
    Case("bigserial", "bigserial", "DEFAULT", s("int64"), 1, optional=False, default=0, null_value=2),
    Case("serial_connect", "serial4", "DEFAULT", s("int32"), 1, optional=False, default=0, null_value=2, mode=CONNECT),
]

ALL_CASES = CASES + DEFAULTED_CASES

PREAMBLE = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN price AS numeric(8,3)",
    "CREATE DOMAIN price2 AS price",
    "CREATE DOMAIN price3 AS price2 CHECK (VALUE > -100)",
    "CREATE DOMAIN code AS varchar(5)",
    "CREATE DOMAIN intlist AS integer[]",
    # a name is data: '%' (psycopg's placeholder sign), braces and spaces in a type's and a column's name
    'CREATE DOMAIN "dom%s{y}" AS integer',
]


def golden_groups(cases: list[Case]) -> list[tuple[str, dict[str, Any], list[Case]]]:
    """The cases grouped by connector settings: one table and one connector per group."""
    groups: dict[str, tuple[dict[str, Any], list[Case]]] = {}
    for case in cases:
        key = repr(sorted(case.mode.items()))
        groups.setdefault(key, (case.mode, []))[1].append(case)
    return [
        (";".join(f"{k}={v}" for k, v in mode.items()) or "defaults", mode, group) for mode, group in groups.values()
    ]


def _prepare(dsn: str, cases: list[Case]) -> None:
    """Create the types, domains and extensions the cases need."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in PREAMBLE:
            conn.execute(statement)
        for extension in sorted({c.needs for c in cases if c.needs}):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")


def _golden_records(dsn: str, cases: list[Case], mode: dict[str, Any]) -> list[Any]:
    """Two rows (the literals; then only the key) through the stream, then the same rows through a snapshot.

    Returns the records [c, c, r, r]: streaming (pgoutput) and snapshot (SELECT) paths of the same rows.
    """
    columns = ", ".join(f'"{c.id}" {c.ddl}' for c in cases)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE golden (pk int PRIMARY KEY, {columns})")
    config = connector(unique("types"), **mode)
    prepare_source(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO golden VALUES (1, {', '.join(c.literal for c in cases)})")
        conn.execute("INSERT INTO golden (pk) VALUES (2)")
    stream(config, dsn)
    helpers = CaptureHelpers.for_config(config)
    with connect(as_connector(dsn)) as conn:
        tables = plan_tables(conn, helpers)
        # snapshots serialise a row straight to JSON: byte for byte what the event row's dict and key serialise to
        for table in tables:
            assert table.schema.json_row is not None
            for values in conn.execute(sql.SQL("SELECT {} FROM golden").format(_columns_sql(table)), []).fetchall():
                row = table.schema.row(values)
                key = {f.name: row[f.name] for f in table.schema.key_fields}
                assert table.schema.json_row(values) == (orjson.dumps(row), orjson.dumps(key))
    events = producer()
    InitialSnapshot(
        config,
        as_connector(dsn),
        events,
        snapshot_name=None,
        position_lsn=None,
        context=helpers.writing_to(events),
    ).run(tables)
    events.flush(30)
    return read_topic(f"{config.topic_prefix}.public.golden")


@pytest.mark.parametrize("label,mode,cases", golden_groups(ALL_CASES), ids=[g[0] for g in golden_groups(ALL_CASES)])
def test_golden_types(database: str, label: str, mode: dict[str, Any], cases: list[Case]) -> None:
    """Every case's exact field schema and value, on the streaming path and on the snapshot path (``xml`` only on a
    server built with libxml: :func:`tests.support.server_has_xml`)."""
    cases = supported(cases)
    _prepare(database, cases)
    records = _golden_records(database, cases, mode)
    assert [r.op for r in records] == ["c", "c", "r", "r"]
    failures = []
    for record in records:
        path = "stream" if record.op == "c" else "snapshot"
        fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
        after = record.payload["after"]
        literal_row = after["pk"] == 1
        for case in cases:
            if fields.get(case.id) != case.field_schema():
                failures.append(f"{path} {case.id}: schema {fields.get(case.id)} != expected {case.field_schema()}")
            expected = case.value if literal_row else case.null_value
            if literal_row and path == "snapshot" and case.snapshot_value is not NO_DEFAULT:
                expected = case.snapshot_value
            if after.get(case.id, "<missing>") != expected:
                failures.append(
                    f"{path} pk={after['pk']} {case.id}: value {after.get(case.id, '<missing>')!r} != expected"
                    f" {expected!r}"
                )
    assert not failures, "\n".join(failures)
    assert records[0].value["schema"] == records[2].value["schema"]


def test_unknown_type_is_left_out_with_a_warning(database: str, caplog: pytest.LogCaptureFixture) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, doc box, v text)")
    config = connector(unique("unknown"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, '(1,1),(0,0)', 'x')")
    with caplog.at_level("WARNING"):
        stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.t")
    assert record.payload["after"] == {"id": 1, "v": "x"}
    assert any("public.t.doc" in r.getMessage() and "box" in r.getMessage() for r in caplog.records)


def test_server_time_zone_does_not_change_values(database: str) -> None:
    dbname = database.split("dbname=")[1]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET timezone TO 'Asia/Kolkata'")
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET datestyle TO 'SQL, DMY'")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, tz timestamptz, ts timestamp, d date, tt timetz)")
    config = connector(unique("tz"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO t VALUES (1, '2018-06-20 15:13:16.945104', '2018-06-20 15:13:16.945104', '2020-02-29',"
            " '10:00:00')"
        )
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.t")
    after = record.payload["after"]
    # the literal was read in Asia/Kolkata (+05:30) by the writer's session; walflow reports UTC
    assert after["tz"] == "2018-06-20T09:43:16.945104Z"
    assert after["ts"] == 1529507596945104 and after["d"] == 18321
    assert after["tt"] == "04:30:00Z"


def test_defaults_in_schema(database: str) -> None:
    """Literal defaults as the typed value; explicit function calls as the type's zero value (the reference's
    list); anything else, CURRENT_TIMESTAMP without parentheses included, gives no default."""
    # xml only where the server is built with libxml (tests.support.server_has_xml)
    xml_columns = "x xml DEFAULT '<a>1</a>', x_fn xml DEFAULT xmlcomment('c')," if server_has_xml() else ""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            f"""
            CREATE TABLE d (
                id serial PRIMARY KEY,
                n int DEFAULT 42,
                t text DEFAULT 'abc',
                v varchar(10) NOT NULL DEFAULT 'x''y',
                price numeric(5,2) DEFAULT 1.5,
                flag boolean DEFAULT true,
                day date DEFAULT '2020-01-01',
                created timestamp DEFAULT now(),
                created_tz timestamptz DEFAULT CURRENT_TIMESTAMP,
                created_tz6 timestamptz DEFAULT CURRENT_TIMESTAMP(6),
                doc jsonb DEFAULT '{{}}'::jsonb,
                u uuid DEFAULT gen_random_uuid(),
                u_literal uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
                tm time DEFAULT '10:15:30.5',
                tm_fn time(3) DEFAULT LOCALTIME(3),
                iv interval DEFAULT '1 day 02:00:00',
                iv_fn interval DEFAULT make_interval(days => 2),
                {xml_columns}
                ts_literal timestamp(3) DEFAULT '2018-06-20 15:13:16.945',
                neg int DEFAULT -7,
                sum int DEFAULT (1 + 2),
                today date DEFAULT CURRENT_DATE,
                nothing text
            )
            """
        )
    config = connector(unique("defaults"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO d DEFAULT VALUES")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.d")
    fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
    assert fields["id"] == {"type": "int32", "optional": False, "default": 0, "field": "id"}
    assert fields["n"]["default"] == 42
    assert fields["t"]["default"] == "abc"
    assert fields["v"] == {"type": "string", "optional": False, "default": "x'y", "field": "v"}
    assert fields["price"]["default"] == b64((150).to_bytes(2, "big"))
    assert fields["flag"]["default"] is True
    assert fields["day"]["default"] == 18262
    assert fields["created"]["default"] == 0
    # the reference: "CURRENT_TIMESTAMP(6) is supported with parentheses, but CURRENT_TIMESTAMP is not"
    assert "default" not in fields["created_tz"]
    assert fields["created_tz6"]["default"] == "1970-01-01T00:00:00.000000Z"
    assert fields["doc"]["default"] == "{}"
    assert fields["u"]["default"] == "00000000-0000-0000-0000-000000000000"
    assert fields["u_literal"]["default"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert fields["tm"]["default"] == ((10 * 60 + 15) * 60 + 30) * 1_000_000 + 500_000
    assert fields["tm_fn"]["default"] == 0 and fields["tm_fn"]["name"] == "io.debezium.time.Time"
    assert fields["iv"]["default"] == 26 * 3600 * 1_000_000
    assert fields["iv_fn"]["default"] == 0
    if xml_columns:
        assert fields["x"]["default"] == "<a>1</a>"
        assert fields["x_fn"]["default"] == ""
    assert fields["ts_literal"]["default"] == 1529507596945
    assert fields["neg"]["default"] == -7
    # an expression that is neither a literal nor a function call is not evaluated: no default
    assert "default" not in fields["sum"]
    assert "default" not in fields["today"]
    assert "default" not in fields["nothing"]
    assert list(fields["n"]) == ["type", "optional", "default", "field"]
    # the defaults in the schema never stand for the row's values
    after = record.payload["after"]
    assert after["n"] == 42 and after["sum"] == 3 and after["u"] != fields["u"]["default"]


def test_column_defaults_are_never_executed(database: str) -> None:
    """Reading a default must not run the catalog's expression: an operator with a side effect stays unrun."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE side_effects (at timestamptz)")
        conn.execute(
            "CREATE FUNCTION noisy_plus(a int, b int) RETURNS int LANGUAGE plpgsql VOLATILE AS "
            "$$ BEGIN INSERT INTO side_effects VALUES (now()); RETURN a + b; END $$"
        )
        conn.execute("CREATE OPERATOR ### (LEFTARG = int, RIGHTARG = int, FUNCTION = noisy_plus)")
        conn.execute("CREATE TABLE e (id int PRIMARY KEY, v int DEFAULT (1 ### 2), w text DEFAULT 'plain')")
    config = connector(unique("safe"), **{"table.include.list": r"public\.e"})
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO e (id, v) VALUES (1, 5)")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.e")
    fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
    assert fields["w"]["default"] == "plain"
    assert fields["v"].get("default") in (None, 0)
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM side_effects").fetchone() == (0,)


def test_column_transforms(database: str, caplog: pytest.LogCaptureFixture) -> None:
    """Column rules as Debezium 3.6 applies them (the differential suite checks the same against the connector):
    only the first rule naming a column acts on it, in the order truncations, masks, source types, hashes."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE DOMAIN code AS varchar(8)")
        conn.execute(
            "CREATE TABLE c (id int PRIMARY KEY, long text, secret text, email varchar(20), price numeric(6,2),"
            ' "2bad-name" text, '
            "pin int, tags text[], doc jsonb, short char(6), coded code, named varchar(20))"
        )
    salt = "pepper"
    config = connector(
        unique("transforms"),
        **{
            "column.truncate.to.5.chars": r"public\.c\.long,public\.c\.doc,public\.c\.tags",
            "column.mask.with.4.chars": r"public\.c\.secret,public\.c\.pin,public\.c\.short,public\.c\.coded",
            f"column.mask.hash.SHA-256.with.salt.{salt}": r"public\.c\.email,public\.c\.named",
            "column.propagate.source.type": r"public\.c\.price,public\.c\.named",
            "sanitize.field.names": True,
        },
    )
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO c VALUES (1, 'abcdefghij', 'hunter2', 'anne@example.org', 12.5, 'odd', 1234, "
            """'{abcdefgh,ijklmnop}', '{"key": "long value"}', 'ab', 'XY-42', 'not hashed')"""
        )
    with caplog.at_level("WARNING", logger="walflow.records.column_rules"):
        stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.c")
    after = record.payload["after"]
    fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
    # truncation: any string value (JSON text too), the schema says so whenever the column may be longer
    assert after["long"] == "abcde" and after["doc"] == '{"key'
    assert after["tags"] == ["abcdefgh", "ijklmnop"]
    for name in ("long", "doc", "tags"):
        assert fields[name]["parameters"] == {"truncateLength": "5"}
    # masks replace CHAR/VARCHAR/TEXT values; any column they name is marked masked
    assert after["secret"] == "****" and after["short"] == "****" and after["coded"] == "****"
    assert after["pin"] == 1234 and fields["pin"]["parameters"] == {"masked": "true"}
    assert "public.c.pin" in " ".join(r.getMessage() for r in caplog.records)
    # Debezium's (v1) hash: of the salt and the Java-serialised string, cut to the column's length
    serialised = b"\xac\xed\x00\x05t" + len(b"anne@example.org").to_bytes(2, "big") + b"anne@example.org"
    assert after["email"] == hashlib.sha256(salt.encode() + serialised).hexdigest()[:20]
    assert fields["email"]["parameters"] == {"masked": "true"}
    # a column named by two rules: the first (source types) acts, the hash does not
    assert after["named"] == "not hashed"
    # sanitize.field.names is Debezium 1.x's; 3.x (and walflow) ignore it and say so
    assert after["2bad-name"] == "odd"
    assert any("sanitize.field.names" in r.getMessage() for r in caplog.records)
    assert fields["secret"]["parameters"] == {"masked": "true"}
    assert fields["price"]["parameters"] == {
        "scale": "2",
        "connect.decimal.precision": "6",
        "__debezium.source.column.type": "NUMERIC",
        "__debezium.source.column.length": "6",
        "__debezium.source.column.scale": "2",
        "__debezium.source.column.name": "price",
    }
    assert fields["named"]["parameters"] == {
        "__debezium.source.column.type": "VARCHAR",
        "__debezium.source.column.length": "20",
        "__debezium.source.column.scale": "0",
        "__debezium.source.column.name": "named",
    }
    # never on the key
    assert record.key["schema"]["fields"] == [{"type": "int32", "optional": False, "field": "id"}]


BIG = "(SELECT string_agg(md5(i::text || 'salt'), '') FROM generate_series(1, 400) i)"


@pytest.mark.parametrize("placeholder", [None, "hex:00ff"])
def test_toast_placeholder(database: str, placeholder: str | None) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, n int, doc text, tags text[], blob bytea)")
        conn.execute("CREATE TABLE bigfull (id int PRIMARY KEY, n int, doc text)")
        conn.execute("ALTER TABLE bigfull REPLICA IDENTITY FULL")
    overrides = {"toasted.value.placeholder": placeholder} if placeholder else {}
    config = connector(unique("toast"), **overrides)
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"INSERT INTO big VALUES (1, 0, {BIG}, ARRAY[{BIG}], convert_to({BIG}, 'UTF8'))")
        (size,) = conn.execute("SELECT pg_column_size(doc) FROM big").fetchone()
        assert size > 2000, "the value must be stored out of line (TOASTed) for this test to mean anything"
        conn.execute("UPDATE big SET n = 1")
        conn.execute(f"INSERT INTO bigfull VALUES (1, 0, {BIG})")
        conn.execute("UPDATE bigfull SET n = 1")
        (full,) = conn.execute(f"SELECT {BIG}").fetchone()
    stream(config, database)
    created, updated = read_topic(f"{config.topic_prefix}.public.big")
    assert len(created.payload["after"]["doc"]) == 12800 == len(full)
    after = updated.payload["after"]
    if placeholder is None:
        assert after["doc"] == "__debezium_unavailable_value"
        assert after["tags"] == ["__debezium_unavailable_value"]
        assert after["blob"] == b64(b"__debezium_unavailable_value")
    else:
        assert after["doc"] == "\x00\ufffd"
        assert after["blob"] == b64(b"\x00\xff")
    _, full_update = read_topic(f"{config.topic_prefix}.public.bigfull")
    assert full_update.payload["before"]["doc"] == full and full_update.payload["after"]["doc"] == full


def test_schema_changes_mid_stream(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE s (id int PRIMARY KEY, a int, b text)")
    config = connector(unique("ddl"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO s VALUES (1, 10, 'one')")
        conn.execute("ALTER TABLE s ADD COLUMN c numeric(4,1) DEFAULT 2.5")
        conn.execute("INSERT INTO s VALUES (2, 20, 'two', 1.5)")
        conn.execute("ALTER TABLE s DROP COLUMN b")
        conn.execute("INSERT INTO s VALUES (3, 30, 3.5)")
        conn.execute("ALTER TABLE s RENAME COLUMN a TO alpha")
        conn.execute("INSERT INTO s VALUES (4, 40, 4.5)")
        conn.execute("ALTER TABLE s ALTER COLUMN alpha TYPE text USING alpha::text || '!'")
        conn.execute("INSERT INTO s VALUES (5, 'fifty', 5.5)")
        conn.execute("UPDATE s SET c = 9.5 WHERE id = 1")
    summary = stream(config, database)
    assert summary.events == 6
    records = read_topic(f"{config.topic_prefix}.public.s")
    afters = [r.payload["after"] for r in records]
    assert afters[0] == {"id": 1, "a": 10, "b": "one"}
    assert afters[1] == {"id": 2, "a": 20, "b": "two", "c": b64((15).to_bytes(1, "big"))}
    assert afters[2] == {"id": 3, "a": 30, "c": b64((35).to_bytes(1, "big"))}
    assert afters[3] == {"id": 4, "alpha": 40, "c": b64((45).to_bytes(1, "big"))}
    assert afters[4] == {"id": 5, "alpha": "fifty", "c": b64((55).to_bytes(1, "big"))}
    assert afters[5] == {"id": 1, "alpha": "10!", "c": b64((95).to_bytes(1, "big"))}
    types = [{f["field"]: f["type"] for f in r.value["schema"]["fields"][1]["fields"]} for r in records]
    assert types[3]["alpha"] == "int32" and types[4]["alpha"] == "string"


def test_schema_changes_mid_stream_keep_type_metadata(database: str) -> None:
    """Enum, array and domain columns renamed and retyped after their changes were written: the events
    before each change keep their type's representation (looked up by the Relation's type OID) and NOT NULL."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE DOMAIN code AS varchar(5)")
        conn.execute("CREATE TABLE m (id int PRIMARY KEY, e mood NOT NULL, arr int[], d code, n int NOT NULL)")
    config = connector(unique("ddltypes"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO m VALUES (1, 'happy', '{1,2}', 'ab', 10)")
        for old, new in (("e", "e2"), ("arr", "arr2"), ("d", "d2")):
            conn.execute(f"ALTER TABLE m RENAME COLUMN {old} TO {new}")
        conn.execute("INSERT INTO m VALUES (2, 'sad', '{3}', 'cd', 20)")
        conn.execute("ALTER TABLE m ALTER COLUMN e2 TYPE text")
        conn.execute("ALTER TABLE m ALTER COLUMN arr2 TYPE text[]")
        conn.execute("ALTER TABLE m ALTER COLUMN d2 TYPE text USING d2 || '!'")
        conn.execute("INSERT INTO m VALUES (3, 'free', '{x}', 'ef', 30)")
        conn.execute("ALTER TABLE m DROP COLUMN n")
        conn.execute("INSERT INTO m VALUES (4, 'gone', NULL, NULL)")
    assert stream(config, database).events == 4
    records = read_topic(f"{config.topic_prefix}.public.m")
    assert [r.payload["after"] for r in records] == [
        {"id": 1, "e": "happy", "arr": [1, 2], "d": "ab", "n": 10},
        {"id": 2, "e2": "sad", "arr2": [3], "d2": "cd", "n": 20},
        {"id": 3, "e2": "free", "arr2": ["x"], "d2": "ef", "n": 30},
        {"id": 4, "e2": "gone", "arr2": None, "d2": None},
    ]
    fields = [
        {f["field"]: {k: v for k, v in f.items() if k != "field"} for f in r.value["schema"]["fields"][1]["fields"]}
        for r in records
    ]
    mood = {
        "type": "string",
        "optional": False,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "sad,ok,happy"},
    }
    int_array = {"type": "array", "items": {"type": "int32", "optional": True}, "optional": True}
    assert fields[0] == {
        "id": {"type": "int32", "optional": False},
        "e": mood,
        "arr": int_array,
        "d": {"type": "string", "optional": True},
        # n was dropped before the batch read the catalog: its type comes from the Relation message, but
        # whether it was NOT NULL is no longer recorded anywhere, so it is optional
        "n": {"type": "int32", "optional": True},
    }
    assert fields[1] == {
        "id": fields[0]["id"],
        "e2": mood,
        "arr2": int_array,
        "d2": fields[0]["d"],
        "n": fields[0]["n"],
    }
    assert fields[2]["e2"] == {"type": "string", "optional": False}
    assert fields[2]["arr2"] == {"type": "array", "items": {"type": "string", "optional": True}, "optional": True}
    assert fields[2]["n"] == {"type": "int32", "optional": True}
    assert "n" not in fields[3] and fields[3]["e2"] == {"type": "string", "optional": False}


def supported(cases: list[Case]) -> list[Case]:
    """``cases`` without ``xml`` on a server built without libxml (:func:`tests.support.server_has_xml`)."""
    return [c for c in cases if c.ddl != "xml" or server_has_xml()]


def _postgis_available() -> bool:
    if wheel_server():
        return False  # nothing to install for the wheel's server (tests.support.WHEEL_WITHOUT_POSTGIS)
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", "/usr/lib/postgresql/15/bin"))
    major = bindir.parent.name
    control = Path(f"/usr/share/postgresql/{major}/extension/postgis.control")
    if control.exists():
        return True
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
    result = subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", f"postgresql-{major}-postgis-3"],
        env=env,
        capture_output=True,
        timeout=900,
    )
    return result.returncode == 0 and control.exists()


@pytest.mark.timeout(1200)
def test_postgis_geometry_and_geography(database: str) -> None:
    if wheel_server():
        pytest.skip(WHEEL_WITHOUT_POSTGIS)
    if not _postgis_available():
        from tests.requires import unavailable

        unavailable(
            "PostGIS could not be installed (no root or no Debian package reachable)",
            "install Debian's postgresql-15-postgis-3",
        )
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, geom geometry, geog geography(Point, 4326))")
    config = connector(unique("gis"))
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO g VALUES (1, ST_GeomFromText('POINT(1 2)', 3187), ST_GeogFromText('SRID=4326;POINT(3 4)'))"
        )
        conn.execute("INSERT INTO g VALUES (2, ST_GeomFromText('LINESTRING(0 0, 1 1)'), NULL)")
    stream(config, database)
    first, second = read_topic(f"{config.topic_prefix}.public.g")
    fields = {f["field"]: f for f in first.value["schema"]["fields"][1]["fields"]}
    assert fields["geom"]["name"] == "io.debezium.data.geometry.Geometry"
    assert fields["geog"]["name"] == "io.debezium.data.geometry.Geography"
    assert [f["field"] for f in fields["geom"]["fields"]] == ["wkb", "srid"]
    # Debezium keeps PostGIS's EWKB as it is (the SRID flag and value inside) and gives the SRID beside it
    point_ewkb = b"\x01" + struct.pack("<IIdd", 0x20000001, 3187, 1.0, 2.0)
    assert first.payload["after"]["geom"] == {"wkb": b64(point_ewkb), "srid": 3187}
    assert first.payload["after"]["geog"] == {
        "wkb": b64(b"\x01" + struct.pack("<IIdd", 0x20000001, 4326, 3.0, 4.0)),
        "srid": 4326,
    }
    line_wkb = b"\x01" + struct.pack("<II4d", 2, 2, 0.0, 0.0, 1.0, 1.0)
    assert second.payload["after"]["geom"] == {"wkb": b64(line_wkb), "srid": None}


def _one_snapshot_row(database: str, name: str, ddl: str, row: str, **settings: Any) -> tuple[Any, Any, Any, Any]:
    """Create table ``name`` with one row, plan it for a connector with ``settings`` and read that row as a snapshot
    reads it (a ``snapshot.select.statement.overrides`` query through its server-side cursor): returns the config,
    the planned table, the row's values and an encoder of its records."""
    from walflow.capture.emitter import SnapshotEmitter
    from walflow.capture.snapshot_tables import read_chunks

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} ({ddl})")
        conn.execute(f"INSERT INTO {name} VALUES ({row})")
    config = connector(unique(name), **settings)
    prepare_source(config, database)
    with connect(as_connector(database)) as conn:
        (table,) = [t for t in plan_tables(conn, CaptureHelpers.for_config(config)) if t.name == f"public.{name}"]
        with conn.transaction():
            (values,) = list(read_chunks(conn, table, 100))
    # the encoder sends nothing: the producer the context writes with is never used
    context = CaptureContext.for_task(config, producer())
    return config, table, values, SnapshotEmitter(context, "db", None, None).encoder(table.schema, "true")


def test_columns_whose_field_names_adjust_to_one_name_are_serialised_as_one_field(database: str) -> None:
    """``field.name.adjustment.mode: avro`` makes ``a-b`` and ``a_b`` one field name: the event row holds the last
    value under it, and a snapshot's record must say the same (the straight-to-JSON path would write both)."""
    _config, table, values, encode = _one_snapshot_row(
        database,
        "clash",
        'id int PRIMARY KEY, "a-b" text, "a_b" text',
        "1, 'first', 'second'",
        **{"field.name.adjustment.mode": "avro"},
    )
    assert table.schema.json_row is None
    _key, value = encode(values)
    after = orjson.loads(value)["payload"]["after"]
    assert after == table.schema.row(values) == {"id": 1, "a_b": "second"}
    assert value.count(b'"a_b":') == 1


def test_an_override_query_giving_an_integer_column_other_text_fails_naming_it(database: str) -> None:
    """A ``snapshot.select.statement.overrides`` query can give a column any text: an integer column's converter must
    still refuse what is no integer, with the column and value named, rather than a record carrying ``1.5``."""
    from walflow.errors import ConversionError

    overrides = {
        "snapshot.select.statement.overrides": "public.ovr",
        "snapshot.select.statement.overrides.public.ovr": "SELECT id, qty / 2.0 AS qty FROM public.ovr",
    }
    _config, table, values, encode = _one_snapshot_row(
        database, "ovr", "id int PRIMARY KEY, qty int", "1, 3", **overrides
    )
    assert table.schema.json_row is not None
    with pytest.raises(ConversionError, match=r"column 'qty'.*1\.5"):
        encode(values)


def test_a_column_named_twice_in_the_message_key_gives_one_key_field(database: str) -> None:
    """``message.key.columns`` naming a column twice: the key payload holds it once,
    as the event row's dict gives it."""
    _config, _table, values, encode = _one_snapshot_row(
        database, "twice", "id int PRIMARY KEY, v text", "1, 'x'", **{"message.key.columns": "public.twice:id,id"}
    )
    key, _value = encode(values)
    assert key is not None and key.endswith(b'"payload":{"id":1}}')  # once, as the dict path gives it
