"""Records without a schema part (``value.converter.schemas.enable: false``): typing columns from JSON values.

Without the schema part nothing says a string is base64 or an integer is microseconds, so the lake table's type
decides how a value is read, and a column the table does not have yet takes the type its JSON values suggest
(:func:`inferred_type`). docs/lake.md, "Records without a schema part",, lists the rules.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from walflow.errors import LakeError
from walflow.lake.values import parse_zoned, scaled, special_float
from walflow.records.decimals import EXACT

#: The semantic name of a schemaless column's field: ``parameters.spark`` is the lake type, and the converter
#: accepts the JSON forms a value of that type can take.
LOOSE = "walflow.lake.Loose"


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
    """The lake type of a new schemaless column from the JSON kinds its values took."""
    if kinds == {"long"}:
        return "bigint"
    if kinds and kinds <= {"long", "double"}:
        return "double"
    if kinds == {"boolean"}:
        return "boolean"
    return "string"


#: JSON kinds each lake type can be read from when the records carry no schema part.
_LOOSE_KINDS = {
    "tinyint": {"long"},
    "smallint": {"long"},
    "int": {"long"},
    "bigint": {"long"},
    "float": {"long", "double", "string"},
    "double": {"long", "double", "string"},
    "boolean": {"boolean"},
    "string": {"long", "double", "boolean", "string", "json"},
    "date": {"long", "string"},
    "timestamp": {"long", "string"},
    "timestamp_ntz": {"long", "string"},
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


def loose_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """A Debezium-shaped value schema around schemaless fields."""
    return {"type": "struct", "fields": [{"field": "before"}, {"field": "after", "type": "struct", "fields": fields}]}


def _strict_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected a JSON integer, got {type(v).__name__}")
    return v


def _strict_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected a JSON boolean, got {type(v).__name__}")
    return v


def _loose_decimal(scale: int) -> Callable[[Any], Any]:
    quantum = Decimal(1).scaleb(-scale)

    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return Decimal(v).quantize(quantum, context=EXACT)
            except ArithmeticError:
                # decimal.handling.mode=precise: the unscaled value as base64 big-endian bytes
                return scaled(int.from_bytes(base64.b64decode(v), "big", signed=True), scale)
        return Decimal(str(v)).quantize(quantum, context=EXACT)

    return convert


def _loose_micros(v: Any) -> int:
    # text in ISO form (a zone, if any, moves it to UTC), else microseconds: Debezium's default precision
    return parse_zoned(v) if isinstance(v, str) else _strict_int(v)


def _loose_days(v: Any) -> int:
    # the date part of ISO text, whatever the year's width or sign (-0043-03-15, 12024-01-01), else days
    return (
        parse_zoned(v.partition("T")[0].partition(" ")[0]) // 86_400_000_000 if isinstance(v, str) else _strict_int(v)
    )


def _as_text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


#: converters that give a value of exactly this type back unchanged: the generated row converter
#: (:meth:`walflow.lake.types.RowShape.compiled`) tests the type inline and calls them only for other values
KEEPS: dict[Any, type] = {_strict_int: int, _strict_bool: bool, _as_text: str}


def loose_converter(spark_type_name: str) -> Callable[[Any], Any]:
    """A function from a schemaless JSON value to the lake value of a column of ``spark_type_name``.

    Decimals take numbers, decimal text or the base64 of ``decimal.handling.mode=precise``; dates take days or
    ISO text; timestamps take microseconds (Debezium's default precision) or ISO text; strings take JSON objects
    and arrays as their JSON text. A value of another JSON kind raises (the job reports it with its offset).
    """
    t = spark_type_name
    if t in ("tinyint", "smallint", "int", "bigint"):
        return _strict_int
    if t in ("float", "double"):
        return lambda v: float(special_float(v))
    if t == "boolean":
        return _strict_bool
    if t == "string":
        return _as_text
    if t.startswith("decimal("):
        return _loose_decimal(int(t[8:-1].split(",")[1]))
    if t == "date":
        return _loose_days
    if t in ("timestamp_ntz", "timestamp"):
        return _loose_micros
    if t == "binary":
        return base64.b64decode
    if t.startswith("array<") and t.endswith(">"):
        inner = loose_converter(t[6:-1])
        return lambda v: [None if x is None else inner(x) for x in v]
    if t.startswith("map<"):
        return lambda v: [
            (str(k), x if isinstance(x, str) or x is None else orjson.dumps(x).decode()) for k, x in v.items()
        ]
    raise LakeError(
        f"a column of lake type {t} cannot be read from records without a schema part: set "
        "value.converter.schemas.enable: true for this connector"
    )
