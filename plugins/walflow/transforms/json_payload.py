"""The outbox router's ``table.expand.json.payload``: a JSON text payload as a structure with a schema inferred from
it, as Debezium's ``JsonSchemaData`` infers it.

* An object is an optional struct named by its path (``payload``, ``payload.items``), its fields in the text's order;
  a field whose value is null (unless ``table.json.payload.null.behavior`` is ``optional_bytes``) or an empty array
  has no schema and is left out.
* A string, a boolean: optional string, boolean. A whole number is ``int32`` when it fits, else ``int64``, else (a
  larger one) ``float64``; a number with a fraction or an exponent is ``float64``.
* An array takes its first non-null element's schema; its non-null elements must all be of one JSON kind (and numbers
  of one schema); an array of objects takes the union of its objects' fields, first seen first.

A payload that does not parse, or whose schema cannot be inferred (an array of mixed kinds), stays as it was:
:class:`ExpansionFailed` says why, and the router logs it as Debezium does. A payload whose schema was inferred but
that Kafka Connect cannot put into it (a top-level array, a whole number beyond ``int64``) stops Debezium's connector
(``DataException``): :class:`ExpansionRefused`, which stops the batch, naming the record.
"""

from __future__ import annotations

import json
from typing import Any

from walflow.transforms.record import Schema

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class ExpansionFailed(ValueError):
    """The payload stays a string (Debezium: "JSON expansion failed")."""


class ExpansionRefused(ValueError):
    """The payload's values do not fit the schema inferred from it, which stops Debezium's connector."""


def expand(text: str, key: str, null_as_bytes: bool = False) -> tuple[Schema, dict[str, Any]]:
    """The schema and struct value of the JSON object ``text`` (``key`` names the top-level struct).

    :raises ExpansionFailed: when ``text`` is not a JSON object Debezium would expand.
    """
    if not text.startswith(("{", "[")):
        raise ExpansionFailed(f"Unable to parse payload starting with {text[:1]!r}")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ExpansionFailed(str(exc)) from None
    inference = _Inference(null_as_bytes)
    schema = inference.schema(key, document)
    if not isinstance(document, dict) or schema is None:
        raise ExpansionRefused("the payload is not a JSON object, and only an object fills the payload's struct")
    try:
        return schema, inference.struct(document, schema)
    except ExpansionFailed as exc:
        raise ExpansionRefused(str(exc)) from None


class _Inference:
    def __init__(self, null_as_bytes: bool) -> None:
        self.null_as_bytes = null_as_bytes

    def schema(self, key: str | None, node: Any) -> Schema | None:
        if isinstance(node, str):
            return {"type": "string", "optional": True}
        if isinstance(node, bool):
            return {"type": "boolean", "optional": True}
        if isinstance(node, int):
            return {"type": _int_type(node), "optional": True}
        if isinstance(node, float):
            return {"type": "double", "optional": True}
        if isinstance(node, list):
            if not node:
                return None
            return {"type": "array", "items": self.element_schema(key, node), "optional": True}
        if isinstance(node, dict):
            fields: list[Schema] = []
            names: set[str] = set()
            for name, value in node.items():
                field_key = name if not key else f"{key}.{name}"
                field = self.schema(field_key, value)
                if field is not None and name not in names:
                    names.add(name)
                    fields.append({**field, "field": name})
            out: Schema = {"type": "struct", "fields": fields, "optional": True}
            if key:
                out["name"] = key
            return out
        if node is None:
            return {"type": "bytes", "optional": True} if self.null_as_bytes else None
        raise ExpansionFailed(f"unexpected JSON value {node!r}")

    def element_schema(self, key: str | None, array: list[Any]) -> Schema:
        sample = self.first_element(array)
        if isinstance(sample, dict):
            merged: Schema | None = None
            seen: list[Schema] = []
            for element in array:
                if isinstance(element, dict):
                    element_schema = self.schema(key, element)
                    assert element_schema is not None
                    if element_schema not in seen:
                        seen.append(element_schema)
            for element_schema in seen:
                merged = _merge(merged, element_schema)
            assert merged is not None
            return merged
        schema = self.schema(None, sample)
        if schema is None:
            raise ExpansionFailed(f"Array {array!r} has unrecognized member schema.")
        return schema

    def first_element(self, array: list[Any]) -> Any:
        first: Any = None
        kind: str | None = None
        number: Schema | None = None
        for element in array:
            if element is None:
                continue
            if first is None:
                first, kind = element, _kind(element)
            if _kind(element) != kind:
                raise ExpansionFailed(f"Field is not a homogenous array ({first!r} x {element!r}).")
            if kind == "number":
                number = number or self.schema(None, first)
                if self.schema(None, element) != number:
                    raise ExpansionFailed(f"Field is not a homogenous array ({first!r} x {element!r}).")
        return first

    def struct(self, document: dict[str, Any], schema: Schema) -> dict[str, Any]:
        # Kafka Connect's Struct: every field of the schema, null where the document has none
        return {
            field["field"]: self.value(document[field["field"]], field) if field["field"] in document else None
            for field in schema["fields"]
        }

    def value(self, node: Any, schema: Schema) -> Any:
        if node is None:
            return None
        kind = schema["type"]
        if isinstance(node, dict):
            if kind != "struct":
                raise ExpansionFailed(f"an object where the schema has {kind}")
            return self.struct(node, schema)
        if isinstance(node, list):
            if kind != "array":
                raise ExpansionFailed(f"an array where the schema has {kind}")
            return [self.value(element, schema["items"]) for element in node]
        if isinstance(node, bool):
            ok = kind == "boolean"
        elif isinstance(node, int):
            ok = kind in ("int32", "int64") and kind == _int_type(node)
        elif isinstance(node, float):
            ok = kind == "double"
        else:
            ok = kind == "string"
        if not ok:
            raise ExpansionFailed(f"{node!r} does not fit the field's inferred schema {kind}")
        return node


def _int_type(value: int) -> str:
    if _INT32[0] <= value <= _INT32[1]:
        return "int32"
    if _INT64[0] <= value <= _INT64[1]:
        return "int64"
    return "double"


def _kind(node: Any) -> str:
    if isinstance(node, bool):
        return "boolean"
    if isinstance(node, (int, float)):
        return "number"
    if isinstance(node, str):
        return "string"
    if isinstance(node, list):
        return "array"
    return "object"


def _merge(left: Schema | None, right: Schema) -> Schema:
    """Debezium's ``mergeSchema``: the left struct's fields, then the right's new ones (a bytes field gives way); the
    merged struct keeps the left's name but not its optionality (``SchemaUtil.copySchemaBasics``), so it is required."""
    if left is None:
        return right
    fields = {f["field"]: f for f in left["fields"]}
    for field in right["fields"]:
        old = fields.get(field["field"])
        if old is None or (old != field and old["type"] == "bytes" and field["type"] != "bytes"):
            fields[field["field"]] = field
    merged: Schema = {"type": "struct", "fields": list(fields.values()), "optional": False}
    if left.get("name"):
        merged["name"] = left["name"]
    return merged
