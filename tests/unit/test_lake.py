"""The lake's type mapping and value conversion (no Spark needed)."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal

import pytest

from walflow.lake import (
    LakeError,
    RowShape,
    check_evolution,
    format_offsets,
    format_position,
    inferred_type,
    json_kind,
    loose_converter,
    loose_field,
    loose_kinds_fit,
    parse_offsets,
    placeholder_values,
    source_position,
    spark_type,
    sql_literal,
    sql_quote,
    sql_string,
    table_name,
)


def f(type_: str, name: str | None = None, **extra: object) -> dict:
    out: dict = {"type": type_, "optional": True, "field": "x"}
    if name:
        out["name"] = name
    out.update(extra)
    return out


def test_spark_types() -> None:
    assert spark_type(f("int16")) == "int"
    assert spark_type(f("int64")) == "bigint"
    assert spark_type(f("bytes", "org.apache.kafka.connect.data.Decimal", parameters={"scale": "2", "connect.decimal.precision": "10"})) == "decimal(10,2)"
    assert spark_type(f("bytes", "org.apache.kafka.connect.data.Decimal", parameters={"scale": "2"})) == "decimal(38,2)"
    assert spark_type(f("struct", "io.debezium.data.VariableScaleDecimal", fields=[])) == "string"
    assert spark_type(f("int64", "io.debezium.time.MicroTimestamp")) == "timestamp_ntz"
    assert spark_type(f("string", "io.debezium.time.ZonedTimestamp")) == "timestamp"
    assert spark_type(f("int32", "io.debezium.time.Date")) == "date"
    assert spark_type(f("array", items={"type": "int32"})) == "array<int>"
    assert spark_type(f("string", "io.debezium.data.Json")) == "string"


def test_row_conversion_and_toast() -> None:
    schema = {
        "fields": [
            {"field": "before"},
            {
                "field": "after",
                "fields": [
                    {"type": "int32", "field": "id"},
                    {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}, "field": "price"},
                    {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "ts"},
                    {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "tz"},
                    {"type": "string", "field": "doc"},
                    {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": [], "field": "v"},
                ],
            },
        ]
    }
    shape = RowShape(schema)
    row = {
        "id": 1,
        "price": base64.b64encode((1234).to_bytes(2, "big")).decode(),
        "ts": 1529507596945104,
        "tz": "2018-06-20T13:13:16.945104Z",
        "doc": "__debezium_unavailable_value",
        "v": {"scale": 3, "value": base64.b64encode((-1500).to_bytes(2, "big", signed=True)).decode()},
    }
    values, toasted = shape.convert(row, placeholder_values("__debezium_unavailable_value"))
    assert values[0] == 1 and values[1] == Decimal("12.34")
    assert values[2] == dt.datetime(2018, 6, 20, 15, 13, 16, 945104)
    assert values[3] == dt.datetime(2018, 6, 20, 13, 13, 16, 945104, tzinfo=dt.timezone.utc)
    assert values[4] is None and toasted == ["doc"]
    assert values[5] == "-1.500"


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


def test_offsets_round_trip_and_names() -> None:
    offsets = {"a.b.c": {0: 5, 1: 7}}
    assert parse_offsets(format_offsets(offsets)) == offsets
    assert table_name("public", "orders") == "public__orders"
    assert table_name("inventory", "order_lines") == "inventory__order_lines"


def test_table_names_never_collide() -> None:
    pairs = [
        ("public", "a.b"), ("public", "a_b"), ("public", "café"), ("public", "cafè"), ("public", "Orders"), ("public", "orders"),
        ("a", "b__c"), ("a__b", "c"), ("a_", "_b"), ("a", "__b"), ("Public", "My Table"), ("public", "my table"), ("public", 'we"ird`x'),
    ]
    names = [table_name(s, t) for s, t in pairs]
    assert len(set(names)) == len(names), names
    assert all(n == n.lower() and all(ch.isalnum() or ch == "_" for ch in n) for n in names)
    # letters of any script stay readable, and the names are stable
    assert table_name("public", "café").startswith("public__café")
    assert table_name("Public", "My Table") == table_name("Public", "My Table")
    assert table_name("Public", "My Table").startswith("public__my_table_")


def test_sql_quoting() -> None:
    assert sql_quote("a`b.c") == "`a``b.c`"
    assert sql_string("it's a \\ path") == "'it\\'s a \\\\ path'"
    assert sql_literal("o'k", "string") == "CAST('o\\'k' AS string)"


def test_source_position_orders_by_commit() -> None:
    def event(previous: str | None, lsn: int, total: int | None = None) -> tuple[int, int, int]:
        sequence = f'["{previous}","{lsn}"]' if previous else f'[null,"{lsn}"]'
        return source_position({"lsn": lsn, "sequence": sequence}, {"total_order": total} if total else None)

    # two transactions: the second committed after the first although one of its changes is older in the WAL
    first = [event("100", 120), event("100", 130)]
    second = [event("150", 110), event("150", 160)]
    assert sorted(first + second) == first + second
    # a snapshot row at the slot's consistent point sorts before the first streamed change of that position
    snapshot = source_position({"lsn": 100, "sequence": None}, None)
    assert snapshot < event("100", 90) < event("100", 120)
    # an incremental snapshot's rows sit at their high watermark: after what committed before, before what follows
    watermark = source_position({"lsn": 140, "sequence": None}, None)
    assert event("100", 130) < watermark < event("145", 120)
    assert format_position((0x1A, 0x2B, 3)) == "000000000000001A/000000000000002B"
    assert event("100", 120, 2) > event("100", 120, 1)


def test_schemaless_typing() -> None:
    assert [json_kind(v) for v in (1, 1.5, True, "x", {"a": 1}, [1], None)] == ["long", "double", "boolean", "string", "json", "json", None]
    assert inferred_type({"long"}) == "bigint" and inferred_type({"long", "double"}) == "double"
    assert inferred_type({"boolean"}) == "boolean" and inferred_type({"json"}) == "string" and inferred_type(set()) == "string"
    assert loose_kinds_fit("bigint", {"long"}) and not loose_kinds_fit("bigint", {"string"})
    assert loose_converter("string")({"a": [1, 2]}) == '{"a":[1,2]}'
    price = base64.b64encode((1234).to_bytes(2, "big")).decode()
    assert loose_converter("decimal(10,2)")(price) == Decimal("12.34")
    assert loose_converter("decimal(10,2)")(12.5) == Decimal("12.50")
    assert loose_converter("timestamp_ntz")(1529507596945104) == dt.datetime(2018, 6, 20, 15, 13, 16, 945104)
    assert loose_converter("date")(1) == dt.date(1970, 1, 2)
    shape = RowShape({"fields": [{"field": "before"}, {"field": "after", "fields": [loose_field("n", "bigint"), loose_field("doc", "string")]}]})
    assert shape.types == {"n": "bigint", "doc": "string"}
    assert shape.convert({"n": 3, "doc": {"k": 1}}, ())[0] == [3, '{"k":1}']
    with pytest.raises(LakeError, match="schemas.enable"):
        loose_converter("struct<a:int>")
