"""The lake job's modules that need no Spark: type mapping, value conversion and representation, the decoder,
positions, names, settings, SQL builders, hooks."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from walflow.errors import ConfigError, LakeError
from walflow.lake import columns as C
from walflow.lake import sql
from walflow.lake.decoder import DecodePlan, Decoder, split_records
from walflow.lake.hooks import POINTS, ApplyHooks, load_hooks
from walflow.lake.loose import inferred_type, json_kind, loose_converter, loose_field, loose_kinds_fit, loose_schema
from walflow.lake.naming import is_table_topic, names_from_topic, sql_quote, sql_string, table_name
from walflow.lake.positions import format_offsets, format_position, offset_slices, parse_offsets, source_position
from walflow.lake.settings import LakeSettings
from walflow.lake.types import RowShape, arrow_type, check_evolution, placeholder_values, spark_type, sql_literal
from walflow.lake.values import (
    FITTED,
    INVALID,
    MAX_DAYS,
    MAX_MICROS,
    MIN_DAYS,
    MIN_MICROS,
    TS_NEG_INF,
    TS_POS_INF,
    column_array,
    fit,
    parse_zoned,
    render_days,
    render_micros,
)

PLACEHOLDER = "__debezium_unavailable_value"


def f(type_: str, name: str | None = None, **extra: object) -> dict:
    out: dict = {"type": type_, "optional": True, "field": "x"}
    if name:
        out["name"] = name
    out.update(extra)
    return out


def unscaled(value: int) -> str:
    return base64.b64encode(
        value.to_bytes(((value if value >= 0 else ~value).bit_length() + 8) // 8, "big", signed=True)
    ).decode()


def decimal_field(scale: int, precision: int | None = None) -> dict:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return f("bytes", "org.apache.kafka.connect.data.Decimal", parameters=params)


def test_spark_types() -> None:
    assert spark_type(f("int16")) == "int"
    assert spark_type(f("int64")) == "bigint"
    assert spark_type(decimal_field(2, 10)) == "decimal(10,2)"
    assert spark_type(decimal_field(2)) == "decimal(38,2)"
    # beyond Spark's 38 digits the exact text; a negative scale holds whole numbers
    assert spark_type(decimal_field(2, 50)) == "string" and spark_type(decimal_field(40, 45)) == "string"
    assert spark_type(decimal_field(-2, 5)) == "decimal(7,0)"
    assert spark_type(decimal_field(2046, 5)) == "decimal(7,0)"  # numeric(5,-2) as Debezium sends it
    assert spark_type(f("struct", "io.debezium.data.VariableScaleDecimal", fields=[])) == "string"
    assert spark_type(f("int64", "io.debezium.time.MicroTimestamp")) == "timestamp_ntz"
    assert spark_type(f("string", "io.debezium.time.ZonedTimestamp")) == "timestamp"
    assert spark_type(f("int32", "io.debezium.time.Date")) == "date"
    assert spark_type(f("array", items={"type": "int32"})) == "array<int>"
    assert spark_type(f("string", "io.debezium.data.Json")) == "string"
    # a semantic name this walflow does not know falls back to the schema type
    assert spark_type(f("string", "io.debezium.time.IsoTimestamp")) == "string"


def test_arrow_types_of_spark_ddl() -> None:
    assert arrow_type("timestamp") == pa.timestamp("us", tz="UTC") and arrow_type("timestamp_ntz") == pa.timestamp("us")
    assert arrow_type("decimal(12,2)") == pa.decimal128(12, 2)
    assert arrow_type("map<string,array<date>>") == pa.map_(pa.string(), pa.list_(pa.date32()))
    odd = "struct<`a``b:c`:int,`wkb`:binary>"
    assert arrow_type(odd) == pa.struct([pa.field("a`b:c", pa.int32()), pa.field("wkb", pa.binary())])


def test_row_conversion_and_toast() -> None:
    schema = {
        "fields": [
            {"field": "before"},
            {
                "field": "after",
                "fields": [
                    {"type": "int32", "field": "id"},
                    {**decimal_field(2), "field": "price"},
                    {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "ts"},
                    {"type": "int64", "name": "io.debezium.time.Timestamp", "field": "ts_ms"},
                    {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "tz"},
                    {"type": "string", "field": "doc"},
                    {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": [], "field": "v"},
                    {"type": "int32", "name": "io.debezium.time.Time", "field": "t"},
                    {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}, "field": "h"},
                    {"type": "array", "items": {"type": "string"}, "field": "tags"},
                    {"type": "array", "items": {"type": "string"}, "field": "words"},
                    {**decimal_field(2, 38), "field": "wide"},
                ],
            },
        ]
    }
    shape = RowShape(schema)
    row = {
        "id": 1,
        "price": unscaled(1234),
        "ts": 1529507596945104,
        "ts_ms": 1529507596945,
        "tz": "2018-06-20T13:13:16.945104Z",
        "doc": PLACEHOLDER,
        "v": {"scale": 3, "value": unscaled(-1500)},
        "t": 1000,
        "h": {"a": "1", "b": None},
        "tags": [PLACEHOLDER],
        "words": [PLACEHOLDER, "x"],
        "wide": unscaled(10**37 + 1),
    }
    values, toasted = shape.convert(row, placeholder_values(PLACEHOLDER))
    assert values[0] == 1 and values[1] == Decimal("12.34")
    # temporal values are integers since the epoch, which Arrow takes whatever their range
    assert values[2] == 1529507596945104 and values[3] == 1529507596945000
    assert values[4] == 1529500396945104
    assert values[5] is None and toasted == ["doc", "tags"]  # an unchanged TOASTed array is the placeholder alone
    assert values[6] == "-1.500" and values[7] == 1_000_000
    assert values[8] == [("a", "1"), ("b", None)]
    assert values[9] is None and values[10] == [PLACEHOLDER, "x"]
    assert values[11] == Decimal("100000000000000000000000000000000000.01")  # 38 digits, none rounded
    # the generated converter the decoder runs gives the same, for this row, a row of nulls and a missing column
    compiled = shape.compiled()
    for image in (
        row,
        dict.fromkeys(row),
        {k: v for k, v in row.items() if k != "price"},
        {**row, "doc": "real text", "tags": None},
    ):
        assert compiled(image, placeholder_values(PLACEHOLDER)) == shape.convert(image, placeholder_values(PLACEHOLDER))
    with pytest.raises(Exception):  # noqa: B017 - a value the converter cannot take fails as in convert()
        compiled({**row, "price": 5}, placeholder_values(PLACEHOLDER))
    # schemaless columns: a value of the type the converter keeps skips the call, any other still goes through it
    loose = RowShape(
        loose_schema(
            [
                loose_field("n", "bigint"),
                loose_field("s", "string"),
                loose_field("b", "boolean"),
                loose_field("d", "double"),
            ]
        )
    )
    for image in ({"n": 1, "s": "x", "b": True, "d": 1.5}, {"n": None, "s": {"a": [1]}, "b": False, "d": 2}, {"s": 7}):
        assert loose.compiled()(image, ()) == loose.convert(image, ())
    for bad in ({"n": True}, {"n": "1"}, {"b": 1}, {"n": 1.5}):
        with pytest.raises(TypeError):
            loose.compiled()(bad, ())
        with pytest.raises(TypeError):
            loose.convert(bad, ())
    # column names that are no identifiers enter the generated code only as literals
    odd = RowShape(
        {"fields": [{"field": "before"}, {"field": "after", "fields": [{"type": "string", "field": "a'b\"c\\n)"}]}]}
    )
    assert odd.compiled()({"a'b\"c\\n)": "x"}, ()) == (["x"], [])


def test_values_outside_sparks_range_are_clamped_and_kept_as_text() -> None:
    assert render_micros(TS_POS_INF) == "infinity" and render_micros(TS_NEG_INF) == "-infinity"
    assert render_days(2**31 - 1) == "infinity" and render_days(-(2**31)) == "-infinity"
    assert render_days(-735160) == "-0043-03-15"  # 44 BC, astronomical year numbering
    assert render_days(3789548) == "+12345-06-07"
    assert render_micros(327416950923500000) == "+12345-06-07T01:02:03.5"
    assert render_micros(0, zoned=True) == "1970-01-01T00:00:00Z"
    assert parse_zoned("-0043-03-15T12:00:00Z") == -63517780800000000
    assert parse_zoned("infinity") == TS_POS_INF and parse_zoned("2018-06-20T15:13:16.945104+02:00") == 1529500396945104
    assert parse_zoned("+12345-06-07T01:02:03.5Z") == 327416950923500000
    assert fit(TS_POS_INF, pa.timestamp("us")) == (MAX_MICROS, FITTED)
    assert fit(TS_NEG_INF, pa.timestamp("us")) == (MIN_MICROS, FITTED)
    assert fit(-735160, pa.date32()) == (MIN_DAYS, FITTED) and fit(3789548, pa.date32()) == (MAX_DAYS, FITTED)
    assert fit(5, pa.date32()) == (5, None)
    assert fit("oops", pa.timestamp("us")) == (None, INVALID)
    assert fit(Decimal("1" * 40), pa.decimal128(38, 0)) == (None, FITTED)
    assert fit(2**70, pa.int64()) == (2**63 - 1, FITTED)
    # a batch: the fast path when everything fits, value by value otherwise
    array, fitted = column_array([0, None, 5], pa.timestamp("us"), True)
    assert array.to_pylist() == [dt.datetime(1970, 1, 1), None, dt.datetime(1970, 1, 1, 0, 0, 0, 5)] and fitted == {}
    array, fitted = column_array([0, TS_POS_INF, None], pa.timestamp("us"), True)
    assert array.to_pylist()[1] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert fitted == {1: (FITTED, "infinity")}
    array, fitted = column_array([[1, TS_NEG_INF], None], pa.list_(pa.timestamp("us")), True)
    assert array.to_pylist()[0][1] == dt.datetime(1, 1, 1)
    assert fitted == {0: (FITTED, '["1970-01-01T00:00:00.000001","-infinity"]')}
    # a default of 'infinity' in a column added later: clamped like the values
    assert sql_literal(TS_POS_INF, "timestamp_ntz") == "CAST('9999-12-31 23:59:59.999999' AS timestamp_ntz)"
    assert sql_literal(18262, "date") == "CAST('2020-01-01' AS date)"


def _schema(*fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [
            {"field": "before", "type": "struct", "fields": list(fields)},
            {"field": "after", "type": "struct", "fields": list(fields)},
        ],
    }


ROW_SCHEMA = _schema(
    {"type": "int32", "field": "id", "optional": False},
    {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "ts", "optional": True},
    {"type": "string", "field": "doc", "optional": True},
)


def record(
    offset: int,
    op: str,
    after: dict | None,
    before: dict | None = None,
    key: bytes | None = b'{"id":1}',
    schema: dict | None = ROW_SCHEMA,
    partition: int = 0,
    **source: Any,
) -> tuple[int, int, bytes | None, bytes]:
    payload = {
        "before": before,
        "after": after,
        "op": op,
        "ts_ms": 1,
        "ts_us": 1000,
        "ts_ns": 1000000,
        "transaction": None,
        # fields a newer Debezium adds to the source block are ignored
        "source": {
            "version": "3.6.3.Final",
            "connector": "postgresql",
            "schema": "public",
            "table": "t",
            "lsn": 100 + offset,
            "sequence": f'["90","{100 + offset}"]',
            "ts_ms": 7,
            "ts_us": 7000,
            "ts_ns": 7000000,
            "origin": "x",
            **source,
        },
    }
    value = orjson.dumps({"schema": schema, "payload": payload} if schema is not None else payload)
    return partition, offset, key, value


def decode(records: list[Any], **plan: Any) -> list[dict[str, Any]]:
    target = plan.pop("value_schema", ROW_SCHEMA)
    decoder = Decoder(DecodePlan("inv.public.t", {}, target, placeholders=placeholder_values(PLACEHOLDER), **plan))
    return [row for batch in decoder.decode(records) for row in batch.to_pylist()]


def test_decoder_decodes_each_record_once_with_its_place_and_schema() -> None:
    records = [
        record(0, "c", {"id": 1, "ts": 0, "doc": "a"}),
        (0, 1, None, None),  # a tombstone without a key
        record(2, "u", {"id": 1, "ts": TS_POS_INF, "doc": PLACEHOLDER}),
        record(3, "d", None, {"id": 1, "ts": 5, "doc": None}),
        record(4, "t", None, key=None),
    ]
    rows = decode(records)
    assert [(r[C.OP], r[C.OFFSET], r[C.SIGN]) for r in rows] == [("c", 0, 1), ("u", 2, 1), ("d", 3, -1), ("t", 4, 1)]
    assert rows[0][C.SCHEMA] is not None and all(
        r[C.SCHEMA] is None for r in rows[1:]
    )  # the schema text once per slice
    assert rows[0][C.KEY] == b'{"id":1}' and rows[1][C.KEY] is None and rows[3][C.KEYED] is False
    assert rows[1][C.TOAST] == ["doc"] and rows[1]["doc"] is None
    assert rows[1]["ts"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999) and rows[1][C.OVERFLOW] == [
        ("ts", "infinity")
    ]
    assert rows[0][C.OVERFLOW] is None and rows[2]["id"] == 1 and rows[2]["ts"] == dt.datetime(1970, 1, 1, 0, 0, 0, 5)
    assert (rows[1][C.POS_A], rows[1][C.POS_B], rows[1][C.LSN], rows[1][C.SOURCE_TS]) == (102, 102, 102, 7)
    assert rows[0][C.SRC_TABLE] == "t" and rows[1][C.SRC_TABLE] is None  # names only when they change
    assert all(r[C.PROBLEM] is None for r in rows)


def test_decoder_orders_the_first_transaction_after_a_snapshot_after_its_rows() -> None:
    """Snapshot rows (op r, sequence [null, C]) sit at (C, 0); a first transaction with no previous commit whose
    change was written before C sorts after them once the start fact's C is known, from the start fact's offset
    on; records before that offset (an older snapshot's generation) keep their own position."""
    snapshot = [record(o, "r", {"id": o, "ts": 0, "doc": "s"}, lsn=500, sequence='[null,"500"]') for o in (3, 4)]
    first = record(5, "u", {"id": 3, "ts": 0, "doc": "new"}, lsn=480, sequence='[null,"480"]')
    older = record(1, "u", {"id": 3, "ts": 0, "doc": "old"}, lsn=300, sequence='[null,"300"]')
    rows = decode([older, *snapshot, first], first_commit=(500, {0: 3}))
    places = {r[C.OFFSET]: (r[C.POS_A], r[C.POS_B]) for r in rows}
    assert places == {1: (300, 300), 3: (500, 0), 4: (500, 0), 5: (500, 480)}
    assert places[3] < places[5]
    # without a start fact the transaction keeps [null, 480]: it sorts before the snapshot's rows
    assert {r[C.OFFSET]: (r[C.POS_A], r[C.POS_B]) for r in decode([*snapshot, first])}[5] == (480, 480)


def test_a_row_event_without_a_key_writes_out_the_empty_key_and_cuts_the_run() -> None:
    """A keyed table that loses its key: the first row event without one writes out NO_KEY (a truncate does not),
    and the run is cut there, as for any other change of the key's shape."""
    from walflow.lake import frames
    from walflow.lake.reader import NO_KEY

    rows = decode(
        [
            record(0, "c", {"id": 1, "ts": 0, "doc": "a"}),
            record(1, "t", None, key=None),
            record(2, "c", {"id": 1, "ts": 0, "doc": "b"}, key=None),
            record(3, "c", {"id": 1, "ts": 0, "doc": "c"}, key=None),
        ]
    )
    assert [r[C.KEY] for r in rows] == [b'{"id":1}', None, NO_KEY, None]
    cut = frames.key_cut([r for r in rows if r[C.KEY] is not None])
    assert cut["key_names"] == ["id"] and cut["key_cut"] == {0: 2} and cut["key_change"] == (["id"], [])


def test_a_lone_tombstone_is_a_delete_of_its_key_without_a_position() -> None:
    """A tombstone right after the delete of its key adds nothing; one alone (compaction removed the delete) is a
    delete of its key, with no position; a tombstone without a key is dropped."""
    rows = decode(
        [
            record(0, "c", {"id": 1, "ts": 0, "doc": "a"}),
            record(1, "d", None, {"id": 1, "ts": 0, "doc": None}),
            (0, 2, b'{"id":1}', None),  # the delete's own tombstone
            (0, 3, b'{"id":7}', None),  # alone
            (0, 4, None, None),  # no key
            (0, 5, b'{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":8}}', None),
            record(6, "c", {"id": 9, "ts": 0, "doc": "b"}),
        ]
    )
    assert [(r[C.OP], r[C.OFFSET], r["id"], r[C.POS_A], r[C.SIGN]) for r in rows] == [
        ("c", 0, 1, 100, 1),
        ("d", 1, 1, 101, -1),
        ("d", 3, 7, None, -1),
        ("d", 5, 8, None, -1),
        ("c", 6, 9, 106, 1),
    ]
    assert (
        rows[2][C.POS_B] is None
        and rows[2]["doc"] is None
        and rows[2][C.HASH] == ""
        and rows[4][C.HASH] == rows[0][C.HASH]
    )


def test_decoder_maps_older_shapes_onto_the_target_with_defaults() -> None:
    old = _schema(
        {"type": "int32", "field": "id", "optional": False}, {"type": "string", "field": "doc", "optional": True}
    )
    new = _schema(
        {"type": "int32", "field": "id", "optional": False},
        {"type": "string", "field": "doc", "optional": True},
        {"type": "int32", "field": "tier", "optional": True, "default": 1},
    )
    rows = decode(
        [
            record(0, "c", {"id": 1, "doc": "x"}, schema=old),
            record(1, "c", {"id": 2, "doc": "y", "tier": 5}, schema=new),
        ],
        value_schema=new,
        defaults={"tier": 1},
    )
    assert [(r["id"], r["doc"], r["tier"]) for r in rows] == [(1, "x", 1), (2, "y", 5)]
    assert rows[0][C.HASH] != rows[1][C.HASH] and rows[1][C.SCHEMA] is not None


def test_keyless_update_brings_its_old_row_with_sign_minus_one() -> None:
    rows = decode([record(0, "u", {"id": 2, "ts": None, "doc": "new"}, {"id": 1, "ts": None, "doc": "old"}, key=None)])
    assert [(r[C.SIGN], r["doc"]) for r in rows] == [(-1, "old"), (1, "new")]


def test_undecodable_records_are_reported_with_topic_partition_offset_column_and_value() -> None:
    records = [
        record(0, "c", {"id": 1, "ts": 0, "doc": "a"}),
        (0, 1, b"k", b"not json at all"),
        record(2, "c", {"id": 2, "ts": "yesterday", "doc": "b"}),
        record(3, "c", {"id": 3, "ts": 0, "doc": "c"}),
    ]
    rows = decode(records)
    problems = {r[C.OFFSET]: orjson.loads(r[C.PROBLEM]) for r in rows if r[C.PROBLEM]}
    assert set(problems) == {1, 2}
    assert (
        problems[1]["topic"] == "inv.public.t" and problems[1]["partition"] == 0 and "not JSON" in problems[1]["error"]
    )
    assert problems[1]["error"].endswith(": 'not json at all'")  # what the record holds
    assert problems[2]["column"] == "ts" and problems[2]["value"] == "yesterday"
    # listed in walflow.lake.accept.records: the value is null with its text kept, the record that is no event skipped
    rows = decode(records, accept=frozenset({(0, 1), (0, 2)}))
    accepted = {r[C.OFFSET]: r for r in rows}
    assert orjson.loads(accepted[1][C.PROBLEM])["accepted"] is True and accepted[1][C.OP] is None
    assert (
        accepted[2][C.PROBLEM] is None
        and accepted[2]["ts"] is None
        and accepted[2][C.OVERFLOW] == [("ts", "yesterday")]
    )


def test_records_that_are_not_utf8_or_nest_too_deep_are_problems_not_crashes() -> None:
    """A value with invalid UTF-8, or JSON nested deeper than the parsers go, is a problem record naming its place
    (so walflow.lake.accept.records can skip it), with or without a schema part."""
    records = [
        (0, 0, b"k", b'{"op":"c","after":{"id":1,"doc":"\xff\xfe"}}'),
        (0, 1, b"k", b'{"op":"c","after":{"id":2,"doc":' + b"[" * 5000 + b"]" * 5000 + b"}}"),
        (
            0,
            2,
            b"k",
            b'{"schema":{"type":"struct"},"payload":{"op":"c","after":' + b"[" * 100000 + b"]" * 100000 + b"}}",
        ),
        record(3, "c", {"id": 3, "ts": 0, "doc": "c"}),
    ]
    rows = decode(records)
    problems = {r[C.OFFSET]: orjson.loads(r[C.PROBLEM]) for r in rows if r[C.PROBLEM]}
    assert set(problems) == {0, 1, 2}, problems
    assert all("not JSON" in p["error"] for p in problems.values())
    assert [r[C.OFFSET] for r in decode(records, accept=frozenset({(0, 0), (0, 1), (0, 2)})) if r[C.OP]] == [3]


def test_events_of_the_wrong_shape_are_reported_not_decoded() -> None:
    """The decoder parses only the fields it reads; an event whose source, transaction or row is not an object, or
    which has no op, is a problem with its place, with or without a schema part."""
    shapes = [
        {"op": "c", "source": 5, "after": {"id": 1}},
        {"op": "c", "transaction": [1], "after": {"id": 1}},
        {"op": "u", "after": ["not", "a", "row"]},
        {"after": {"id": 1}},
        [1, 2, 3],
    ]
    for with_schema in (True, False):
        records = [
            (0, i, b"k", orjson.dumps({"schema": ROW_SCHEMA, "payload": p} if with_schema else p))
            for i, p in enumerate(shapes)
        ]
        records.append(
            record(len(shapes), "c", {"id": 9, "ts": 0, "doc": "fine"}, schema=ROW_SCHEMA if with_schema else None)
        )
        rows = decode(records)
        problems = {r[C.OFFSET]: orjson.loads(r[C.PROBLEM])["error"] for r in rows if r[C.PROBLEM]}
        assert set(problems) == set(range(len(shapes))), problems
        assert "not an object" in problems[0] and "not an object" in problems[2] and "no 'op'" in problems[3]
        assert [r["id"] for r in rows if r[C.OP] == "c"] == [9]


def test_decoder_cuts_batches_by_bytes_for_huge_rows() -> None:
    big = _schema(
        {"type": "int32", "field": "id", "optional": False},
        {"type": "array", "items": {"type": "int32", "optional": True}, "field": "arr"},
    )
    records = [record(i, "c", {"id": i, "arr": list(range(100_000))}, schema=big) for i in range(6)]
    decoder = Decoder(DecodePlan("t", {}, big, batch_bytes=500_000))  # each record is ~590 kB
    batches = list(decoder.decode(records))
    assert len(batches) == 6 and sum(b.num_rows for b in batches) == 6
    assert batches[-1].to_pylist()[0]["arr"][-1] == 99_999


def test_decoder_reports_json_kinds_of_schemaless_columns_it_does_not_know() -> None:
    target = loose_schema([loose_field("id", "bigint")])
    records = [
        record(0, "c", {"id": 1, "n": 1, "s": None}, schema=None, key=b'{"id":1}'),
        record(1, "c", {"id": 2, "n": 2.5, "s": "x"}, schema=None, key=b'{"id":2}'),
    ]
    rows = decode(records, value_schema=target)
    kinds = [orjson.loads(r[C.KINDS]) for r in rows if r[C.KINDS]]
    assert kinds == [{"n": ["double", "long"], "s": ["string"]}]
    assert rows[0][C.HASH] == "" and rows[0][C.SCHEMA] == ""
    # a value of a kind its (known) column cannot take is a problem naming it
    rows = decode([record(0, "c", {"id": "one"}, schema=None)], value_schema=target)
    assert orjson.loads(rows[0][C.PROBLEM])["column"] == "id"


def test_split_records_reads_the_schema_part_once() -> None:
    records = [record(0, "c", {"id": 1, "ts": 0, "doc": "a"}), record(1, "c", {"id": 2, "ts": 0, "doc": "b"})]
    split = list(split_records(records))
    assert split[0][1] is not None and split[1][1] is None and split[0][0] == split[1][0]
    assert split[1][6]["after"]["id"] == 2


def test_evolution_rules() -> None:
    add, widen, problems = check_evolution({"id": "int", "v": "string"}, {"id": "bigint", "v": "string", "w": "int"})
    assert add == {"w": "int"} and widen == {"id": "bigint"} and problems == []
    _, widen, problems = check_evolution({"v": "int"}, {"v": "string"})
    assert widen == {} and problems == ["column 'v' changes from int to string"]
    _, widen, problems = check_evolution({"p": "decimal(10,2)", "f": "float"}, {"p": "decimal(12,2)", "f": "double"})
    assert widen == {"p": "decimal(12,2)", "f": "double"} and problems == []
    # narrowing and a scale change are not widenings
    _, widen, problems = check_evolution({"id": "bigint", "p": "decimal(12,2)"}, {"id": "int", "p": "decimal(12,3)"})
    assert widen == {} and len(problems) == 2


def test_offsets_round_trip_and_slices() -> None:
    offsets = {"a.b.c": {0: 5, 1: 7}}
    assert parse_offsets(format_offsets(offsets)) == offsets
    assert offset_slices([(0, 0, 100_000)], 2) == [(0, 0, 50_000), (0, 50_000, 100_000)]
    assert offset_slices([(0, 0, 10), (1, 5, 6)], 2) == [(0, 0, 10), (1, 5, 6)]


def test_the_record_budget_is_shared_fairly() -> None:
    from walflow.lake.positions import share

    assert share(60, {"a": 200, "b": 5, "c": 7}) == {"a": 48, "b": 5, "c": 7}
    assert share(10, {"a": 100, "b": 100, "c": 100}) == {"a": 4, "b": 3, "c": 3}  # the remainder in key order
    assert share(1000, {"a": 3, "b": 0}) == {"a": 3, "b": 0}
    assert share(0, {"a": 3}) == {"a": 0} and share(5, {}) == {}
    given = share(1_000_003, {i: (i * 7919) % 50_000 for i in range(300)})
    assert sum(given.values()) == min(1_000_003, sum((i * 7919) % 50_000 for i in range(300)))


def test_nested_topic_prefixes() -> None:
    from walflow.names import prefixes_nest

    assert prefixes_nest("shop", ".", "shop.eu", ".") and prefixes_nest("shop.eu", ".", "shop", ".")
    assert not prefixes_nest("shop", ".", "shop_eu", ".") and not prefixes_nest("shop", ".", "shopping", ".")
    assert prefixes_nest("shop", "_", "shop_eu", "_") and not prefixes_nest("shop", ".", "shop_eu", "_")


def test_table_names_never_collide() -> None:
    assert table_name("public", "orders") == "public__orders"
    assert table_name("inventory", "order_lines") == "inventory__order_lines"
    pairs = [
        ("public", "a.b"),
        ("public", "a_b"),
        ("public", "café"),
        ("public", "cafè"),
        ("public", "Orders"),
        ("public", "orders"),
        ("a", "b__c"),
        ("a__b", "c"),
        ("a_", "_b"),
        ("a", "__b"),
        ("Public", "My Table"),
        ("public", "my table"),
        ("public", 'we"ird`x'),
    ]
    names = [table_name(s, t) for s, t in pairs]
    assert len(set(names)) == len(names), names
    assert all(n == n.lower() and all(ch.isalnum() or ch == "_" for ch in n) for n in names)
    assert table_name("public", "café").startswith("public__café")
    assert table_name("Public", "My Table") == table_name("Public", "My Table")
    assert table_name("Public", "My Table").startswith("public__my_table_")


def test_table_topics_follow_the_delimiter_and_the_transaction_topic() -> None:
    assert is_table_topic("inv.public.orders", "inv", ".", "transaction")
    assert not is_table_topic("inv.transaction", "inv", ".", "transaction")
    assert not is_table_topic("inv.message", "inv", ".", "transaction")
    assert not is_table_topic("__debezium-heartbeat.inv", "inv", ".", "transaction")
    assert not is_table_topic("inventory.public.orders", "inv", ".", "transaction")
    assert is_table_topic("inv_public_orders", "inv", "_", "tx_meta")
    assert not is_table_topic("inv_tx_meta", "inv", "_", "tx_meta")
    assert is_table_topic("inv_transaction", "inv", "_", "tx_meta")  # only the configured name is internal
    assert not is_table_topic("inv.public.orders", "inv", "_", "tx_meta")
    assert names_from_topic("inv_public_orders", "inv", "_") == ("public", "orders")


def test_sql_quoting_and_statements() -> None:
    assert sql_quote("a`b.c") == "`a``b.c`"
    assert sql_string("it's a \\ path") == "'it\\'s a \\\\ path'"
    assert sql_literal("o'k", "string") == "CAST('o\\'k' AS string)"
    hard = sql.merge_keyed("lake.ns.t", "v", ["id", "va`l"], ["id"], [], soft=False)
    assert "ON t.`id` <=> s.`id` WHEN MATCHED AND s._walflow_op = 'd'" in hard and "THEN DELETE" in hard
    assert "t.`va``l` = CASE WHEN array_contains(s._walflow_toast, 'va`l') THEN t.`va``l` ELSE s.`va``l` END" in hard
    assert f"t.{C.OVERFLOW} = CASE WHEN size(s.{C.TOAST}) = 0" in hard
    soft = sql.merge_keyed("lake.ns.t", "v", ["id"], ["id"], ["id"], soft=True)
    assert "DELETE" not in soft and f"t.{C.DELETED} = true" in soft
    assert f"element_at(t.{C.OVERFLOW}, 'id') <=> element_at(s.{C.OVERFLOW}, 'id')" in soft
    assert (
        sql.truncate("x", "0/1", None, 5, soft=False)
        == f"DELETE FROM x WHERE ({C.POSITION} IS NULL OR {C.POSITION} < '0/1')"
    )
    # without TOAST placeholders in the batch the statement reads none of the target's own columns
    lean = sql.merge_keyed(
        "lake.ns.t", "v", ["id", "v"], ["id"], [], soft=False, toast=False, prefilter="t.`id` IN (1, 2)"
    )
    assert (
        "t.`v` = s.`v`" in lean and "array_contains" not in lean and "t._walflow_overflow = s._walflow_overflow" in lean
    )
    assert "ON t.`id` <=> s.`id` AND t.`id` IN (1, 2) WHEN" in lean
    assert sql.insert_latest("x", "v", ["id"], soft=False).endswith("FROM v s WHERE s._walflow_op <> 'd'")


def test_merge_prefilter_lists_keys_or_their_hashes() -> None:
    assert sql.prefilter_kind(["bigint"]) == "values" and sql.prefilter_kind(["int", "string"]) == "hash"
    assert sql.prefilter_kind(["decimal(12,2)", "timestamp"]) == "hash"
    assert sql.prefilter_kind(["double"]) is None and sql.prefilter_kind(["array<int>"]) is None  # -0.0/NaN hash apart
    assert sql.target_prefilter(["id"], ["bigint"], [3, 1, 3]) == "(t.`id` IN (1, 3))"
    # a null key matches a null key (<=>): IN alone would drop those rows
    assert sql.target_prefilter(["id"], ["int"], [None, 2]) == "(t.`id` IN (2) OR t.`id` IS NULL)"
    assert sql.target_prefilter(["id"], ["int"], [None]) == "(t.`id` IS NULL)"
    assert (
        sql.target_prefilter(["a", "b`"], ["int", "string"], [7, -7])
        == "xxhash64(CAST(t.`a` AS int), CAST(t.`b``` AS string)) IN (-7, 7)"
    )
    assert sql.target_prefilter(["id"], ["bigint"], []) == "false"
    with pytest.raises(ValueError):
        sql.target_prefilter(["f"], ["double"], [1.0])


def test_source_position_orders_by_commit() -> None:
    def event(previous: str | None, lsn: int, total: int | None = None) -> tuple[int, int, int]:
        sequence = f'["{previous}","{lsn}"]' if previous else f'[null,"{lsn}"]'
        return source_position(
            {"lsn": lsn, "sequence": sequence, "ts_us": 1, "ts_ns": 2}, {"total_order": total} if total else None
        )

    # two transactions: the second committed after the first although one of its changes is older in the WAL
    first = [event("100", 120), event("100", 130)]
    second = [event("150", 110), event("150", 160)]
    assert sorted(first + second) == first + second
    # a snapshot row at the slot's consistent point sorts before the first streamed change of that position
    snapshot = source_position({"lsn": 100, "sequence": None}, None)
    assert snapshot < event("100", 90) < event("100", 120)
    # a snapshot row's own sequence, [null, LSN], is not read: it still sorts before the changes of its position
    assert source_position({"lsn": 100, "sequence": '[null,"100"]'}, None, "r") == snapshot
    # an incremental snapshot's rows have no LSN: their sequence is their position
    assert source_position({"lsn": None, "sequence": '["120","140"]'}, None, "r") == (140, 140, 0)
    # an incremental snapshot's rows sit at their high watermark: after what committed before, before what follows
    watermark = source_position({"lsn": 140, "sequence": None}, None)
    assert event("100", 130) < watermark < event("145", 120)
    assert format_position((0x1A, 0x2B, 3)) == "000000000000001A/000000000000002B"
    assert event("100", 120, 2) > event("100", 120, 1)
    # a sequence as a JSON list rather than its text, and missing fields, still give a position
    assert source_position({"lsn": 5, "sequence": ["1", "5"]}, None) == (5, 5, 0) and source_position({}, None) == (
        0,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("rows", "by_arrow"),
    [
        # the common forms, computed by Arrow: streamed changes, snapshot rows, a total order, a row that is no event
        (
            [
                ("u", 120, '["100","120"]', None),
                ("c", 90, '["150","90"]', 3),
                ("r", 100, None, None),
                ("c", 7, "", None),
                (None, None, None, None),
            ],
            True,
        ),
        ([("u", None, '["1","2"]', None), ("d", 5, None, 0), ("r", 2**59, f'["{2**59}","1"]', None)], True),
        # other forms, one by one through position(): JSON lists, nulls in the sequence, text orders, odd digits,
        # LSNs beyond 18 digits, a text LSN
        ([("u", 5, ["1", "5"], None), ("u", 6, '["4","6"]', None)], False),
        ([("u", 5, '[null,"5"]', None), ("c", 6, '["4","6"]', "2")], False),
        (
            [("u", 5, '["\u00b2","5"]', None), ("u", 6, "[]", None), ("u", 7, '["1234567890123456789","7"]', None)],
            False,
        ),
        ([("u", "12", '["4","6"]', None), (None, None, None, None)], False),
        ([], True),
    ],
)
def test_positions_of_a_batch_equal_each_events_position(
    rows: list[tuple[Any, Any, Any, Any]], by_arrow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder's batch form of :func:`position` (Arrow for the common forms, one by one for the others) gives
    exactly what the function gives each event."""
    from walflow.lake import decoder
    from walflow.lake.positions import position

    original = decoder._positions_one_by_one
    one_by_one: list[Any] = []

    def counted(*columns: Any) -> Any:
        one_by_one.append(columns)
        return original(*columns)

    monkeypatch.setattr(decoder, "_positions_one_by_one", counted)
    ops, lsns, sequences, orders = (list(column) for column in zip(*rows)) if rows else ([], [], [], [])
    arrays = decoder.position_arrays(pc.is_valid(pa.array(ops, pa.string())), lsns, sequences, orders)
    assert bool(one_by_one) is not by_arrow
    got = list(zip(*(array.to_pylist() for array in arrays)))
    assert got == [
        position(lsn, sequence, order) if op is not None else (None, None, None) for op, lsn, sequence, order in rows
    ]


def test_schemaless_typing() -> None:
    assert [json_kind(v) for v in (1, 1.5, True, "x", {"a": 1}, [1], None)] == [
        "long",
        "double",
        "boolean",
        "string",
        "json",
        "json",
        None,
    ]
    assert inferred_type({"long"}) == "bigint" and inferred_type({"long", "double"}) == "double"
    assert (
        inferred_type({"boolean"}) == "boolean"
        and inferred_type({"json"}) == "string"
        and inferred_type(set()) == "string"
    )
    assert loose_kinds_fit("bigint", {"long"}) and not loose_kinds_fit("bigint", {"string"})
    assert loose_converter("string")({"a": [1, 2]}) == '{"a":[1,2]}'
    assert loose_converter("decimal(10,2)")(unscaled(1234)) == Decimal("12.34")
    assert loose_converter("decimal(10,2)")(12.5) == Decimal("12.50")
    assert loose_converter("timestamp_ntz")(1529507596945104) == 1529507596945104
    assert loose_converter("timestamp_ntz")("2018-06-20T15:13:16.945104") == 1529507596945104
    assert loose_converter("date")(1) == 1 and loose_converter("date")("1970-01-03") == 2
    # text dates of any year width or sign, with or without a time part
    assert loose_converter("date")("-0043-03-15") == -735160 and loose_converter("date")("12024-01-01") == 3672148
    assert loose_converter("date")("2024-01-01T10:00:00Z") == loose_converter("date")("2024-01-01 23:00:00") == 19723
    with pytest.raises(TypeError):
        loose_converter("bigint")("many")
    shape = RowShape(loose_schema([loose_field("n", "bigint"), loose_field("doc", "string")]))
    assert shape.types == {"n": "bigint", "doc": "string"}
    assert shape.convert({"n": 3, "doc": {"k": 1}}, ())[0] == [3, '{"k":1}']
    with pytest.raises(LakeError, match=r"schemas\.enable"):
        loose_converter("struct<a:int>")


def test_settings_are_derived_once_and_travel_as_one_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    from walflow.config.connector import parse_config

    monkeypatch.setenv("WALFLOW_WAREHOUSE", "/tmp/wh")
    config = parse_config({"name": "c1", "topic.prefix": "inv", "topic.delimiter": "_", "topic.transaction": "tx"})
    settings = LakeSettings.from_config(config)
    assert (settings.namespace, settings.warehouse, settings.catalog, settings.max_records) == (
        "inv",
        "/tmp/wh",
        "lake",
        5_000_000,
    )
    assert settings.transaction_topic == "inv_tx" and settings.ident("public__t") == "`lake`.`inv`.`public__t`"
    custom = LakeSettings.from_config(
        parse_config(
            {
                "name": "c2",
                "topic.prefix": "inv",
                "walflow.lake.namespace": "n{{x}}",
                "walflow.lake.warehouse": "/w",
                "walflow.lake.accept.records": ["inv.public.t:0:17"],
            }
        )
    )
    argument = custom.argument()
    assert LakeSettings.from_argument(argument) == custom
    # read by Airflow's templating as it is: no Jinja tag, whatever a setting holds (a raw block could be closed)
    odd = LakeSettings.from_config(config, namespace="a{%endraw%}{{ 7*7 }}{#b")
    import jinja2

    assert jinja2.Environment().from_string(odd.argument()).render() == odd.argument()
    assert LakeSettings.from_argument(odd.argument()).namespace == "a{%endraw%}{{ 7*7 }}{#b"
    assert (
        LakeSettings.from_argument("{% raw %}" + custom.model_dump_json() + "{% endraw %}") == custom
    )  # an older walflow's
    # rendered by Airflow's Jinja, the argument is the JSON itself
    import jinja2

    assert LakeSettings.model_validate_json(jinja2.Template(argument).render()) == custom
    assert custom.accepted("inv.public.t") == frozenset({(0, 17)}) and custom.accepted("other") == frozenset()
    with pytest.raises(ConfigError, match="partition"):
        LakeSettings.from_config(
            parse_config({"name": "c3", "topic.prefix": "inv", "walflow.lake.accept.records": ["inv.public.t:x"]})
        )


def test_hooks_are_loaded_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(load_hooks("")) is ApplyHooks
    monkeypatch.setenv("WALFLOW_APPLY_HOOKS", "tests.unit.test_lake:Recorder")
    hooks = load_hooks()
    assert type(hooks).__name__ == "Recorder"  # loaded by name (pytest may hold this module under another one)
    hooks.reached(POINTS[0], "t")
    assert hooks.seen == [("after_read", "t")]  # type: ignore[attr-defined]


class Recorder(ApplyHooks):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def reached(self, point: str, table: str) -> None:
        self.seen.append((point, table))


def test_the_executors_need_only_the_shipped_modules(tmp_path: Any) -> None:
    """On a cluster the executors get walflow only from the zip the driver ships (walflow.lake.job.ship_walflow):
    the decoder must import from it alone, without Spark's driver side, pydantic or the rest of walflow."""
    import subprocess
    import sys

    from walflow.lake.job import executor_archive

    archive = executor_archive(tmp_path)
    code = (
        "import sys; sys.path = [p for p in sys.path if 'plugins' not in p]; sys.path.insert(0, sys.argv[1]); "
        "import walflow.lake.decoder as d, walflow; assert walflow.__file__.startswith(sys.argv[1]), walflow.__file__; "
        "assert 'pydantic' not in sys.modules and 'pyspark' not in sys.modules and 'walflow.config' not in sys.modules,"
        " sorted(sys.modules)"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", code, str(archive)], capture_output=True, text=True, env=env, cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_partition_must_still_hold_what_the_lake_has_to_read() -> None:
    """The checks before a read: the last applied record, when still there, must be the same one; a partition
    shorter than the lake's offsets, or whose records the lake had not read were deleted, stops the job with the
    cause (a read would otherwise start at the first record still held and skip the rest without a word)."""
    from walflow.errors import RecordsDeletedError, TopicMismatchError
    from walflow.lake.positions import check_last_applied, check_offsets

    assert check_last_applied("t", 0, 41, "abc", "abc", "lake.ns.t", "inv") is None
    # retention or compaction removed the record: nothing the lake needs is lost by that
    warning = check_last_applied("t", 0, 41, "", "abc", "lake.ns.t", "inv")
    assert warning is not None and "offset 41" in warning and "retention or compaction" in warning
    with pytest.raises(
        TopicMismatchError,
        match=r"offset 41 is not the one .* \(fingerprint def, expected abc\).*walflow reset inv --lake",
    ):
        check_last_applied("t", 0, 41, "def", "abc", "lake.ns.t", "inv")

    check_offsets("t", 0, start=42, applied=42, low=0, end=100, table="lake.ns.t", connector="inv")
    check_offsets(
        "t", 0, start=42, applied=42, low=42, end=42, table="lake.ns.t", connector="inv"
    )  # all applied, then expired
    with pytest.raises(TopicMismatchError, match="ends at offset 10, below the offset 42"):
        check_offsets("t", 0, start=42, applied=42, low=0, end=10, table="lake.ns.t", connector="inv")
    with pytest.raises(
        RecordsDeletedError, match=r"now starts at offset 50, .* up to offset 42: records 42 to 49 were deleted"
    ) as err:
        check_offsets("t", 0, start=42, applied=42, low=50, end=100, table="lake.ns.t", connector="inv")
    assert "walflow reset inv --lake" in str(err.value) and not err.value.retryable
    with pytest.raises(
        RecordsDeletedError, match="records 0 to 9 were deleted"
    ):  # a first read of a topic that lost its start
        check_offsets("t", 0, start=0, applied=0, low=10, end=20, table="lake.ns.t", connector="inv")


def test_array_and_map_defaults_are_written_as_literals() -> None:
    """A column added with an array or hstore (map) default fills the lake's existing rows like any other default."""
    from walflow.lake.types import type_arguments

    assert sql_literal([], "array<string>") == "CAST(array() AS array<string>)"
    assert (
        sql_literal(["a", "b"], "array<string>")
        == "CAST(array(CAST('a' AS string), CAST('b' AS string)) AS array<string>)"
    )
    assert (
        sql_literal([[1], []], "array<array<int>>")
        == "CAST(array(CAST(array(CAST('1' AS int)) AS array<int>), CAST(array() AS array<int>)) AS array<array<int>>)"
    )
    assert (
        sql_literal({"k": "v"}, "map<string,string>")
        == "CAST(map(CAST('k' AS string), CAST('v' AS string)) AS map<string,string>)"
    )
    assert sql_literal({}, "map<string,string>") == "CAST(map() AS map<string,string>)"
    assert (
        sql_literal([("k", "v")], "map<string,string>")
        == "CAST(map(CAST('k' AS string), CAST('v' AS string)) AS map<string,string>)"
    )
    assert type_arguments("map<string,decimal(10,2)>") == ["string", "decimal(10,2)"]
    assert type_arguments("array<map<string,array<int>>>") == ["map<string,array<int>>"]
    with pytest.raises(LakeError, match=r"cannot write a default value of type dict \(struct<a:int>\): \{'a': 1\}"):
        sql_literal({"a": 1}, "struct<a:int>")


def test_an_unforeseen_failure_is_named_in_one_line() -> None:
    """What the job's last line says about a failure walflow does not foresee: the Java exception behind a Py4J
    error, the exception an executor's Python worker raised, else the first line of the message."""
    from walflow.lake.job import describe_failure

    class JavaException:
        def toString(self) -> str:
            return (
                "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata\n\tat org.apache..."
            )

    class Py4JJavaError(Exception):
        java_exception = JavaException()

    assert describe_failure(Py4JJavaError("An error occurred while calling o123.sql.\n")) == (
        "Py4JJavaError: org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata"
    )

    class PythonException(Exception):
        pass

    worker = PythonException(
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "reader.py", line 187, in read_slice\n'
        "walflow.errors.LakeError: t[0]: nothing to read before offset 9 for 60 s\n"
    )
    assert (
        describe_failure(worker)
        == "PythonException: walflow.errors.LakeError: t[0]: nothing to read before offset 9 for 60 s"
    )
    assert describe_failure(OSError("disk full\nmore")) == "OSError: disk full"
    assert describe_failure(RuntimeError()) == "RuntimeError"


def test_only_failures_a_rerun_may_pass_are_left_to_the_retries() -> None:
    """Issue 45: a Java exception that says a statement does not fit the catalog (a missing namespace or table, an
    analysis error) is met again by every run, so the task is not retried and its message does not say retries may
    help; a commit conflict, a lost executor or a storage error may pass."""
    from walflow.lake.job import failure_is_transient

    def java(text: str) -> Exception:
        class Failure(Exception):
            class java_exception:
                @staticmethod
                def toString() -> str:
                    return text

        return Failure("An error occurred while calling o54.sql.")

    assert not failure_is_transient(
        java("org.apache.iceberg.exceptions.NoSuchNamespaceException: Namespace does not exist: x")
    )
    assert not failure_is_transient(java("org.apache.spark.sql.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] ..."))
    assert failure_is_transient(
        java("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata")
    )
    assert failure_is_transient(
        java("org.apache.spark.SparkException: Job aborted due to stage failure: executor lost")
    )
    assert failure_is_transient(OSError("disk full"))


def test_every_form_of_the_toast_placeholder_is_recognised_and_values_are_not() -> None:
    """Issue 45: Debezium gives an unchanged TOASTed value a placeholder of its type's form: the text, its bytes in
    base64, one text or UUID element, the bytes as numbers (int4[], int8[], date[]), a one-entry map or JSON object
    (hstore). Each is recognised in its column, and values that only resemble one are kept."""
    forms = placeholder_values(PLACEHOLDER)
    numbers = list(PLACEHOLDER.encode())
    uuid_text = forms[2]
    schema = {
        "fields": [
            {"field": "before"},
            {
                "field": "after",
                "fields": [
                    {"type": "array", "items": {"type": "int32"}, "field": "ints"},
                    {"type": "array", "items": {"type": "int64"}, "field": "longs"},
                    {"type": "array", "items": {"type": "int32", "name": "io.debezium.time.Date"}, "field": "days"},
                    {"type": "array", "items": {"type": "string", "name": "io.debezium.data.Uuid"}, "field": "ids"},
                    {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}, "field": "attrs"},
                    {"type": "string", "name": "io.debezium.data.Json", "field": "attrs_json"},
                    {"type": "bytes", "field": "blob"},
                    {"type": "array", "items": {"type": "double"}, "field": "floats"},
                ],
            },
        ]
    }
    shape = RowShape(schema)
    placeholders = {
        "ints": numbers,
        "longs": numbers,
        "days": numbers,
        "ids": [uuid_text],
        "attrs": {PLACEHOLDER: PLACEHOLDER},
        "attrs_json": forms[3],
        "blob": forms[1],
        "floats": None,
    }
    values, toasted = shape.convert(placeholders, forms)
    assert toasted == ["ints", "longs", "days", "ids", "attrs", "attrs_json", "blob"] and values == [None] * 8
    assert shape.compiled()(placeholders, forms) == (values, toasted)
    real = {
        "ints": numbers[:-1],
        "longs": [*numbers, 1],
        "days": [1, 2],
        "ids": [uuid_text, uuid_text],
        "attrs": {PLACEHOLDER: "x"},
        "attrs_json": '{"a": "b"}',
        "blob": "AAEC",
        "floats": [1.5],
    }
    values, toasted = shape.convert(real, forms)
    assert toasted == [] and values[0] == numbers[:-1] and values[3] == [uuid_text, uuid_text]
    assert shape.compiled()(real, forms) == (values, toasted)


def test_a_run_fenced_on_every_topic_fails_with_the_fence_error_and_a_mixed_one_does_not() -> None:
    from walflow.errors import LakeError, LakeFenceError, LakeSchemaError
    from walflow.lake.apply import LakeJob

    fenced = LakeJob._failed(
        {"t.a": LakeFenceError("branch removed"), "t.b": LakeFenceError("committed to")}, [{"topic": "t.c"}]
    )
    assert isinstance(fenced, LakeFenceError) and fenced.retryable
    assert "topic t.a: branch removed" in str(fenced) and fenced.results == [{"topic": "t.c"}]  # type: ignore[attr-defined]
    mixed = LakeJob._failed({"t.a": LakeFenceError("branch removed"), "t.b": LakeSchemaError("type")}, [])
    assert type(mixed) is LakeError and not mixed.retryable
