"""Golden tests of the type mappings: column definition, literal, exact schema and value, through PostgreSQL
and the broker. Each case is one row of the reference's type tables (004 "Data type mappings", 000).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import connector, read_topic, stream, unique
from walflow.source import connect, setup_source


@dataclass
class Case:
    id: str
    ddl: str
    literal: str
    schema: dict[str, Any]
    value: Any
    needs: str | None = None  # an extension the case needs
    mode: dict[str, Any] = field(default_factory=dict)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def s(type_: str, name: str | None = None, params: dict[str, str] | None = None, version: int | None = None, **extra: Any) -> dict[str, Any]:
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
MICRO_TS = s("int64", "io.debezium.time.MicroTimestamp", version=1)
ZONED_TS = s("string", "io.debezium.time.ZonedTimestamp", version=1)

CASES = [
    # -- basic types (Table 9) ---------------------------------------------------------------------
    Case("boolean", "boolean", "true", s("boolean"), True),
    Case("bit1", "bit(1)", "B'1'", s("boolean"), True),
    Case("bit10", "bit(10)", "B'1000000001'", s("bytes", "io.debezium.data.Bits", {"length": "10"}, 1), b64((513).to_bytes(2, "little"))),
    Case("varbit16", "bit varying(16)", "B'101'", s("bytes", "io.debezium.data.Bits", {"length": "16"}, 1), b64(b"\x05")),
    Case("varbit", "bit varying", "B'1'", s("bytes", "io.debezium.data.Bits", {"length": "2147483647"}, 1), b64(b"\x01")),
    Case("smallint_min", "smallint", "-32768", s("int16"), -32768),
    Case("integer_max", "integer", "2147483647", s("int32"), 2147483647),
    Case("bigint_min", "bigint", "-9223372036854775808", s("int64"), -9223372036854775808),
    Case("bigint_max", "bigint", "9223372036854775807", s("int64"), 9223372036854775807),
    Case("oid", "oid", "4294967295", s("int64"), 4294967295),
    Case("real", "real", "1.5", s("float"), 1.5),
    Case("real_nan", "real", "'NaN'", s("float"), "NaN"),
    Case("double", "double precision", "-2.5e-10", s("double"), -2.5e-10),
    Case("double_inf", "double precision", "'Infinity'", s("double"), "Infinity"),
    Case("double_neginf", "double precision", "'-Infinity'", s("double"), "-Infinity"),
    Case("char", "char(3)", "'ab'", s("string"), "ab "),
    Case("varchar", "varchar(10)", "'héllo'", s("string"), "héllo"),
    Case("character_varying", "character varying", "'x'", s("string"), "x"),
    Case("text", "text", "'line\nbreak \"quoted\" \\ back'", s("string"), 'line\nbreak "quoted" \\ back'),
    Case("citext", "citext", "'MiXeD'", s("string"), "MiXeD", needs="citext"),
    Case("json", "json", """'{"a": [1, 2]}'""", s("string", "io.debezium.data.Json", version=1), '{"a": [1, 2]}'),
    Case("jsonb", "jsonb", """'{"b": 1, "a": 2}'""", s("string", "io.debezium.data.Json", version=1), '{"a": 2, "b": 1}'),
    Case("xml", "xml", "'<a>1</a>'", s("string", "io.debezium.data.Xml", version=1), "<a>1</a>"),
    Case("uuid", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", s("string", "io.debezium.data.Uuid", version=1), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    Case("ltree", "ltree", "'Top.Science.Astronomy'", s("string", "io.debezium.data.Ltree", version=1), "Top.Science.Astronomy", needs="ltree"),
    Case("enum", "mood", "'happy'", s("string", "io.debezium.data.Enum", {"allowed": "sad,ok,happy"}, 1), "happy"),
    Case("inet", "inet", "'192.168.0.1/24'", s("string"), "192.168.0.1/24"),
    Case("inet_host", "inet", "'192.168.0.1/32'", s("string"), "192.168.0.1"),
    Case("cidr", "cidr", "'10.0.0.0/8'", s("string"), "10.0.0.0/8"),
    Case("macaddr", "macaddr", "'08:00:2b:01:02:03'", s("string"), "08:00:2b:01:02:03"),
    Case("macaddr8", "macaddr8", "'08:00:2b:01:02:03:04:05'", s("string"), "08:00:2b:01:02:03:04:05"),
    Case("int4range", "int4range", "'[1,10)'", s("string"), "[1,10)"),
    Case("int8range", "int8range", "'(1,10]'", s("string"), "[2,11)"),
    Case("numrange", "numrange", "'(1.5,2.5]'", s("string"), "(1.5,2.5]"),
    Case("tsrange", "tsrange", "'[2020-01-01 00:00,2020-01-02 00:00)'", s("string"), '["2020-01-01 00:00:00","2020-01-02 00:00:00")'),
    Case("tstzrange", "tstzrange", "'[2020-01-01 00:00+02,2020-01-02 00:00+02)'", s("string"), '["2019-12-31 22:00:00+00","2020-01-01 22:00:00+00")'),
    Case("daterange", "daterange", "'[2020-01-01,2020-01-05]'", s("string"), "[2020-01-01,2020-01-06)"),
    Case("point", "point", "'(1.5,-2)'", POINT, {"x": 1.5, "y": -2.0, "wkb": b64(bytes.fromhex("0101000000000000000000f83f00000000000000c0")), "srid": None}),
    Case("int_array", "integer[]", "'{1,NULL,3}'", {"type": "array", "items": {"type": "int32", "optional": True}}, [1, None, 3]),
    Case("text_array", "text[]", """'{"a b",c,"NULL","q\\"x"}'""", {"type": "array", "items": {"type": "string", "optional": True}}, ["a b", "c", "NULL", 'q"x']),
    Case("numeric_array", "numeric(5,2)[]", "'{1.5,-0.01}'", {"type": "array", "items": {**decimal(2, 5), "optional": True}}, [b64((150).to_bytes(2, "big")), b64(b"\xff")]),
    Case("empty_array", "integer[]", "'{}'", {"type": "array", "items": {"type": "int32", "optional": True}}, []),
    Case("domain_numeric", "price", "12.5", decimal(3, 8), b64((12500).to_bytes(2, "big"))),
    Case("domain_varchar", "code", "'ab'", s("string"), "ab"),
    Case("money", "money", "1234.56", decimal(2), b64((123456).to_bytes(3, "big", signed=True))),
    Case("money_negative", "money", "-1.5", decimal(2), b64((-150).to_bytes(2, "big", signed=True))),
    Case("bytea", "bytea", "'\\x0102ff'", s("bytes"), b64(bytes.fromhex("0102ff"))),
    Case("interval", "interval", "'1 year 2 months 3 days 04:05:06.78'", s("int64", "io.debezium.time.MicroDuration", version=1), 37091106780000),
    Case("interval_negative", "interval", "'-1 day -00:00:01'", s("int64", "io.debezium.time.MicroDuration", version=1), -86401000000),
    # -- temporal, adaptive (Table 10) -----------------------------------------------------------
    Case("date_leap", "date", "'2020-02-29'", s("int32", "io.debezium.time.Date", version=1), 18321),
    Case("date_1900", "date", "'1900-01-01'", s("int32", "io.debezium.time.Date", version=1), -25567),
    Case("date_2100", "date", "'2100-12-31'", s("int32", "io.debezium.time.Date", version=1), 47846),
    Case("time3", "time(3)", "'15:13:16.945'", s("int32", "io.debezium.time.Time", version=1), 54796945),
    Case("time6", "time", "'23:59:59.999999'", s("int64", "io.debezium.time.MicroTime", version=1), 86399999999),
    Case("timestamp3", "timestamp(3)", "'2018-06-20 15:13:16.945'", s("int64", "io.debezium.time.Timestamp", version=1), 1529507596945),
    Case("timestamp_reference", "timestamp", "'2018-06-20 15:13:16.945104'", MICRO_TS, 1529507596945104),
    Case("timestamp_1960", "timestamp", "'1960-01-01 00:00:00'", MICRO_TS, -315619200000000),
    Case("timestamp_2100", "timestamp", "'2100-01-01 00:00:00'", MICRO_TS, 4102444800000000),
    Case("timestamp_inf", "timestamp", "'infinity'", MICRO_TS, 9223372036825200000),
    Case("timestamp_neginf", "timestamp", "'-infinity'", MICRO_TS, -9223372036832400000),
    Case("timestamptz", "timestamptz", "'2018-06-20 15:13:16.945104+02'", ZONED_TS, "2018-06-20T13:13:16.945104Z"),
    Case("timestamptz_whole", "timestamp with time zone", "'2038-01-19 03:14:08-05'", ZONED_TS, "2038-01-19T08:14:08Z"),
    Case("timetz", "timetz", "'15:13:16.5+02'", s("string", "io.debezium.time.ZonedTime", version=1), "13:13:16.5Z"),
    # -- decimals, precise (Tables 13, 14) -------------------------------------------------------
    Case("numeric", "numeric(10,2)", "12.34", decimal(2, 10), b64((1234).to_bytes(2, "big"))),
    Case("decimal_negative", "decimal(5,2)", "-0.01", decimal(2, 5), b64(b"\xff")),
    Case("numeric_nan", "numeric(10,2)", "'NaN'", decimal(2, 10), None),
    Case("numeric_variable", "numeric", "3.14159", VSD, {"scale": 5, "value": b64((314159).to_bytes(3, "big"))}),
    Case(
        "numeric_huge",
        "numeric",
        "123456789012345678901234567890.123",
        VSD,
        {"scale": 3, "value": b64((123456789012345678901234567890123).to_bytes(14, "big", signed=True))},
    ),
    # -- HSTORE (Table 17) -----------------------------------------------------------------------
    Case("hstore_json", "hstore", "'a=>1, b=>NULL'", s("string", "io.debezium.data.Json", version=1), '{"a":"1","b":null}', needs="hstore"),
    # -- the other modes -------------------------------------------------------------------------
    Case("time3_us", "time(3)", "'15:13:16.945'", s("int64", "io.debezium.time.MicroTime", version=1), 54796945000, mode={"time.precision.mode": "adaptive_time_microseconds"}),
    Case("timestamp3_us_mode", "timestamp(3)", "'2018-06-20 15:13:16.945'", s("int64", "io.debezium.time.Timestamp", version=1), 1529507596945, mode={"time.precision.mode": "adaptive_time_microseconds"}),
    Case("date_connect", "date", "'2020-02-29'", s("int32", "org.apache.kafka.connect.data.Date", version=1), 18321, mode={"time.precision.mode": "connect"}),
    Case("time_connect", "time", "'15:13:16.945104'", s("int32", "org.apache.kafka.connect.data.Time", version=1), 54796945, mode={"time.precision.mode": "connect"}),
    Case("timestamp_connect", "timestamp", "'2018-06-20 15:13:16.945104'", s("int64", "org.apache.kafka.connect.data.Timestamp", version=1), 1529507596945, mode={"time.precision.mode": "connect"}),
    Case("numeric_double", "numeric(10,2)", "12.34", s("double"), 12.34, mode={"decimal.handling.mode": "double"}),
    Case("numeric_double_nan", "numeric", "'NaN'", s("double"), "NaN", mode={"decimal.handling.mode": "double"}),
    Case("money_double", "money", "-1.5", s("double"), -1.5, mode={"decimal.handling.mode": "double"}),
    Case("numeric_string", "numeric(10,2)", "12.34", s("string"), "12.34", mode={"decimal.handling.mode": "string"}),
    Case("numeric_string_nan", "numeric", "'NaN'", s("string"), "NAN", mode={"decimal.handling.mode": "string"}),
    Case("bytea_base64", "bytea", "'\\x0102ff'", s("string"), "AQL/", mode={"binary.handling.mode": "base64"}),
    Case("bytea_base64_url", "bytea", "'\\x0102ff'", s("string"), "AQL_", mode={"binary.handling.mode": "base64-url-safe"}),
    Case("bytea_hex", "bytea", "'\\x0102ff'", s("string"), "0102ff", mode={"binary.handling.mode": "hex"}),
    Case("interval_string", "interval", "'1 year 2 months 3 days 04:05:06.78'", s("string", "io.debezium.time.Interval", version=1), "P1Y2M3DT4H5M6.78S", mode={"interval.handling.mode": "string"}),
    Case("interval_string_zero", "interval", "'0'", s("string", "io.debezium.time.Interval", version=1), "P0Y0M0DT0H0M0S", mode={"interval.handling.mode": "string"}),
    Case(
        "hstore_map",
        "hstore",
        "'a=>1, b=>NULL'",
        {"type": "map", "keys": {"type": "string", "optional": False}, "values": {"type": "string", "optional": True}},
        {"a": "1", "b": None},
        needs="hstore",
        mode={"hstore.handling.mode": "map"},
    ),
    Case("unknown_included", "tsvector", "'a fat cat'", s("bytes"), b64(b"'a' 'cat' 'fat'"), mode={"include.unknown.datatypes": True}),
]

PREAMBLE = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN price AS numeric(8,3)",
    "CREATE DOMAIN code AS varchar(5)",
]


def _modes() -> list[tuple[str, dict[str, Any], list[Case]]]:
    groups: dict[str, tuple[dict[str, Any], list[Case]]] = {}
    for case in CASES:
        key = repr(sorted(case.mode.items()))
        groups.setdefault(key, (case.mode, []))[1].append(case)
    return [(";".join(f"{k}={v}" for k, v in mode.items()) or "defaults", mode, cases) for mode, cases in groups.values()]


def _prepare(dsn: str, cases: list[Case]) -> list[Case]:
    """Create the extensions the cases need; return the cases that can run."""
    runnable = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in PREAMBLE:
            conn.execute(statement)
        for case in cases:
            if case.needs:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {case.needs}")
            runnable.append(case)
    return runnable


def _stream_cases(dsn: str, cases: list[Case], mode: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    columns = ", ".join(f'"{c.id}" {c.ddl}' for c in cases)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE golden (pk int PRIMARY KEY, {columns})")
    config = connector(unique("types"), **mode)
    with connect(dsn) as conn:
        setup_source(conn, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO golden VALUES (1, {', '.join(c.literal for c in cases)})")
        conn.execute("INSERT INTO golden (pk) VALUES (2)")
    stream(config, dsn)
    records = read_topic(f"{config.topic_prefix}.public.golden")
    assert [r.op for r in records] == ["c", "c"]
    fields = {f["field"]: f for f in records[0].value["schema"]["fields"][1]["fields"]}
    return fields, records[0].payload["after"], records[1].payload["after"]


@pytest.mark.parametrize("label,mode,cases", _modes(), ids=[m[0] for m in _modes()])
def test_golden_types_streaming(database: str, label: str, mode: dict[str, Any], cases: list[Case]) -> None:
    cases = _prepare(database, cases)
    fields, row, nulls = _stream_cases(database, cases, mode)
    failures = []
    for case in cases:
        expected_schema = {**case.schema, "optional": True, "field": case.id}
        got_schema = fields.get(case.id)
        if got_schema != expected_schema:
            failures.append(f"{case.id}: schema {got_schema} != expected {expected_schema}")
        if row.get(case.id, "<missing>") != case.value:
            failures.append(f"{case.id}: value {row.get(case.id, '<missing>')!r} != expected {case.value!r}")
        if nulls.get(case.id, "<missing>") is not None:
            failures.append(f"{case.id}: NULL became {nulls.get(case.id)!r}")
    assert not failures, "\n".join(failures)


def test_unknown_type_is_left_out_with_a_warning(database: str, caplog: pytest.LogCaptureFixture) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, doc tsvector, v text)")
    config = connector(unique("unknown"))
    with connect(database) as conn:
        setup_source(conn, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, 'a cat', 'x')")
    with caplog.at_level("WARNING"):
        stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.t")
    assert record.payload["after"] == {"id": 1, "v": "x"}
    assert any("public.t.doc" in r.getMessage() and "tsvector" in r.getMessage() for r in caplog.records)


def test_server_time_zone_does_not_change_values(database: str) -> None:
    dbname = database.split("dbname=")[1]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET timezone TO 'Asia/Kolkata'")
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET datestyle TO 'SQL, DMY'")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, tz timestamptz, ts timestamp, d date, tt timetz)")
    config = connector(unique("tz"))
    with connect(database) as conn:
        setup_source(conn, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, '2018-06-20 15:13:16.945104', '2018-06-20 15:13:16.945104', '2020-02-29', '10:00:00')")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.t")
    after = record.payload["after"]
    # the literal was read in Asia/Kolkata (+05:30) by the writer's session; walflow reports UTC
    assert after["tz"] == "2018-06-20T09:43:16.945104Z"
    assert after["ts"] == 1529507596945104 and after["d"] == 18321
    assert after["tt"] == "04:30:00Z"


def test_defaults_in_schema(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            """
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
                doc jsonb DEFAULT '{}'::jsonb,
                u uuid DEFAULT gen_random_uuid(),
                neg int DEFAULT -7,
                nothing text
            )
            """
        )
    config = connector(unique("defaults"))
    with connect(database) as conn:
        setup_source(conn, config)
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
    assert fields["created_tz"]["default"] == "1970-01-01T00:00:00Z"
    assert fields["doc"]["default"] == "{}"
    assert "default" not in fields["u"]
    assert fields["neg"]["default"] == -7
    assert "default" not in fields["nothing"]
    assert list(fields["n"]) == ["type", "optional", "default", "field"]


def test_column_transforms(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute('CREATE TABLE c (id int PRIMARY KEY, long text, secret text, email varchar(20), price numeric(6,2), "2bad-name" text)')
    salt = "pepper"
    config = connector(
        unique("transforms"),
        **{
            "column.truncate.to.5.chars": r"public\.c\.long",
            "column.mask.with.4.chars": r"public\.c\.secret",
            f"column.mask.hash.SHA-256.with.salt.{salt}": r"public\.c\.email",
            "column.propagate.source.type": r"public\.c\.price,public\.c\.email",
            "sanitize.field.names": True,
        },
    )
    with connect(database) as conn:
        setup_source(conn, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO c VALUES (1, 'abcdefghij', 'hunter2', 'anne@example.org', 12.5, 'odd')")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.c")
    after = record.payload["after"]
    assert after["long"] == "abcde"
    assert after["secret"] == "****"
    assert after["email"] == hashlib.sha256(salt.encode() + b"anne@example.org").hexdigest()[:20]
    assert after["_2bad_name"] == "odd"
    fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
    assert fields["secret"]["parameters"] == {"masked": "true"}
    assert fields["price"]["parameters"] == {
        "scale": "2",
        "connect.decimal.precision": "6",
        "__debezium.source.column.type": "NUMERIC",
        "__debezium.source.column.length": "6",
        "__debezium.source.column.scale": "2",
        "__debezium.source.column.name": "price",
    }
    assert fields["email"]["parameters"]["__debezium.source.column.type"] == "VARCHAR"
    assert fields["email"]["parameters"]["__debezium.source.column.length"] == "20"


BIG = "(SELECT string_agg(md5(i::text || 'salt'), '') FROM generate_series(1, 400) i)"


@pytest.mark.parametrize("placeholder", [None, "hex:00ff"])
def test_toast_placeholder(database: str, placeholder: str | None) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, n int, doc text, tags text[], blob bytea)")
        conn.execute("CREATE TABLE bigfull (id int PRIMARY KEY, n int, doc text)")
        conn.execute("ALTER TABLE bigfull REPLICA IDENTITY FULL")
    overrides = {"toasted.value.placeholder": placeholder} if placeholder else {}
    config = connector(unique("toast"), **overrides)
    with connect(database) as conn:
        setup_source(conn, config)
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
    with connect(database) as conn:
        setup_source(conn, config)
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


def _postgis_available() -> bool:
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
    if not _postgis_available():
        pytest.skip("PostGIS could not be installed (no root or no Debian package reachable)")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, geom geometry, geog geography(Point, 4326))")
    config = connector(unique("gis"))
    with connect(database) as conn:
        setup_source(conn, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO g VALUES (1, ST_GeomFromText('POINT(1 2)', 3187), ST_GeogFromText('SRID=4326;POINT(3 4)'))")
        conn.execute("INSERT INTO g VALUES (2, ST_GeomFromText('LINESTRING(0 0, 1 1)'), NULL)")
    stream(config, database)
    first, second = read_topic(f"{config.topic_prefix}.public.g")
    fields = {f["field"]: f for f in first.value["schema"]["fields"][1]["fields"]}
    assert fields["geom"]["name"] == "io.debezium.data.geometry.Geometry"
    assert fields["geog"]["name"] == "io.debezium.data.geometry.Geography"
    assert [f["field"] for f in fields["geom"]["fields"]] == ["wkb", "srid"]
    point_wkb = b"\x01" + struct.pack("<Idd", 1, 1.0, 2.0)
    assert first.payload["after"]["geom"] == {"wkb": b64(point_wkb), "srid": 3187}
    assert first.payload["after"]["geog"] == {"wkb": b64(b"\x01" + struct.pack("<Idd", 1, 3.0, 4.0)), "srid": 4326}
    line_wkb = b"\x01" + struct.pack("<II4d", 2, 2, 0.0, 0.0, 1.0, 1.0)
    assert second.payload["after"]["geom"] == {"wkb": b64(line_wkb), "srid": None}
