"""A record as Kafka Connect's transforms see it, and the JSON converter's bytes it comes from and goes to.

Walflow builds each record's key and value as the JSON converter writes them, ``{"schema": ..., "payload": ...}``
(with their schemas whenever a chain runs: :attr:`ConnectorConfig.record_key_schemas`). A transform needs both
parts as data: :class:`Codec` parses them, and keeps each topic's schema text so that the records after the first
parse only their payload, and the transforms' per-schema caches see the very same schema object each time. After the
chain it writes the parts back, with or without their schemas as the converters say.

Schemas are the JSON converter's own form (dicts whose keys come in its order); :func:`struct` and
:func:`copy_basics` build new ones in that order, so that the bytes are those Kafka Connect writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import orjson

from walflow.errors import TransformError
from walflow.records.envelope import json_form

Schema = dict[str, Any]
Headers = list[tuple[str, bytes | None]]

#: the keys of a schema other than its type and its children, in the order the JSON converter writes them
_BASICS = ("name", "version", "doc", "parameters")


class Record:
    """One record between transforms. ``value_schema`` may be set while ``value`` is ``None`` (an unwrapped delete
    under ``delete.tombstone.handling.mode: tombstone``), as in Kafka Connect."""

    __slots__ = ("headers", "key", "key_schema", "topic", "value", "value_schema")

    def __init__(
        self, topic: str, key_schema: Schema | None, key: Any, value_schema: Schema | None, value: Any, headers: Headers
    ) -> None:
        self.topic = topic
        self.key_schema = key_schema
        self.key = key
        self.value_schema = value_schema
        self.value = value
        self.headers = headers

    def replace(self, **changes: Any) -> Record:
        new = Record(self.topic, self.key_schema, self.key, self.value_schema, self.value, self.headers)
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def part(self, which: str) -> tuple[Schema | None, Any]:
        """The key's or the value's schema and data (``which``: ``key`` or ``value``)."""
        return (self.key_schema, self.key) if which == "key" else (self.value_schema, self.value)

    def with_part(self, which: str, schema: Schema | None, data: Any) -> Record:
        if which == "key":
            return self.replace(key_schema=schema, key=data)
        return self.replace(value_schema=schema, value=data)


def struct(fields: Iterable[Schema], *, optional: bool, basics: Schema | None = None) -> Schema:
    """A struct schema in the JSON converter's order, with ``basics``' name, version, doc and parameters."""
    schema: Schema = {"type": "struct", "fields": list(fields), "optional": optional}
    if basics:
        for key in _BASICS:
            if basics.get(key) is not None:
                schema[key] = basics[key]
    return schema


def copy_basics(schema: Schema, *, optional: bool = False) -> Schema:
    """Kafka Connect's ``SchemaUtil.copySchemaBasics`` of a non-struct schema: its type, name, version, doc and
    parameters, without its default; required unless ``optional``."""
    out: Schema = {"type": schema["type"]}
    for child in ("items", "keys", "values"):
        if child in schema:
            out[child] = schema[child]
    if schema["type"] == "struct":
        out["fields"] = []
    out["optional"] = optional
    for key in _BASICS:
        if schema.get(key) is not None:
            out[key] = schema[key]
    return out


def as_field(schema: Schema, name: str) -> Schema:
    """``schema`` as the field ``name`` of a struct (the converter writes the name last)."""
    out = {k: v for k, v in schema.items() if k != "field"}
    out["field"] = name
    return out


def top_level(schema: Schema) -> Schema:
    """A field's schema on its own (a struct's field unwrapped into a record's value)."""
    return {k: v for k, v in schema.items() if k != "field"}


def field_of(schema: Schema | None, name: str) -> Schema | None:
    """The field ``name`` of a struct schema, or ``None``."""
    if schema is None or schema.get("type") != "struct":
        return None
    for candidate in schema["fields"]:
        if candidate["field"] == name:
            return cast(Schema, candidate)
    return None


def get(value: dict[str, Any], field: Schema, replace_null_with_default: bool) -> Any:
    """A struct's field value; a null replaced by the field's default where Kafka Connect's ``Struct.get`` would."""
    data = value.get(field["field"])
    if data is None and replace_null_with_default:
        return field.get("default")
    return data


def require_struct(record: Record, which: str, schema: Schema | None, data: Any, transform: str) -> dict[str, Any]:
    if schema is None or schema.get("type") != "struct" or not isinstance(data, dict):
        kind = "no schema" if schema is None else f"a {schema.get('type')} schema"
        raise TransformError(
            f"transform {transform!r} needs a struct as the record's {which}, and the record for topic "
            f"{record.topic!r} has {kind}; put it after a transform that makes a struct, or limit it to other topics "
            "with a predicate"
        )
    return data


class Codec:
    """The JSON converters' bytes to :class:`Record` s and back.

    :param key_schemas: whether keys are written with their schemas (``key.converter.schemas.enable``).
    :param value_schemas: the same for values.
    :param header_schemas: whether headers a transform adds carry their schemas (walflow writes headers in the form
        the keys use).
    """

    def __init__(self, key_schemas: bool, value_schemas: bool, header_schemas: bool) -> None:
        self.key_schemas = key_schemas
        self.value_schemas = value_schemas
        self.header_schemas = header_schemas
        #: (topic, part) -> the serialised text before the payload, and the schema it holds
        self._seen: dict[tuple[str, str], tuple[bytes, Schema]] = {}
        #: id(schema) -> (schema, the text before the payload): written once per output schema
        self._prefixes: dict[int, tuple[Schema, bytes]] = {}

    def decode(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None
    ) -> Record:
        key_schema, key_data = self._decode(topic, "key", key)
        value_schema, value_data = self._decode(topic, "value", value)
        return Record(topic, key_schema, key_data, value_schema, value_data, list(headers) if headers else [])

    def _decode(self, topic: str, part: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        seen = self._seen.get((topic, part))
        if seen is not None and data.startswith(seen[0]):
            return seen[1], orjson.loads(memoryview(data)[len(seen[0]) : -1])
        document = orjson.loads(data)
        if not isinstance(document, dict) or document.keys() != {"schema", "payload"}:
            raise TransformError(
                f"a {part} for topic {topic!r} lacks its schema, which the transforms need (walflow's own error)"
            )
        schema = document["schema"]
        if schema is not None:
            prefix = b'{"schema":' + orjson.dumps(schema) + b',"payload":'
            if data.startswith(prefix):
                self._seen[(topic, part)] = (prefix, schema)
        return schema, document["payload"]

    def encode(self, record: Record) -> tuple[bytes | None, bytes | None]:
        return (
            self._encode(record.key_schema, record.key, self.key_schemas),
            self._encode(record.value_schema, record.value, self.value_schemas),
        )

    def _encode(self, schema: Schema | None, data: Any, with_schema: bool) -> bytes | None:
        # the JSON converter writes nothing only for no schema and no data; a schema with a null payload is written
        if schema is None and data is None:
            return None
        if not with_schema:
            return orjson.dumps(data)
        known = self._prefixes.get(id(schema)) if schema is not None else None
        if known is None:
            prefix = b'{"schema":' + orjson.dumps(schema) + b',"payload":'
            if schema is not None:
                self._prefixes[id(schema)] = (schema, prefix)
        else:
            prefix = known[1]
        return prefix + orjson.dumps(data) + b"}"

    def header(self, schema: Schema, value: Any) -> bytes:
        """A header's bytes, as the JSON header converter writes them."""
        return json_form(schema, value, self.header_schemas)

    def header_value(self, data: bytes | None) -> Any:
        """What a header holds (its payload, when written with its schema)."""
        if data is None:
            return None
        document = orjson.loads(data)
        if self.header_schemas and isinstance(document, dict) and document.keys() == {"schema", "payload"}:
            return document["payload"]
        return document
