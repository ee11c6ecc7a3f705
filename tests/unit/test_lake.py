"""The lake's type mapping and value conversion (no Spark needed)."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal

from walflow.lake import RowShape, check_evolution, format_offsets, parse_offsets, placeholder_values, spark_type, table_name


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
    add, problems = check_evolution({"id": "int", "v": "string"}, {"id": "bigint", "v": "string", "w": "int"})
    assert add == {"w": "int"} and problems == []
    _, problems = check_evolution({"v": "int"}, {"v": "string"})
    assert problems == ["column 'v' changes from int to string"]
    _, problems = check_evolution({"p": "decimal(10,2)"}, {"p": "decimal(12,2)"})
    assert problems == []


def test_offsets_round_trip_and_names() -> None:
    offsets = {"a.b.c": {0: 5, 1: 7}}
    assert parse_offsets(format_offsets(offsets)) == offsets
    assert table_name("Public", "My Table") == "public__my_table"
